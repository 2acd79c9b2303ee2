/* outbox.c -- records from the outbox (Redis) to the stream USAGE.
 *
 * A record (from the script that wrote it, or read back from the outbox)
 * is stored in PostgreSQL first (store.c: what Redis may lose), then
 * completed with the scheduler's facts of its
 * attempt (tenant, product, rank; for a final record how the attempt
 * ended, which decides whether work since its last checkpoint is a
 * platform fault), encoded and published with its id as Nats-Msg-Id; it
 * leaves the outbox once the stream acknowledged it.  Whoever wrote a
 * record publishes it at once; a record whose claim ran out (a crashed
 * instance's, a publish that failed, a final record whose attempt the
 * scheduler has not ended yet) is found by the outbox task.  Every
 * instance may publish any record: its content is fixed in Redis, so the
 * same id always carries the same bytes. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/buf.h"
#include "gp/call.h"
#include "gp/kv.h"
#include "gp/log.h"
#include "gp/shard.h"
#include "metering.h"
#include "scripts.h"

#define CLAIM_BATCH 128

typedef struct pubjob {
    metering         *m;
    unsigned          shard;
    char              id[MSG_USAGE_RECORD_ID_MAXLEN + 1];
    msg_usage_record  r;
    char              end_event[24];
} pubjob;

/* ---- the scheduler's facts, cached ------------------------------------------------ */

typedef struct facts_call {
    metering          *m;
    char               key[200];
    metering_facts_cb *cb;
    void              *arg;
} facts_call;

static void
facts_read(void *arg, gp_err err, const void *reply, const char *detail)
{
    facts_call *c = arg;

    (void)detail;
    if (err == GP_EOK) {
        metering_facts *slot = &c->m->facts[gp_fnv1a(c->key) % METERING_FACTS_SLOTS];

        gp_msg_clear(&msg_attempt_facts_desc, &slot->f);
        slot->f = *(const msg_attempt_facts *)reply;    /* plain fields only: no arrays */
        snprintf(slot->key, sizeof(slot->key), "%s", c->key);
        slot->valid = true;
        c->cb(c->arg, GP_EOK, &slot->f);
    } else {
        c->cb(c->arg, err, NULL);
    }
    free(c);
}

void
metering_facts_get(metering *m, const char *job, uint32_t att, const char *node, bool need_ended,
                   metering_facts_cb *cb, void *arg)
{
    char                      key[200], subj[GP_MAX_SUBJECT];
    metering_facts           *slot;
    facts_call               *c;
    msg_attempt_facts_request q = {0};

    snprintf(key, sizeof(key), "%s.%u.%s", job, att, node);
    slot = &m->facts[gp_fnv1a(key) % METERING_FACTS_SLOTS];
    if (slot->valid && strcmp(slot->key, key) == 0 && (slot->f.ended || !need_ended)) {
        cb(arg, GP_EOK, &slot->f);
        return;
    }
    if ((c = calloc(1, sizeof(*c))) == NULL) {
        cb(arg, GP_ENOMEM, NULL);
        return;
    }
    c->m = m;
    c->cb = cb;
    c->arg = arg;
    snprintf(c->key, sizeof(c->key), "%s", key);
    snprintf(q.job_id, sizeof(q.job_id), "%s", job);
    q.attempt = att;
    snprintf(q.node, sizeof(q.node), "%s", node);
    if (gp_op_subject(GP_OP_INT_SCHED_ATTEMPT, subj, sizeof(subj), NULL) != GP_EOK ||
        gp_call(gp_app_bus(m->app), subj, &msg_attempt_facts_request_desc, &q,
                &msg_attempt_facts_desc, m->cfg->facts_timeout_ms, facts_read, c) != GP_EOK) {
        free(c);
        cb(arg, GP_EUNAVAIL, NULL);
    }
}

/* ---- one record ------------------------------------------------------------------- */

static void
job_end(pubjob *j)
{
    j->m->publishing--;
    *j->m->m_publishing = j->m->publishing;
    free(j);
}

static void
acked(void *arg, const redisReply *rep, gp_err err)
{
    (void)rep;
    (void)err;              /* not removed: published again later, a duplicate */
    job_end(arg);
}

static void
stored(void *arg, gp_err err)
{
    pubjob     *j = arg;
    metering   *m = j->m;
    char        key[2][METERING_KEY_LEN];
    const char *keys[2] = {key[0], key[1]};
    const char *argv[1] = {j->id};

    if (err != GP_EOK) {      /* its claim runs out and the outbox task sends it again */
        (*m->m_publish_errors)++;
        job_end(j);
        return;
    }
    (*m->m_published)++;
    metering_store_published(m, j->id);
    metering_key(key[0], j->shard, "recs");
    metering_key(key[1], j->shard, "out");
    if (gp_kvscript_call(&m->ack, gp_app_kv(m->app), acked, j, 2, keys, 1, argv, NULL) != GP_EOK)
        job_end(j);
}

static void
to_review(pubjob *j, const char *why)
{
    char        key[3][METERING_KEY_LEN];
    const char *keys[3] = {key[0], key[1], key[2]};
    const char *argv[2] = {j->id, why};

    (*j->m->m_review)++;
    GP_WARN("metering_record_review", "id=%s why=\"%s\"", j->id, why);
    metering_key(key[0], j->shard, "recs");
    metering_key(key[1], j->shard, "out");
    metering_key(key[2], j->shard, "review");
    if (gp_kvscript_call(&j->m->review, gp_app_kv(j->m->app), acked, j, 3, keys, 2, argv, NULL) !=
        GP_EOK)
        job_end(j);
}

/* Platform faults: the customer is not charged for work since the last
 * checkpoint (ARCHITECTURE.md, the retry rule and metering). */
static bool
platform_fault(const msg_attempt_facts *f, const char *end_event)
{
    return f->state == MSG_ATTEMPT_FACTS_STATE_LOST || f->state == MSG_ATTEMPT_FACTS_STATE_SUPERSEDED ||
           f->state == MSG_ATTEMPT_FACTS_STATE_PREEMPTED || strcmp(end_event, "lease_expired") == 0;
}

static void
with_facts(void *arg, gp_err err, const msg_attempt_facts *f)
{
    pubjob           *j = arg;
    msg_usage_record *r = &j->r;
    gp_buf            b;
    char              subj[GP_MAX_SUBJECT];
    gp_err            rc;

    if (err == GP_ENOTFOUND) {
        to_review(j, "unknown attempt: the scheduler has no such attempt on that node");
        return;
    }
    if (err != GP_EOK) {              /* its claim runs out: tried again then */
        (*j->m->m_facts_errors)++;
        GP_WARN("metering_facts_failed", "id=%s code=%s", j->id, gp_err_name(err));
        job_end(j);
        return;
    }
    if (r->final && !f->ended) {      /* the scheduler has not taken the end yet: later */
        (*j->m->m_final_waits)++;
        job_end(j);
        return;
    }
    snprintf(r->tenant, sizeof(r->tenant), "%s", f->tenant);
    r->rank = f->rank;
    r->gpus = f->gpus;
    GP_SET_HAS(r, MSG_USAGE_RECORD__GPUS);
    if (f->pool[0]) {
        snprintf(r->pool, sizeof(r->pool), "%s", f->pool);
        GP_SET_HAS(r, MSG_USAGE_RECORD__POOL);
    }
    if (f->product[0]) {
        snprintf(r->product, sizeof(r->product), "%s", f->product);
        GP_SET_HAS(r, MSG_USAGE_RECORD__PRODUCT);
    }
    if (GP_HAS(f, MSG_ATTEMPT_FACTS__PRICE_MICROS_PER_GPU_HOUR) && f->currency[0]) {
        r->price_micros_per_gpu_hour = f->price_micros_per_gpu_hour;
        snprintf(r->currency, sizeof(r->currency), "%s", f->currency);
        GP_SET_HAS(r, MSG_USAGE_RECORD__PRICE_MICROS_PER_GPU_HOUR);
        GP_SET_HAS(r, MSG_USAGE_RECORD__CURRENCY);
    }
    if (r->final) {
        r->end = f->state;
        r->fault = platform_fault(f, j->end_event);
        snprintf(r->reason, sizeof(r->reason), "%s", f->reason);
        GP_SET_HAS(r, MSG_USAGE_RECORD__END);
        GP_SET_HAS(r, MSG_USAGE_RECORD__FAULT);
        GP_SET_HAS(r, MSG_USAGE_RECORD__REASON);
    }
    gp_buf_init(&b, 0);
    rc = gp_msg_encode(&msg_usage_record_desc, r, &b);
    if (rc == GP_EOK)
        rc = gp_op_subjectf(GP_OP_USAGE_RECORD, subj, sizeof(subj), r->site);
    if (rc == GP_EOK)
        rc = gp_bus_js_pub(gp_app_bus(j->m->app), subj, j->id, b.p, b.n, stored, j);
    gp_buf_fini(&b);
    if (rc != GP_EOK) {
        (*j->m->m_publish_errors)++;
        job_end(j);
    }
}

/* scripts.h's record line -> the record (facts still to come). */
static bool
parse_line(pubjob *j, const char *line)
{
    msg_usage_record *r = &j->r;
    metering_line     l;
    const char       *endev = l.end_event;

    if (!metering_line_read(line, &l))
        return false;
    snprintf(r->id, sizeof(r->id), "%s", j->id);
    snprintf(r->job_id, sizeof(r->job_id), "%s", l.job);
    snprintf(r->node, sizeof(r->node), "%s", l.node);
    snprintf(r->site, sizeof(r->site), "%s", l.site);
    snprintf(j->end_event, sizeof(j->end_event), "%s", l.end_event);
    r->attempt = l.att;
    r->window = l.window;
    r->window_ms = l.window_ms;
    r->first_ms = l.first_ms;
    r->last_ms = l.last_ms;
    r->gpu_ms = l.gpu_ms;
    r->energy_mj = l.energy_mj;
    r->from_gpu_ms = l.from_gpu_ms;
    r->to_gpu_ms = l.from_gpu_ms + l.gpu_ms;
    r->from_energy_mj = l.from_energy_mj;
    r->to_energy_mj = l.from_energy_mj + l.energy_mj;
    r->dropped_gpu_ms = l.dropped_gpu_ms;
    r->resets = l.resets;
    r->site_seq = l.site_seq;
    r->final = l.final;
    r->ckpt_gpu_ms = l.ckpt_gpu_ms;
    r->ckpt_energy_mj = l.ckpt_energy_mj;
    r->has = ~0ull;             /* every field present... */
    r->has &= ~((uint64_t)1 << MSG_USAGE_RECORD__POOL | (uint64_t)1 << MSG_USAGE_RECORD__PRODUCT |
                (uint64_t)1 << MSG_USAGE_RECORD__END | (uint64_t)1 << MSG_USAGE_RECORD__FAULT |
                (uint64_t)1 << MSG_USAGE_RECORD__REASON | (uint64_t)1 << MSG_USAGE_RECORD__GPUS |
                (uint64_t)1 << MSG_USAGE_RECORD__PRICE_MICROS_PER_GPU_HOUR |
                (uint64_t)1 << MSG_USAGE_RECORD__CURRENCY);  /* ...but what facts give */
    if (!r->final)
        r->has &= ~((uint64_t)1 << MSG_USAGE_RECORD__END_EVENT);
    else
        r->end_event = strcmp(endev, "exited") == 0          ? MSG_USAGE_RECORD_END_EVENT_EXITED
                     : strcmp(endev, "killed") == 0          ? MSG_USAGE_RECORD_END_EVENT_KILLED
                     : strcmp(endev, "lease_expired") == 0   ? MSG_USAGE_RECORD_END_EVENT_LEASE_EXPIRED
                     : strcmp(endev, "failed_to_start") == 0 ? MSG_USAGE_RECORD_END_EVENT_FAILED_TO_START
                                                             : MSG_USAGE_RECORD_END_EVENT_NONE;
    return true;
}

/* Stored (or not: its claim runs out, and the outbox task tries again). */
static void
persisted(void *arg, gp_err err)
{
    pubjob *j = arg;

    if (err != GP_EOK) {
        job_end(j);
        return;
    }
    metering_facts_get(j->m, j->r.job_id, j->r.attempt, j->r.node, j->r.final, with_facts, j);
}

static void
take_line(pubjob *j, const char *line)
{
    if (!parse_line(j, line)) {
        to_review(j, "unreadable record line");
        return;
    }
    metering_store(j->m, j->id, line, persisted, j);
}

static void
line_read(void *arg, const redisReply *rep, gp_err err)
{
    pubjob *j = arg;

    if (err != GP_EOK || rep->type == REDIS_REPLY_ERROR) {
        job_end(j);
        return;
    }
    if (rep->type != REDIS_REPLY_STRING) {   /* published and removed meanwhile */
        char key[METERING_KEY_LEN];

        metering_key(key, j->shard, "out");
        gp_kv_cmdf(gp_app_kv(j->m->app), NULL, NULL, "ZREM %s %s", key, j->id);
        job_end(j);
        return;
    }
    take_line(j, rep->str);
}

void
metering_publish(metering *m, unsigned shard, const char *id, const char *line)
{
    char    key[METERING_KEY_LEN];
    pubjob *j;

    if (id == NULL)
        return;
    if (m->publishing >= m->cfg->publish_max || (j = calloc(1, sizeof(*j))) == NULL) {
        if (line != NULL)                /* stored now all the same: Redis may lose it */
            metering_store(m, id, line, NULL, NULL);
        return;                          /* claimed: the outbox task comes back to it */
    }
    j->m = m;
    j->shard = shard;
    snprintf(j->id, sizeof(j->id), "%s", id);
    m->publishing++;
    *m->m_publishing = m->publishing;
    if (line != NULL) {
        take_line(j, line);
        return;
    }
    metering_key(key, shard, "recs");
    if (gp_kv_cmdf(gp_app_kv(m->app), line_read, j, "HGET %s %s", key, id) != GP_EOK)
        job_end(j);
}

void
metering_publish_all(metering *m, unsigned shard, const redisReply *rep)
{
    for (size_t i = 0; rep->type == REDIS_REPLY_ARRAY && i + 1 < rep->elements; i += 2) {
        const redisReply *id = rep->element[i], *line = rep->element[i + 1];

        if (id->type != REDIS_REPLY_STRING || line->type != REDIS_REPLY_STRING)
            continue;
        (*m->m_records)++;
        metering_publish(m, shard, id->str, line->str);
    }
}

/* ---- the outbox task ---------------------------------------------------------------- */

typedef struct claim_call {
    metering *m;
    unsigned  shard;
} claim_call;

static void
claimed(void *arg, const redisReply *rep, gp_err err)
{
    claim_call *c = arg;

    if (err == GP_EOK && rep->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < rep->elements; i++)
            if (rep->element[i]->type == REDIS_REPLY_STRING)
                metering_publish(c->m, c->shard, rep->element[i]->str, NULL);
    if (err == GP_EOK && rep->type == REDIS_REPLY_STRING)
        metering_shard_stale(c->m, c->shard);         /* 'stale': its outbox is rebuilt */
    free(c);
}

void
metering_outbox_run(gp_app *app, void *arg)
{
    metering *m = arg;
    char      key[METERING_KEY_LEN], epoch[METERING_KEY_LEN], lim[16], claim[24];

    (void)app;
    snprintf(lim, sizeof(lim), "%d", CLAIM_BATCH);
    snprintf(claim, sizeof(claim), "%u", m->cfg->claim_ms);
    for (unsigned s = 0; s < GP_SHARDS && m->publishing < m->cfg->publish_max; s++) {
        const char *keys[2] = {key, epoch};
        const char *argv[2] = {lim, claim};
        claim_call *c = calloc(1, sizeof(*c));

        if (c == NULL)
            return;
        c->m = m;
        c->shard = s;
        metering_key(key, s, "out");
        metering_key(epoch, s, "epoch");
        if (gp_kvscript_call(&m->due, gp_app_kv(m->app), claimed, c, 2, keys, 2, argv, NULL) !=
            GP_EOK) {
            free(c);
            return;
        }
    }
}

void
metering_outbox_start(metering *m)
{
    m->facts = calloc(METERING_FACTS_SLOTS, sizeof(*m->facts));
}

void
metering_outbox_free(metering *m)
{
    free(m->facts);
    m->facts = NULL;
}
