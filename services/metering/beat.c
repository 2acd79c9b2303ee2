/* beat.c -- every heartbeat's attempt counters into the attempts' windows
 * (one script call per beat, all the keys in the site's shard); which
 * nodes were lost (their next reading is not counted: it spans the time
 * the node was lost) and whether the control plane is frozen (nothing is
 * counted while it is).  An attempt the script has no state for is seeded
 * from PostgreSQL (store.c) and counted from the next beat on: its
 * counters are cumulative, so the reading left out is in the next one.  A
 * shard whose epoch is missing takes nothing until its rebuild (epoch.c). */
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

#define BEAT_MAX MSG_HEARTBEAT_ATTEMPTS_MAXITEMS
/* a counter Lua holds exactly (doubles): 2^53 ms is 285,000 years */
#define COUNTER_MAX (1ull << 53)

typedef struct beat_call {
    metering            *m;
    gp_req              *req;
    const msg_heartbeat *hb;       /* in req's input: a beat, or a lease renewal's */
    unsigned             shard;
} beat_call;

/* The attempts the script had no state for: seeded (store.c). */
static void
seed_needed(beat_call *c, const redisReply *need)
{
    const msg_heartbeat     *hb = c->hb;
    const msg_attempt_usage *u = hb->attempts.v;

    for (size_t i = 0; need->type == REDIS_REPLY_ARRAY && i < need->elements; i++) {
        long long k = need->element[i]->type == REDIS_REPLY_INTEGER ? need->element[i]->integer : 0;

        if (k >= 1 && k <= (long long)hb->attempts.n)
            metering_seed(c->m, hb->site, hb->node, u[k - 1].job_id, u[k - 1].attempt, NULL,
                          NULL);
    }
}

static void
beat_done(void *arg, const redisReply *rep, gp_err err)
{
    beat_call *c = arg;
    metering  *m = c->m;

    if (err == GP_EOK && (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS)) {
        metering_shard_stale(m, c->shard);   /* 'stale' */
        err = GP_EUNAVAIL;
    }
    if (err != GP_EOK || rep->type != REDIS_REPLY_ARRAY || rep->elements < 7) {
        /* not taken: the next beat's counters cover this one's */
        gp_req_done(c->req, err != GP_EOK ? err : GP_EINTERNAL);
        free(c);
        return;
    }
    *m->m_stale += (uint64_t)rep->element[0]->integer;
    *m->m_dropped += strtoull(rep->element[1]->str != NULL ? rep->element[1]->str : "0", NULL, 10);
    *m->m_resets += (uint64_t)rep->element[2]->integer;
    *m->m_late += (uint64_t)rep->element[3]->integer;
    *m->m_implausible += (uint64_t)rep->element[4]->integer;
    seed_needed(c, rep->element[5]);
    metering_publish_all(m, c->shard, rep->element[6]);
    gp_req_done(c->req, GP_EOK);
    free(c);
}

/* Arguments of the script, per scripts.h. */
typedef struct beat_args {
    char        key[6 + 2 * BEAT_MAX][METERING_KEY_LEN];
    const char *keys[6 + 2 * BEAT_MAX];
    char        num[4 + 4 * BEAT_MAX][24];
    char        member[BEAT_MAX][200];
    const char *argv[9 + 5 * BEAT_MAX];
} beat_args;

static gp_err
on_beat(gp_req *req, const void *in, void *out)
{
    const msg_heartbeat *hb = in;
    metering            *m = gp_req_state(req);
    const msg_attempt_usage *u = hb->attempts.v;
    unsigned             shard, n = 0;
    beat_args           *a;
    beat_call           *c;
    gp_err               rc;

    (void)out;
    if (strcmp(gp_req_param(req, "site"), hb->site) != 0 ||
        strcmp(gp_req_param(req, "node"), hb->node) != 0)
        return gp_req_fail(req, GP_EDENIED, "subject is for %s/%s but the body says %s/%s",
                           gp_req_param(req, "site"), gp_req_param(req, "node"), hb->site,
                           hb->node);
    (*m->m_beats)++;
    if (hb->attempts.n == 0)
        return GP_EOK;
    for (uint32_t i = 0; i < hb->attempts.n; i++)
        if (!gp_id_ok(u[i].job_id) || u[i].gpu_ms >= COUNTER_MAX || u[i].energy_mj >= COUNTER_MAX)
            return gp_req_fail(req, GP_ERANGE, "attempt %u: bad job id or a counter past 2^53", i);
    if ((a = calloc(1, sizeof(*a))) == NULL || (c = calloc(1, sizeof(*c))) == NULL) {
        free(a);
        return gp_req_fail(req, GP_ENOMEM, "out of memory");
    }
    shard = gp_shard_of(hb->site);
    metering_key(a->key[0], shard, "open");
    metering_key(a->key[1], shard, "seq");
    metering_key(a->key[2], shard, "recs");
    metering_key(a->key[3], shard, "out");
    snprintf(a->key[4], METERING_KEY_LEN, "gp:{%u}:m:lost:%s", shard, hb->node);
    metering_key(a->key[5], shard, "epoch");
    snprintf(a->num[0], 24, "%u", m->cfg->window_ms);
    snprintf(a->num[1], 24, "%u", m->cfg->grace_ms);
    snprintf(a->num[2], 24, "%u", m->cfg->claim_ms);
    snprintf(a->num[3], 24, "%llu", (unsigned long long)hb->seq);
    a->argv[0] = a->num[0];
    a->argv[1] = a->num[1];
    a->argv[2] = a->num[2];
    a->argv[3] = m->frozen ? "1" : "0";
    a->argv[4] = hb->site;
    a->argv[5] = hb->node;
    a->argv[6] = a->num[3];
    snprintf(a->num[4], 24, "%llu", (unsigned long long)hb->uptime_s);
    a->argv[7] = a->num[4];
    for (uint32_t i = 0; i < hb->attempts.n && i < BEAT_MAX; i++, n++) {
        char (*v)[24] = &a->num[5 + 3 * i];

        metering_member(a->member[i], sizeof(a->member[i]), u[i].job_id, u[i].attempt, hb->node);
        metering_att_key(a->key[6 + 2 * i], shard, 'a', a->member[i]);
        metering_att_key(a->key[7 + 2 * i], shard, 'd', a->member[i]);
        snprintf(v[0], 24, "%u", u[i].attempt);
        snprintf(v[1], 24, "%llu", (unsigned long long)u[i].gpu_ms);
        snprintf(v[2], 24, "%llu", (unsigned long long)u[i].energy_mj);
        a->argv[9 + 5 * i] = u[i].job_id;
        a->argv[10 + 5 * i] = v[0];
        a->argv[11 + 5 * i] = v[1];
        a->argv[12 + 5 * i] = v[2];
        a->argv[13 + 5 * i] = a->member[i];
    }
    snprintf(a->num[3 + 4 * BEAT_MAX], 24, "%u", n);
    a->argv[8] = a->num[3 + 4 * BEAT_MAX];
    for (unsigned i = 0; i < 6 + 2 * n; i++)
        a->keys[i] = a->key[i];
    c->m = m;
    c->req = req;
    c->hb = hb;
    c->shard = shard;
    rc = gp_kvscript_call(&m->beat, gp_app_kv(m->app), beat_done, c, (int)(6 + 2 * n), a->keys,
                          (int)(9 + 5 * n), a->argv, NULL);
    free(a);                             /* the call copied what it sends */
    if (rc != GP_EOK) {
        free(c);
        return gp_req_fail(req, GP_EUNAVAIL, "Redis: %s", gp_err_name(rc));
    }
    return GP_EPENDING;
}

/* A node with attempts beats inside its lease renewal (the scheduler
 * answers it; this route overhears it). */
static gp_err
on_lease(gp_req *req, const void *in, void *out)
{
    const msg_lease_renew *l = in;

    if (!GP_HAS(l, MSG_LEASE_RENEW__BEAT))
        return GP_EOK;
    return on_beat(req, &l->beat, out);
}

const gp_route metering_beat_routes[] = {
    {GP_OP_NODE_HEARTBEAT, on_beat, GP_R_QUEUE | GP_R_BULK, 0, NULL, NULL},
    {GP_OP_NODE_LEASE, on_lease, GP_R_QUEUE | GP_R_BULK | GP_R_OVERHEAR, 0, NULL, NULL},
    {NULL},
};

/* A lost node: its next reading spans the loss and is not counted.  Every
 * instance hears every state (no queue group); the SET is idempotent. */
static void
on_node_state(void *arg, const gp_bus_msg *bm)
{
    metering      *m = arg;
    msg_node_state st = {0};
    char           key[METERING_KEY_LEN];

    if (gp_msg_decode(&msg_node_state_desc, bm->data, bm->len, &st, NULL, 0) != GP_EOK ||
        !gp_id_ok(st.site) || !gp_id_ok(st.node) || st.state != MSG_NODE_STATE_STATE_LOST)
        return;
    snprintf(key, sizeof(key), "gp:{%u}:m:lost:%s", gp_shard_of(st.site), st.node);
    if (gp_kv_cmdf(gp_app_kv(m->app), NULL, NULL, "SET %s %llu EX 604800", key,
                   (unsigned long long)st.at_ms) != GP_EOK)
        GP_WARN("metering_lost_mark_failed", "node=%s", st.node);
}

static void
set_frozen(metering *m, bool frozen, const char *how)
{
    if (frozen != m->frozen)
        GP_WARN("metering_freeze", "frozen=%d how=%s", frozen, how);
    m->frozen = frozen;
    *m->m_frozen = frozen;
}

static void
on_isolation(void *arg, const gp_bus_msg *bm)
{
    msg_control_plane_event ev = {0};

    if (gp_msg_decode(&msg_control_plane_event_desc, bm->data, bm->len, &ev, NULL, 0) == GP_EOK)
        set_frozen(arg, ev.state == MSG_CONTROL_PLANE_EVENT_STATE_FROZEN, "event");
    gp_msg_clear(&msg_control_plane_event_desc, &ev);
}

/* The freeze's key, in case its event was missed (a restart). */
static void
frozen_read(void *arg, const redisReply *rep, gp_err err)
{
    if (err == GP_EOK && rep->type == REDIS_REPLY_INTEGER)
        set_frozen(arg, rep->integer == 1, "key");
}

static void
frozen_poll(gp_app *app, void *arg)
{
    gp_kv_cmdf(gp_app_kv(app), frozen_read, arg, "EXISTS gp:recovery:frozen");
}

gp_err
metering_beat_start(metering *m)
{
    const char *any[4] = {NULL, NULL, NULL, NULL};
    char        pat[GP_MAX_SUBJECT];
    gp_bus_sub *sub;
    gp_err      rc;

    gp_kvscript_init(&m->beat, metering_beat_lua);
    rc = gp_op_pattern(GP_OP_NODE_STATE, pat, sizeof(pat), any);
    if (rc == GP_EOK)
        rc = gp_bus_sub_new(gp_app_bus(m->app), pat, NULL, on_node_state, m, &sub);
    if (rc == GP_EOK)
        rc = gp_op_pattern(GP_OP_RECOVERY_ISOLATION, pat, sizeof(pat), any);
    if (rc == GP_EOK)
        rc = gp_bus_sub_new(gp_app_bus(m->app), pat, NULL, on_isolation, m, &sub);
    if (rc == GP_EOK && gp_app_every(m->app, "frozen", 1.0, frozen_poll, m) == NULL)
        rc = GP_ENOMEM;
    return rc;
}
