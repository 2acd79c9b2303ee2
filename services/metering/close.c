/* close.c -- the ends of an attempt's usage.  An agent's final event
 * (exited, killed, lease_expired, failed_to_start) brings its final
 * counters and closes it at once; a checkpoint is remembered (the customer
 * is not charged for work after the last checkpoint of an attempt lost to
 * a platform fault).  An attempt whose node stopped reporting without a
 * final event (a power cut) is closed at its last confirmed reading once
 * the scheduler says the attempt ended.  The sweep also writes the
 * records of windows that closed without a later reading.  An end or a
 * checkpoint of an attempt with no state yet seeds it (store.c) and is
 * nak'ed, taken when it comes again; one in a shard whose epoch is missing
 * waits for its rebuild (epoch.c) the same way. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/id.h"
#include "gp/kv.h"
#include "gp/log.h"
#include "gp/shard.h"
#include "metering.h"
#include "scripts.h"

#define DUE_BATCH 256

static char        attempts_subject[GP_MAX_SUBJECT] = GP_PAT_NODE_ATTEMPT;
static const char *attempts_subjects[] = {attempts_subject, NULL};
static char        usage_subject[GP_MAX_SUBJECT] = GP_PAT_USAGE_RECORD;
static const char *usage_subjects[] = {usage_subject, NULL};

/* ATTEMPTS as the scheduler declares it (the same configuration, so the
 * two never fight over it); USAGE: a month of records (billing's own
 * table is the permanent record of which ids were taken), a republish
 * within 10 minutes (a claim that expired mid-publish) stored once. */
const gp_stream_cfg metering_streams[] = {
    {.name = "ATTEMPTS", .subjects = (const char **)attempts_subjects,
     .max_age_s = 7 * 24 * 3600, .max_bytes = 1LL << 30, .duplicate_window_s = 600,
     .memory = false},
    /* 4 GiB: ~13 M records of ~300 bytes; when full, a record is refused
     * and stays in the outbox (StreamFull fired at 90%) */
    {.name = "USAGE", .subjects = (const char **)usage_subjects, .max_age_s = 30 * 24 * 3600,
     .max_bytes = 4LL << 30, .duplicate_window_s = 600, .memory = false},
    {.name = NULL},
};

/* ---- closing ------------------------------------------------------------------ */

typedef struct close_call {
    metering *m;
    gp_req   *req;                  /* NULL: closed by the sweep */
    unsigned  shard;
    bool      seeded;               /* 'need' was answered once: seeded, sent again */
    char      site[64], node[64], job[64], end_event[24];
    uint32_t  att;
    bool      counters;
    uint64_t  gpu_ms, energy_mj;
} close_call;

/* A script's 'stale' (the shard is marked) or 'need' (the attempt's node
 * is seeded): true when it was one of them. */
static bool
not_now(metering *m, const redisReply *rep, unsigned shard, const char *site, const char *node,
        const char *job, uint32_t att)
{
    if (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_STATUS)
        return false;
    if (strcmp(rep->str, "need") == 0)
        metering_seed(m, site, node, job, att, NULL, NULL);
    else
        metering_shard_stale(m, shard);
    return true;
}

static void
close_end(close_call *c, gp_err err, const char *why)
{
    if (c->req != NULL && err != GP_EOK)   /* nak'ed: delivered again */
        gp_req_done(c->req, gp_req_fail(c->req, GP_EUNAVAIL, "Redis: %s", why));
    else if (c->req != NULL)
        gp_req_done(c->req, GP_EOK);
    free(c);
}

static gp_err close_send(close_call *c);

/* Seeded after 'need': the close again, at once (a redelivery would come
 * after its backoff, and a reading that late may span a loss since). */
static void
reseeded(void *arg, gp_err err)
{
    close_call *c = arg;

    if (err == GP_EOK)
        err = close_send(c);
    if (err != GP_EOK)
        close_end(c, err, "the attempt's state is being taken up");
}

static void
closed(void *arg, const redisReply *rep, gp_err err)
{
    close_call *c = arg;
    metering   *m = c->m;

    if (err == GP_EOK && !c->seeded && (rep->type == REDIS_REPLY_STRING) &&
        strcmp(rep->str, "need") == 0) {
        c->seeded = true;
        metering_seed(m, c->site, c->node, c->job, c->att, reseeded, c);
        return;
    }
    if (err == GP_EOK && not_now(m, rep, c->shard, c->site, c->node, c->job, c->att))
        err = GP_EUNAVAIL;
    if (err != GP_EOK || rep->type != REDIS_REPLY_ARRAY || rep->elements < 3) {
        close_end(c, GP_EUNAVAIL, err != GP_EOK ? gp_err_name(err) : "bad reply");
        return;
    }
    if (rep->element[0]->integer == 0)
        (*(c->req != NULL ? m->m_closed_event : m->m_closed_silent))++;
    *m->m_dropped += strtoull(rep->element[1]->str != NULL ? rep->element[1]->str : "0", NULL, 10);
    metering_publish_all(m, c->shard, rep->element[2]);
    close_end(c, GP_EOK, NULL);
}

/* KEYS open seq recs out state closed lost epoch; ARGV scripts.h's. */
static gp_err
close_send(close_call *c)
{
    metering   *m = c->m;
    unsigned    shard = c->shard;
    char        key[8][METERING_KEY_LEN], member[200], num[6][24];
    const char *keys[8];

    metering_member(member, sizeof(member), c->job, c->att, c->node);
    metering_key(key[0], shard, "open");
    metering_key(key[1], shard, "seq");
    metering_key(key[2], shard, "recs");
    metering_key(key[3], shard, "out");
    metering_att_key(key[4], shard, 'a', member);
    metering_att_key(key[5], shard, 'd', member);
    snprintf(key[6], METERING_KEY_LEN, "gp:{%u}:m:lost:%s", shard, c->node);
    metering_key(key[7], shard, "epoch");
    for (int i = 0; i < 8; i++)
        keys[i] = key[i];
    snprintf(num[0], 24, "%u", m->cfg->window_ms);
    snprintf(num[1], 24, "%u", m->cfg->grace_ms);
    snprintf(num[2], 24, "%u", m->cfg->claim_ms);
    snprintf(num[3], 24, "%llu", (unsigned long long)c->gpu_ms);
    snprintf(num[4], 24, "%llu", (unsigned long long)c->energy_mj);
    snprintf(num[5], 24, "%u", c->att);
    const char *argv[13] = {num[0], num[1], num[2], m->frozen ? "1" : "0", member, c->job, num[5],
                            c->node, c->site, c->end_event, c->counters ? "1" : "0", num[3],
                            num[4]};

    return gp_kvscript_call(&m->close, gp_app_kv(m->app), closed, c, 8, keys, 13, argv, NULL);
}

static gp_err
close_attempt(metering *m, gp_req *req, const char *site, const char *node, const char *job,
              uint32_t att, const char *end_event, bool counters, uint64_t gpu_ms,
              uint64_t energy_mj)
{
    close_call *c = calloc(1, sizeof(*c));
    gp_err      rc;

    if (c == NULL)
        return GP_ENOMEM;
    *c = (close_call){.m = m, .req = req, .shard = gp_shard_of(site), .att = att,
                      .counters = counters, .gpu_ms = gpu_ms, .energy_mj = energy_mj};
    snprintf(c->site, sizeof(c->site), "%s", site);
    snprintf(c->node, sizeof(c->node), "%s", node);
    snprintf(c->job, sizeof(c->job), "%s", job);
    snprintf(c->end_event, sizeof(c->end_event), "%s", end_event);
    rc = close_send(c);
    if (rc != GP_EOK)
        free(c);
    return rc;
}

/* ---- the agents' attempt events ------------------------------------------------ */

static void
ckpt_done(void *arg, const redisReply *rep, gp_err err)
{
    gp_req                  *req = arg;
    const msg_attempt_event *ev = gp_req_in(req);

    if (err == GP_EOK && not_now(gp_req_state(req), rep, gp_shard_of(ev->site), ev->site,
                                 ev->node, ev->job_id, ev->attempt))
        err = GP_EUNAVAIL;                   /* nak'ed: taken when it comes again */
    if (err != GP_EOK || rep->type != REDIS_REPLY_INTEGER) {
        gp_req_done(req, gp_req_fail(req, GP_EUNAVAIL, "Redis: %s",
                                     err != GP_EOK ? gp_err_name(err) : "bad reply"));
        return;
    }
    gp_req_done(req, GP_EOK);
}

static gp_err
checkpoint(metering *m, gp_req *req, const msg_attempt_event *ev)
{
    unsigned    shard = gp_shard_of(ev->site);
    char        key[2][METERING_KEY_LEN], member[200], a[16], g[24], e[24];
    const char *keys[2] = {key[0], key[1]};
    const char *argv[6] = {ev->job_id, a, ev->node, ev->site, g, e};

    metering_member(member, sizeof(member), ev->job_id, ev->attempt, ev->node);
    metering_att_key(key[0], shard, 'a', member);
    metering_att_key(key[1], shard, 'd', member);
    snprintf(a, sizeof(a), "%u", ev->attempt);
    snprintf(g, sizeof(g), "%llu", (unsigned long long)ev->gpu_ms);
    snprintf(e, sizeof(e), "%llu", (unsigned long long)ev->energy_mj);
    (*m->m_checkpoints)++;
    if (gp_kvscript_call(&m->ckpt, gp_app_kv(m->app), ckpt_done, req, 2, keys, 6, argv, NULL) !=
        GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "Redis unavailable");
    return GP_EPENDING;
}

static gp_err
on_attempt_event(gp_req *req, const void *in, void *out)
{
    const msg_attempt_event *ev = in;
    metering                *m = gp_req_state(req);
    bool                     counters = GP_HAS(ev, MSG_ATTEMPT_EVENT__GPU_MS);
    gp_err                   rc;

    (void)out;
    if (strcmp(ev->site, gp_req_param(req, "site")) != 0 ||
        strcmp(ev->node, gp_req_param(req, "node")) != 0)
        return gp_req_fail(req, GP_EDENIED, "site, node: the body names another node than the "
                           "subject");
    if (!gp_id_ok(ev->job_id) || !gp_id_ok(ev->site) || !gp_id_ok(ev->node))
        return gp_req_fail(req, GP_EINVAL, "job_id, site, node: must be 1 to 63 of "
                           "[A-Za-z0-9_-]");
    if (ev->gpu_ms >= (1ull << 53) || ev->energy_mj >= (1ull << 53))
        return gp_req_fail(req, GP_ERANGE, "a counter past 2^53");
    switch (ev->event) {
    case MSG_ATTEMPT_EVENT_EVENT_STARTED:
        return GP_EOK;
    case MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED:
        return counters ? checkpoint(m, req, ev) : GP_EOK;
    default:
        break;
    }
    rc = close_attempt(m, req, ev->site, ev->node, ev->job_id, ev->attempt,
                       msg_attempt_event_event_names[ev->event], counters, ev->gpu_ms,
                       ev->energy_mj);
    if (rc != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "Redis: %s", gp_err_name(rc));
    return GP_EPENDING;
}

/* Redelivered after 1 s, doubling, up to 12 deliveries before the
 * dead-letter stream keeps it. */
static const gp_durable attempts_durable = {.stream = "ATTEMPTS", .name = "metering-attempts",
                                            .max_deliver = 12, .ack_wait_ms = 30000,
                                            .backoff_ms = 1000};

const gp_route metering_attempt_routes[] = {
    {GP_OP_NODE_ATTEMPT, on_attempt_event, 0, 10000, NULL, &attempts_durable},
    {NULL},
};

/* ---- the sweep ----------------------------------------------------------------- */

typedef struct tick_call {
    metering *m;
    unsigned  shard;
    char      member[200];
    char      site[64];
} tick_call;

/* A silent attempt the scheduler says ended: closed at its last reading. */
static void
silent_facts(void *arg, gp_err err, const msg_attempt_facts *f)
{
    tick_call *t = arg;

    if (err == GP_EOK && f->ended)
        close_attempt(t->m, NULL, f->site, f->node, f->job_id, f->attempt, "none", false, 0, 0);
    else if (err == GP_ENOTFOUND) {    /* never granted: closed, its records go to review */
        char     job[64], node[64], site[64];
        unsigned att;

        if (sscanf(t->member, "%63[^:]:%u:%63s", job, &att, node) == 3 &&
            sscanf(t->site, "%63s", site) == 1) {
            GP_WARN("metering_unknown_attempt", "job=%s attempt=%u node=%s", job, att, node);
            close_attempt(t->m, NULL, site, node, job, att, "none", false, 0, 0);
        }
    }
    free(t);
}

static void
ticked(void *arg, const redisReply *rep, gp_err err)
{
    tick_call *t = arg;
    metering  *m = t->m;
    char       job[64], node[64];
    unsigned   att;

    if (err == GP_EOK && (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS))
        metering_shard_stale(m, t->shard);    /* 'stale' */
    if (err != GP_EOK || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
        rep->element[0]->integer < 0) {
        free(t);
        return;
    }
    if (rep->elements >= 4)
        metering_publish_all(m, t->shard, rep->element[3]);
    if (rep->elements >= 3 && rep->element[2]->type == REDIS_REPLY_STRING)
        snprintf(t->site, sizeof(t->site), "%s", rep->element[2]->str);
    if (rep->element[0]->integer == 1 &&
        sscanf(t->member, "%63[^:]:%u:%63s", job, &att, node) == 3) {
        metering_facts_get(m, job, att, node, true, silent_facts, t);
        return;
    }
    free(t);
}

static void
tick(metering *m, unsigned shard, const char *member)
{
    char        key[6][METERING_KEY_LEN], num[4][24];
    const char *keys[6] = {key[0], key[1], key[2], key[3], key[4], key[5]};
    const char *argv[5] = {num[0], num[1], num[2], num[3], member};
    tick_call  *t;

    if ((t = calloc(1, sizeof(*t))) == NULL)
        return;
    t->m = m;
    t->shard = shard;
    snprintf(t->member, sizeof(t->member), "%s", member);
    metering_key(key[0], shard, "open");
    metering_key(key[1], shard, "seq");
    metering_key(key[2], shard, "recs");
    metering_key(key[3], shard, "out");
    metering_att_key(key[4], shard, 'a', member);
    metering_key(key[5], shard, "epoch");
    snprintf(num[0], 24, "%u", m->cfg->window_ms);
    snprintf(num[1], 24, "%u", m->cfg->grace_ms);
    snprintf(num[2], 24, "%u", m->cfg->claim_ms);
    snprintf(num[3], 24, "%u", m->cfg->silent_ms);
    if (gp_kvscript_call(&m->tick, gp_app_kv(m->app), ticked, t, 6, keys, 5, argv, NULL) != GP_EOK)
        free(t);
}

typedef struct due_call {
    metering *m;
    unsigned  shard;
} due_call;

static void
due_read(void *arg, const redisReply *rep, gp_err err)
{
    due_call *d = arg;

    if (err == GP_EOK && rep->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < rep->elements; i++)
            if (rep->element[i]->type == REDIS_REPLY_STRING)
                tick(d->m, d->shard, rep->element[i]->str);
    if (err == GP_EOK && rep->type == REDIS_REPLY_STRING)
        metering_shard_stale(d->m, d->shard);         /* 'stale' */
    free(d);
}

/* Every shard's due attempts: windows over, silences to check. */
void
metering_sweep_run(gp_app *app, void *arg)
{
    metering *m = arg;
    char      key[METERING_KEY_LEN], epoch[METERING_KEY_LEN], lim[16], re[24];

    (void)app;
    snprintf(lim, sizeof(lim), "%d", DUE_BATCH);
    snprintf(re, sizeof(re), "%u", m->cfg->claim_ms);
    for (unsigned s = 0; s < GP_SHARDS; s++) {
        const char *keys[2] = {key, epoch};
        const char *argv[2] = {lim, re};
        due_call   *d = calloc(1, sizeof(*d));

        if (d == NULL)
            return;
        d->m = m;
        d->shard = s;
        metering_key(key, s, "open");
        metering_key(epoch, s, "epoch");
        if (gp_kvscript_call(&m->due, gp_app_kv(m->app), due_read, d, 2, keys, 2, argv, NULL) !=
            GP_EOK) {
            free(d);
            return;
        }
    }
}
