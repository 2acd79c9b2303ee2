/* live.c -- live node state in Redis.
 *
 * Keys (layout and shard rule in scripts.h; {N} = the site's shard, so
 * every key of one call is in one Redis Cluster slot):
 *   gp:{N}:node:<id>   hash: state, seen, site, rtt, reg (the node is in the
 *                      inventory), hb = the latest heartbeat as decoded and
 *                      re-encoded (bounded by the schema), msgpack
 *   gp:{N}:rtt:<site>  hash: node -> last uplink RTT (the site's measured RTT)
 *   gp:{N}:seen        sorted set: node id by its next deadline, ms (suspect_at
 *                      while healthy, lost_at while suspect); lost nodes leave it
 *   gp:epoch:v2        marks a Redis seeded with this layout; when it is
 *                      missing Redis is new, was flushed, or holds an older
 *                      layout: every inventory node is reseeded
 *
 * A heartbeat is one script call (gp/kvscript.h): it updates the hash, the
 * index and the site's RTT and returns the previous state, so registry
 * instances share no memory and any of them can take any heartbeat (NATS
 * queue group).  The sweep reads each shard's index up to Redis's time
 * (the scores are deadlines) and runs one script on those nodes: it judges
 * each again from its own history (scripts.h, the detector of gp/detect.h
 * in Lua), turns it suspect or lost, re-scores it or drops it from the
 * index, and returns the transitions, so each is reported by exactly one
 * instance.  A lease renewal the registry overhears is contact too
 * (registry_live_contact): a node whose beats are lost while its renewals
 * arrive is not lost.
 *
 * Which nodes exist (ghost nodes): the inventory (PostgreSQL) decides, and
 * the 'reg' field of the node's hash carries that into Redis.
 *   - Registration sets it (after writing the inventory); an operator's
 *     delete removes the whole hash (after writing retired_nodes).
 *   - The hb script refuses a beat of a hash without it: it returns
 *     "ghost" and writes nothing, so a never-registered or deleted node
 *     recreates nothing; the beat is counted
 *     (gp_registry_heartbeats_unknown_node_total) and dropped, and the
 *     node is told to register again (gp.node.<s>.<n>.cmd.register: an
 *     idle node renews no lease, so its beat is where it hears it).
 *   - The scheduler's lease reads the mark; without it the node gets
 *     NOTFOUND ("register again"), and the registration restores it.
 *   - After a Redis flush the marks are gone for everyone: the reseed
 *     (next cron tick, once PostgreSQL answers) restores them for every
 *     inventory node, whatever its state, and is retried until every chunk
 *     of it succeeded (only then is the epoch written), shard by shard
 *     with a 'seeded' mark.  Beats in between are "unseeded": dropped
 *     (counted), never answered, so no agent reacts to them; a lease in
 *     between is answered "renew again" by the scheduler.
 *   - A node an operator deleted is refused at registration (DENIED) until
 *     gp.admin.node.readmit. */
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/backoff.h"
#include "gp/kvscript.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "registry.h"
#include "scripts.h"

#define RESEED_CHUNK  500       /* nodes per reseed script call */
/* The suffix is the version of the live view's layout: a registry that
 * brings a new layout (or a new rule, like the 'reg' mark) finds no epoch
 * in a Redis an older one seeded, and reseeds it from PostgreSQL. */
#define EPOCH_KEY     "gp:epoch:v3"
/* Held by the instance reseeding; expires if it dies half way.  Longer than
 * the inventory read (5 s deadline) plus a few hundred script calls. */
#define RESEED_LOCK_KEY "gp:reseed:lock:v3"
#define RESEED_LOCK_MS  15000

#define CLOCK_EVERY_MS 10000

static void
clock_read(void *arg, const redisReply *rep, gp_err err)
{
    registry *r = arg;
    uint64_t  mono = gp_mono_ms();

    r->clock_asking = false;
    if (err != GP_EOK || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[0]->type != REDIS_REPLY_STRING || rep->element[1]->type != REDIS_REPLY_STRING)
        return;                                /* the last reading (or the wall clock) stays */
    r->clock_redis_ms = strtoull(rep->element[0]->str, NULL, 10) * 1000 +
                        strtoull(rep->element[1]->str, NULL, 10) / 1000;
    r->clock_mono_ms = r->clock_sent_mono + (mono - r->clock_sent_mono) / 2;   /* mid-trip */
    r->clock_ok = true;
}

static void
clock_cron(registry *r, gp_kv *kv)
{
    uint64_t mono = gp_mono_ms();

    if (r->clock_asking || (r->clock_ok && mono - r->clock_sent_mono < CLOCK_EVERY_MS))
        return;
    r->clock_asking = true;
    r->clock_sent_mono = mono;
    if (gp_kv_cmdf(kv, clock_read, r, "TIME") != GP_EOK)
        r->clock_asking = false;
}

uint64_t
registry_now_ms(registry *r)
{
    return r->clock_ok ? r->clock_redis_ms + (gp_mono_ms() - r->clock_mono_ms) : gp_wall_ms();
}

void
registry_live_transition(registry *r, const char *site, const char *node, int32_t prev,
                         int32_t state, const char *reason)
{
    msg_node_state ev = {0};
    const char    *args[2];

    snprintf(ev.site, sizeof(ev.site), "%s", site);
    snprintf(ev.node, sizeof(ev.node), "%s", node);
    snprintf(ev.reason, sizeof(ev.reason), "%s", reason);
    ev.state = state;
    ev.prev = prev;
    GP_SET_HAS(&ev, MSG_NODE_STATE__PREV);
    ev.at_ms = registry_now_ms(r);           /* Redis's clock: instances' wall clocks may be off */
    /* strictly later than this instance's last one: two transitions of a
     * node in one sweep (suspect, lost) must not tie, or the row would
     * keep the first when they land in two batches (states.c) */
    if (ev.at_ms <= r->last_at_ms)
        ev.at_ms = r->last_at_ms + 1;
    r->last_at_ms = ev.at_ms;
    args[0] = site;
    args[1] = node;
    gp_app_publish(r->app, GP_OP_NODE_STATE, args, &ev);
    (*r->m_transitions)++;
    /* A node going suspect or lost is news, and so is an operator's act;
     * one registering or coming back after a Redis flush is routine
     * (100,000 of them would drown the log). */
    gp_log(state == MSG_NODE_STATE_STATE_SUSPECT || state == MSG_NODE_STATE_STATE_LOST
               ? GP_LOG_WARN
           : prev == MSG_NODE_STATE_STATE_SUSPECT || prev == MSG_NODE_STATE_STATE_LOST ||
                   strncmp(reason, "operator", 8) == 0
               ? GP_LOG_INFO
               : GP_LOG_DEBUG,
           "node_state", "site=%s node=%s from=%s to=%s reason=\"%s\"", site, node,
           registry_state_name(prev), registry_state_name(state), reason);
    registry_states_queue(r, site, node, prev, state, reason, ev.at_ms);
}

/* ---- heartbeats ------------------------------------------------------------------- */

static void forget_cancel(registry *r, const char *site, const char *node);

static void hbq_pump(registry *r);

typedef struct beat {
    registry                 *r;
    char                      site[GP_MAX_ID + 1];
    char                      node[GP_MAX_ID + 1];
    bool                      registered;
    bool                      windowed;    /* a heartbeat counted in r->hb_inflight */
    char                      how[48];     /* a registration's reason */
    beat_health               h;
    registry_live_written_cb *done;        /* registration: told how the write went */
    void                     *done_arg;
} beat;

static void
beat_free(beat *b, gp_err err)
{
    registry *r = b->r;
    bool      windowed = b->windowed;

    if (b->done != NULL)
        b->done(b->done_arg, err);
    free(b);
    if (windowed) {
        r->hb_inflight--;
        hbq_pump(r);                   /* the next waiting beat takes its place */
    }
}

/* ---- quarantine ---------------------------------------------------------------------
 *
 * A node whose GPU fell off the bus (XID 79) or stopped answering, that
 * reported quarantine-xids bad-GPU XIDs within quarantine-window-ms, new
 * uncorrectable ECC errors, or that came back from lost quarantine-flaps
 * times within quarantine-flap-window-ms is quarantined: no new work until
 * an operator releases it (gpctl release node, after the repair).  As an
 * operator's mode, PostgreSQL's nodes.adm first (one instance wins the
 * row: the others' update matches nothing), then the live view, which
 * publishes the transition with the rule as its reason. */

typedef struct qcall {
    registry *r;
    char      site[GP_MAX_ID + 1], node[GP_MAX_ID + 1];
    char      reason[MSG_NODE_STATE_REASON_MAXLEN + 1];
} qcall;

static void
quarantined(void *arg, gp_err err, int32_t prev, int32_t state)
{
    qcall *q = arg;

    (void)prev;
    (void)state;
    if (err != GP_EOK)
        GP_WARN("quarantine_live_failed", "site=%s node=%s code=%s detail=\"the next beat that "
                "matches a rule tries again; nodes.adm holds it for a reseed\"", q->site, q->node,
                gp_err_name(err));
    free(q);
}

static void
quarantine_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    qcall *q = arg;

    (void)nres;
    if (err != GP_EOK || PQntuples(res[0]) == 0) {
        if (err != GP_EOK)
            GP_WARN("quarantine_write_failed", "site=%s node=%s code=%s detail=\"%s\"", q->site,
                    q->node, gp_err_name(err), detail);
        free(q);                          /* or another instance took it */
        return;
    }
    (*q->r->m_quarantines)++;
    GP_WARN("node_quarantined", "site=%s node=%s reason=\"%s\"", q->site, q->node, q->reason);
    if (registry_live_adm(q->r, q->site, q->node, "quarantined", q->reason, quarantined, q) !=
        GP_EOK)
        quarantined(q, GP_EUNAVAIL, 0, 0);
}

static void
quarantine(registry *r, const char *site, const char *node, const char *why)
{
    qcall      *q = calloc(1, sizeof(*q));
    const char *p[1];

    if (q == NULL)
        return;
    q->r = r;
    snprintf(q->site, sizeof(q->site), "%s", site);
    snprintf(q->node, sizeof(q->node), "%s", node);
    snprintf(q->reason, sizeof(q->reason), "quarantine: %.100s", why);
    p[0] = q->node;
    if (gp_db_query(gp_app_db(r->app),
                    "UPDATE nodes SET adm = 'quarantined' WHERE id = $1 AND adm <> 'quarantined'"
                    " RETURNING site", 1, p, 0, quarantine_written, q) != GP_EOK)
        free(q);
}

static void
quarantine_check(const beat *b, long long xids, long long dbe, long long flaps)
{
    const registry_cfg *c = b->r->cfg;
    char                why[128];

    if (b->h.fatal[0] != '\0')
        snprintf(why, sizeof(why), "%s", b->h.fatal);
    else if (xids >= c->q_xids)
        snprintf(why, sizeof(why), "%lld bad-GPU XIDs within %u s, the last %s", xids,
                 c->q_window_ms / 1000, b->h.last_xid);
    else if (dbe >= c->q_dbe)
        snprintf(why, sizeof(why), "%lld new uncorrectable ECC error(s)", dbe);
    else if (flaps >= c->q_flaps)
        snprintf(why, sizeof(why), "flapping: back from lost %lld times within %u s", flaps,
                 c->q_flap_window_ms / 1000);
    else
        return;
    quarantine(b->r, b->site, b->node, why);
}

/* A beat of a node the live view does not hold, its shard seeded (so not
 * a Redis loss the reseed is restoring): the node was forgotten (deleted,
 * moved, or its registration's write lost).  A node that runs nothing
 * renews no lease, so its beat is where it hears it; one beat, one word,
 * and a deleted node's registration is refused (DENIED) as before. */
static void
register_again(registry *r, const char *site, const char *node)
{
    msg_register_again m = {0};
    const char        *args[2] = {site, node};

    snprintf(m.reason, sizeof(m.reason), "the registry does not hold node %s of site %s", node,
             site);
    GP_SET_HAS(&m, MSG_REGISTER_AGAIN__REASON);
    if (gp_app_publish(r->app, GP_OP_NODE_REGISTER_AGAIN, args, &m) == GP_EOK)
        (*r->m_register_again)++;
}

static void
beat_done(void *arg, const redisReply *rep, gp_err err)
{
    beat   *b = arg;
    int32_t prev, state;

    if (err != GP_EOK || rep->type == REDIS_REPLY_ERROR) {
        (*b->r->m_hb_bad)++;
        if (b->registered)
            GP_WARN("register_live_write_failed", "site=%s node=%s code=%s detail=\"%s\"",
                    b->site, b->node, err != GP_EOK ? gp_err_name(err) : "REDIS",
                    err == GP_EOK ? rep->str : "");
        beat_free(b, err != GP_EOK ? err : GP_EUNAVAIL);
        return;
    }
    if (rep->type == REDIS_REPLY_STRING &&
        (strcmp(rep->str, "ghost") == 0 || strcmp(rep->str, "unseeded") == 0)) {
        (*b->r->m_hb_unknown)++;             /* not in the live view: dropped */
        GP_DEBUG("heartbeat_unknown_node", "site=%s node=%s seeded=%d", b->site, b->node,
                 rep->str[0] == 'g');
        if (rep->str[0] == 'g')
            register_again(b->r, b->site, b->node);
        beat_free(b, GP_ENOTFOUND);
        return;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 5 ||
        rep->element[0]->type != REDIS_REPLY_STRING || rep->element[1]->type != REDIS_REPLY_STRING) {
        (*b->r->m_hb_bad)++;
        beat_free(b, GP_EINTERNAL);
        return;
    }
    prev = registry_state_from_name(rep->element[0]->str);
    state = registry_state_from_name(rep->element[1]->str);
    if (b->registered)
        registry_live_transition(b->r, b->site, b->node, prev, state, b->how);
    else if (prev != state)
        registry_live_transition(b->r, b->site, b->node, prev, state, "heartbeat");
    if (state != MSG_NODE_STATE_STATE_QUARANTINED)
        quarantine_check(b, rep->element[2]->integer, rep->element[3]->integer,
                         rep->element[4]->integer);
    beat_free(b, GP_EOK);
}

/* done (may be NULL) is called exactly once, maybe before this returns.
 * registered: NULL for a heartbeat, a registration's reason otherwise. */
static void
live_write_as(registry *r, const char *site, const char *node, const void *raw, size_t len,
              double rtt_ms, const beat_health *h, const char *registered, bool windowed,
              registry_live_written_cb *done, void *done_arg)
{
    char        kn[REGISTRY_KEY_LEN], ks[REGISTRY_KEY_LEN], kr[REGISTRY_KEY_LEN];
    char        kd[REGISTRY_KEY_LEN], rtt[32];
    const char *keys[4] = {kn, ks, kr, kd};
    const char *args[9];
    size_t      argl[9];
    char        xb[16], dbe[24];
    unsigned    shard = registry_shard(site);
    beat       *b = malloc(sizeof(*b));

    if (b == NULL) {
        if (done != NULL)
            done(done_arg, GP_ENOMEM);
        return;
    }
    b->r = r;
    b->registered = registered != NULL;
    b->windowed = windowed;
    if (windowed)
        r->hb_inflight++;
    snprintf(b->how, sizeof(b->how), "%s", registered != NULL ? registered : "");
    if (h != NULL)
        b->h = *h;
    else
        memset(&b->h, 0, sizeof(b->h));
    b->done = done;
    b->done_arg = done_arg;
    snprintf(b->site, sizeof(b->site), "%s", site);
    snprintf(b->node, sizeof(b->node), "%s", node);
    registry_node_key(kn, shard, node);
    registry_seen_key(ks, shard);
    registry_rtt_key(kr, site);
    registry_seeded_key(kd, shard);
    snprintf(rtt, sizeof(rtt), "%.3f", rtt_ms);
    args[0] = raw;                    /* stamped with Redis's time by the script */
    args[1] = site;
    args[2] = node;
    args[3] = rtt;
    args[4] = r->detect_args;
    snprintf(xb, sizeof(xb), "%u", b->h.bad_xids);
    snprintf(dbe, sizeof(dbe), "%llu", (unsigned long long)b->h.dbe);
    args[5] = xb;
    args[6] = dbe;
    args[7] = r->q_window;
    args[8] = r->q_flap_window;
    for (int k = 0; k < 9; k++)
        argl[k] = k == 0 ? len : strlen(args[k]);
    if (gp_kvscript_call(&r->hb_script, gp_app_kv(r->app), beat_done, b, 4, keys, 9, args, argl) !=
        GP_EOK) {
        (*r->m_hb_bad)++;
        beat_free(b, GP_EUNAVAIL);
    }
}

static void
live_write(registry *r, const char *site, const char *node, const void *raw, size_t len,
           double rtt_ms, const beat_health *h, const char *registered,
           registry_live_written_cb *done, void *done_arg)
{
    live_write_as(r, site, node, raw, len, rtt_ms, h, registered, false, done, done_arg);
}

/* ---- heartbeats: a window to Redis, the rest waiting one per node ----------------
 *
 * At most hb-window heartbeat scripts are in flight.  A beat that finds the
 * window full waits in a queue that holds one beat per node, the newest: a
 * later beat of the same node replaces the waiting one (its older telemetry
 * shed, counted) and keeps its place, so the node that has waited longest
 * goes first.  Redis then works at what it can take behind a short queue of
 * its own, so no command nears its timeout (the connection is never
 * dropped, nothing in flight fails: an overload used to turn into a
 * collapse of timeouts and reconnections), the registry holds at most
 * hb-pending-max waiting beats (one more node's is shed), and once the load
 * drops the queue drains at Redis's full speed.  Registrations and lease
 * renewals never wait here.  While beats wait, the sweep turns nobody lost:
 * the evidence is in this queue, not yet in Redis. */

typedef struct hbq_item {
    struct hbq_item *next;             /* FIFO, oldest first */
    struct hbq_item *hnext;            /* hash chain */
    char             site[GP_MAX_ID + 1], node[GP_MAX_ID + 1];
    double           rtt_ms;
    beat_health      h;
    size_t           len;
    char            *raw;
} hbq_item;

#define HBQ_BUCKETS 65536u             /* a power of two */

typedef struct hbq {
    hbq_item *bucket[HBQ_BUCKETS];
    hbq_item *head, *tail;
    unsigned  n;
} hbq;

static unsigned
hbq_hash(const char *site, const char *node)
{
    uint32_t h = 2166136261u;

    for (const char *p = site; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ '/') * 16777619u;
    for (const char *p = node; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h & (HBQ_BUCKETS - 1);
}

static hbq_item *
hbq_find(hbq *q, const char *site, const char *node)
{
    for (hbq_item *it = q->bucket[hbq_hash(site, node)]; it != NULL; it = it->hnext)
        if (strcmp(it->node, node) == 0 && strcmp(it->site, site) == 0)
            return it;
    return NULL;
}

/* The beat's copy in the item (the bus's buffer is gone once we return). */
static bool
hbq_fill(hbq_item *it, const void *raw, size_t len, double rtt_ms, const beat_health *h)
{
    char *copy = malloc(len ? len : 1);

    if (copy == NULL)
        return false;
    memcpy(copy, raw, len);
    free(it->raw);
    it->raw = copy;
    it->len = len;
    it->rtt_ms = rtt_ms;
    if (h != NULL)
        it->h = *h;
    else
        memset(&it->h, 0, sizeof(it->h));
    return true;
}

/* Waits the beat; false when it was shed (the queue is full, or no memory). */
static bool
hbq_put(registry *r, const char *site, const char *node, const void *raw, size_t len,
        double rtt_ms, const beat_health *h)
{
    hbq      *q = r->hbq;
    hbq_item *it = hbq_find(q, site, node);
    unsigned  k;

    if (it != NULL) {                  /* its older beat is shed, its place kept */
        (*r->m_hb_shed)++;
        return hbq_fill(it, raw, len, rtt_ms, h);
    }
    if (q->n >= r->cfg->hb_pending_max || (it = calloc(1, sizeof(*it))) == NULL)
        return false;
    if (!hbq_fill(it, raw, len, rtt_ms, h)) {
        free(it);
        return false;
    }
    snprintf(it->site, sizeof(it->site), "%s", site);
    snprintf(it->node, sizeof(it->node), "%s", node);
    k = hbq_hash(site, node);
    it->hnext = q->bucket[k];
    q->bucket[k] = it;
    if (q->tail != NULL)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->n++;
    *r->m_hb_waiting = q->n;
    return true;
}

static hbq_item *
hbq_pop(hbq *q)
{
    hbq_item  *it = q->head;
    hbq_item **pp;

    if (it == NULL)
        return NULL;
    q->head = it->next;
    if (q->head == NULL)
        q->tail = NULL;
    for (pp = &q->bucket[hbq_hash(it->site, it->node)]; *pp != it; pp = &(*pp)->hnext)
        ;
    *pp = it->hnext;
    q->n--;
    return it;
}

/* Fills the window from the queue, oldest first.  Not re-entered: a beat
 * that fails at once (Redis down) ends inside live_write_as, whose
 * beat_free would pump again. */
static void
hbq_pump(registry *r)
{
    hbq_item *it;

    if (r->hb_pumping || r->hbq == NULL)
        return;
    r->hb_pumping = true;
    while (r->hb_inflight < r->cfg->hb_window && (it = hbq_pop(r->hbq)) != NULL) {
        (*r->m_hb)++;
        live_write_as(r, it->site, it->node, it->raw, it->len, it->rtt_ms, &it->h, NULL, true,
                      NULL, NULL);
        free(it->raw);
        free(it);
    }
    *r->m_hb_waiting = r->hbq->n;
    r->hb_pumping = false;
}

void
registry_live_free_queue(registry *r)
{
    hbq_item *it;

    if (r->hbq == NULL)
        return;
    while ((it = hbq_pop(r->hbq)) != NULL) {
        free(it->raw);
        free(it);
    }
    free(r->hbq);
    r->hbq = NULL;
}

/* Beats wait for Redis: the sweep turns nobody lost meanwhile. */
bool
registry_live_behind(const registry *r)
{
    return r->hbq != NULL && r->hbq->n > 0;
}

/* Redis is behind (hb-backlog commands in flight, or the oldest waiting
 * hb-max-wait-ms): the caller drops its write, counted.  The age matters
 * more than the count: how many commands Redis clears in a second depends
 * on the machine, and a queue that reaches the command timeout makes the
 * client drop the connection, failing registrations with the beats. */
static bool
shed(registry *r)
{
    gp_kv_stats ks;

    gp_kv_get_stats(gp_app_kv(r->app), &ks);
    if (ks.inflight < r->cfg->hb_backlog && ks.oldest_ms < r->cfg->hb_max_wait_ms)
        return false;
    (*r->m_hb_shed)++;
    return true;
}

/* A beat goes to Redis now if the window has room and no beat waits,
 * else it waits (one per node, the newest: see hbq above). */
void
registry_live_beat(registry *r, const char *site, const char *node, const void *raw, size_t len,
                   double rtt_ms, const beat_health *h)
{
    if (r->hbq == NULL || (r->hb_inflight < r->cfg->hb_window && r->hbq->n == 0)) {
        (*r->m_hb)++;
        live_write_as(r, site, node, raw, len, rtt_ms, h, NULL, true, NULL, NULL);
        return;
    }
    if (!hbq_put(r, site, node, raw, len, rtt_ms, h))
        (*r->m_hb_shed)++;
}

/* A lease renewal: contact for the detector.  Not counted as a beat and
 * not waited for: one lost only makes the node's deadline a renewal
 * earlier.  Shed like beats when Redis is behind. */
void
registry_live_contact(registry *r, const char *site, const char *node)
{
    char        kn[REGISTRY_KEY_LEN];
    const char *keys[1] = {kn};

    if (shed(r))
        return;
    (*r->m_contacts)++;
    registry_node_key(kn, registry_shard(site), node);
    gp_kvscript_call(&r->contact_script, gp_app_kv(r->app), NULL, NULL, 1, keys, 0, NULL, NULL);
}

void
registry_live_register(registry *r, const char *site, const char *node, const char *how,
                       registry_live_written_cb *done, void *arg)
{
    forget_cancel(r, site, node);
    live_write(r, site, node, "", 0, 0, NULL, how, done, arg);
}

/* ---- an operator's mode (cordon, drain, quarantine) ---------------------------------- */

typedef struct adm_call {
    registry            *r;
    char                 site[GP_MAX_ID + 1];
    char                 node[GP_MAX_ID + 1];
    char                 reason[MSG_NODE_STATE_REASON_MAXLEN + 1];
    registry_live_adm_cb *done;
    void                *arg;
} adm_call;

static void
adm_done(void *arg, const redisReply *rep, gp_err err)
{
    adm_call *c = arg;
    int32_t   prev = MSG_NODE_STATE_STATE_UNKNOWN, state = MSG_NODE_STATE_STATE_UNKNOWN;

    if (err == GP_EOK && rep->type == REDIS_REPLY_STRING && strcmp(rep->str, "ghost") == 0)
        err = GP_ENOTFOUND;                  /* deleted meanwhile, or Redis flushed: reseed */
    else if (err == GP_EOK && (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
                               rep->element[0]->type != REDIS_REPLY_STRING ||
                               rep->element[1]->type != REDIS_REPLY_STRING))
        err = GP_EUNAVAIL;
    if (err == GP_EOK) {
        prev = registry_state_from_name(rep->element[0]->str);
        state = registry_state_from_name(rep->element[1]->str);
        if (prev != state)
            registry_live_transition(c->r, c->site, c->node, prev, state, c->reason);
    }
    c->done(c->arg, err, prev, state);
    free(c);
}

gp_err
registry_live_adm(registry *r, const char *site, const char *node, const char *adm,
                  const char *reason, registry_live_adm_cb *done, void *arg)
{
    char        kn[REGISTRY_KEY_LEN];
    const char *keys[1] = {kn};
    const char *args[1] = {adm};
    adm_call   *c = malloc(sizeof(*c));
    gp_err      rc;

    if (c == NULL)
        return GP_ENOMEM;
    *c = (adm_call){.r = r, .done = done, .arg = arg};
    snprintf(c->site, sizeof(c->site), "%s", site);
    snprintf(c->node, sizeof(c->node), "%s", node);
    snprintf(c->reason, sizeof(c->reason), "%s", reason);
    registry_node_key(kn, registry_shard(site), node);
    rc = gp_kvscript_call(&r->adm_script, gp_app_kv(r->app), adm_done, c, 1, keys, 1, args, NULL);
    if (rc != GP_EOK)
        free(c);
    return rc;
}

/* ---- the sweep: every shard, in batches, until it is done or the tick's bound ----
 *
 * Each tick walks all REGISTRY_SHARDS shards at once, one chain per shard:
 * a read script (ZRANGEBYSCORE of the shard's index up to Redis's time:
 * the scores are deadlines; SWEEP_BATCH ids), then the sweep script on those
 * nodes (which judges each again on Redis's time); a chain goes on while its read
 * came back full and the tick's bound allows.  The next tick starts when
 * every chain of this one has ended. */

#define SWEEP_BATCH     1000     /* nodes per script call: a few ms of Redis time, so beats
                                    queued behind one call wait little */
#define SWEEP_TICK_MAX  200000   /* nodes one tick may look at: 2 x the 100,000-node design
                                    fleet, so a fleet-wide outage is found in one tick, while a
                                    fleet past the design size cannot make one tick publish
                                    and queue without end */

typedef struct sweep_chain {
    registry *r;
    unsigned  shard;
} sweep_chain;

static void sweep_read(sweep_chain *c);

static void
chain_end(sweep_chain *c)
{
    c->r->sweeps_inflight--;
}

static void
swept(void *arg, const redisReply *rep, gp_err err)
{
    sweep_chain *c = arg;
    registry    *r = c->r;

    if (err != GP_EOK || rep->type != REDIS_REPLY_ARRAY) {
        chain_end(c);
        return;
    }
    for (size_t i = 0; i + 4 < rep->elements; i += 5) {
        redisReply *const *e = rep->element + i;
        bool ok = true;

        for (int k = 0; k < 5; k++)
            ok = ok && e[k]->type == REDIS_REPLY_STRING;
        if (ok)
            registry_live_transition(r, e[1]->str, e[0]->str, registry_state_from_name(e[2]->str),
                                     registry_state_from_name(e[3]->str), e[4]->str);
    }
    if (c->r->sweep_more[c->shard] && r->sweep_budget >= SWEEP_BATCH)
        sweep_read(c);                               /* the read was full: more to look at */
    else
        chain_end(c);
}

static void
sweep_ids(void *arg, const redisReply *rep, gp_err err)
{
    static char  keybuf[SWEEP_BATCH + 1][REGISTRY_KEY_LEN];
    static const char *keys[SWEEP_BATCH + 1], *args[SWEEP_BATCH + 1];
    sweep_chain *c = arg;
    registry    *r = c->r;
    size_t       n;

    if (err != GP_EOK || rep->type != REDIS_REPLY_ARRAY || rep->elements == 0 ||
        rep->elements > SWEEP_BATCH) {
        chain_end(c);
        return;
    }
    n = rep->elements;
    r->sweep_more[c->shard] = n == SWEEP_BATCH;
    r->sweep_budget = (unsigned)n >= r->sweep_budget ? 0 : r->sweep_budget - (unsigned)n;
    registry_seen_key(keybuf[0], c->shard);
    keys[0] = keybuf[0];
    args[0] = r->frozen || registry_live_behind(r) ? r->sweep_frozen_args : r->detect_args;
    for (size_t i = 0; i < n; i++) {
        registry_node_key(keybuf[i + 1], c->shard, rep->element[i]->str);
        keys[i + 1] = keybuf[i + 1];
        args[i + 1] = rep->element[i]->str;
    }
    if (gp_kvscript_call(&r->sweep_script, gp_app_kv(r->app), swept, c, (int)n + 1, keys,
                         (int)n + 1, args, NULL) != GP_EOK)
        chain_end(c);
}

static void
sweep_read(sweep_chain *c)
{
    char        key[REGISTRY_KEY_LEN], batch[16];
    const char *keys[1] = {key};
    const char *args[1] = {batch};

    registry_seen_key(key, c->shard);
    snprintf(batch, sizeof(batch), "%d", SWEEP_BATCH);
    if (gp_kvscript_call(&c->r->sweep_read_script, gp_app_kv(c->r->app), sweep_ids, c, 1, keys, 1,
                         args, NULL) != GP_EOK)
        chain_end(c);
}

static void
sweep(registry *r)
{
    /* Deadlines are on Redis's time, judged by the scripts on the shard's
     * master: beats are stamped with that clock too, so no registry host's
     * wall clock enters into it. */
    if (r->sweeps_inflight > 0 || r->chains == NULL)
        return;
    r->sweep_budget = SWEEP_TICK_MAX;
    for (unsigned s = 0; s < REGISTRY_SHARDS; s++) {
        r->chains[s] = (sweep_chain){.r = r, .shard = s};
        r->sweep_more[s] = false;
        r->sweeps_inflight++;
        sweep_read(&r->chains[s]);
    }
}

/* Redis came back empty (flushed, or restarted without persistence):
 * every inventory node gets its 'reg' mark back, and every node expected
 * to beat goes back into its shard's index as seen now, so it is either
 * refreshed by its next heartbeat or found suspect by the sweep one deadline
 * later.  Nothing is lost and no one acts.  One script call per shard and
 * chunk: 100,000 nodes are a few hundred commands.
 *
 * Who reseeds, and when it counts as done: the epoch key is written only
 * after every chunk of a reseed succeeded, so a reseed that failed half
 * way (a chunk timed out, a failover) or whose instance died leaves the
 * epoch missing and the next tick reseeds again.  The instances elect one
 * reseeder with a lock key (SET NX PX RESEED_LOCK_MS): a failed reseed
 * drops it at once, a dead instance's lock expires.  A reseed that outlives
 * its lock only lets a second instance reseed as well, which is harmless
 * (the script is idempotent).  Failed attempts back off (gp/backoff.h), so a
 * Redis that keeps refusing is not sent the inventory every tick. */

static void
reseed_unlock(registry *r)
{
    const char *keys[1] = {RESEED_LOCK_KEY};
    const char *args[1] = {gp_app_instance(r->app)};

    gp_kvscript_call(&r->unlock_script, gp_app_kv(r->app), NULL, NULL, 1, keys, 1, args, NULL);
}

static void
reseed_failed(registry *r, const char *code, const char *detail)
{
    unsigned delay = gp_backoff_next_ms(&r->reseed_backoff);

    GP_WARN("reseed_failed", "code=%s retry_ms=%u detail=\"%s\"", code, delay,
            detail ? detail : "");
    (*r->m_reseed_failures)++;
    r->reseed_not_before = gp_mono_ms() + delay;
    reseed_unlock(r);
    r->reseeding = false;
}

static void
epoch_set(void *arg, const redisReply *rep, gp_err err)
{
    registry *r = arg;

    if (err != GP_EOK || rep->type == REDIS_REPLY_ERROR) {
        reseed_failed(r, err != GP_EOK ? gp_err_name(err) : "REDIS", "epoch not written");
        return;
    }
    gp_backoff_reset(&r->reseed_backoff);
    r->reseed_not_before = 0;
    (*r->m_reseeds)++;
    GP_INFO("redis_reseeded", "nodes=%d", r->reseed_rows);
    reseed_unlock(r);
    r->reseeding = false;
}

/* Every chunk answered (or was never sent): the epoch only when all took. */
static void
reseed_chunk_end(registry *r)
{
    if (--r->reseed_pending > 0)
        return;
    if (r->reseed_bad > 0) {
        char detail[64];

        snprintf(detail, sizeof(detail), "%u chunk(s) failed", r->reseed_bad);
        reseed_failed(r, "UNAVAIL", detail);
    } else if (gp_kv_cmdf(gp_app_kv(r->app), epoch_set, r, "SET " EPOCH_KEY " %s",
                          gp_app_instance(r->app)) != GP_EOK) {
        reseed_failed(r, "UNAVAIL", "epoch not written");
    }
}

static void
reseed_chunk_done(void *arg, const redisReply *rep, gp_err err)
{
    registry *r = arg;

    if (err != GP_EOK || rep->type == REDIS_REPLY_ERROR) {
        if (r->reseed_bad++ == 0)
            GP_WARN("reseed_chunk_failed", "code=%s detail=\"%s\"",
                    err != GP_EOK ? gp_err_name(err) : "REDIS",
                    err == GP_EOK ? rep->str : "");
    }
    reseed_chunk_end(r);
}

/* The shard's mark, sent after its chunks (one slot: Redis runs them in
 * order).  A chunk that failed leaves the epoch unwritten and the reseed
 * runs again; meanwhile its nodes' leases are answered NOTFOUND and they
 * register again, as before the marks. */
static void
seeded_mark(registry *r, unsigned shard)
{
    char key[REGISTRY_KEY_LEN];

    if (r->reseed_bad > 0)
        return;
    registry_seeded_key(key, shard);
    r->reseed_pending++;
    if (gp_kv_cmdf(gp_app_kv(r->app), reseed_chunk_done, r, "SET %s %s", key,
                   gp_app_instance(r->app)) != GP_EOK) {
        r->reseed_pending--;
        r->reseed_bad++;
    }
}

static void
reseeded(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    static char        keybuf[RESEED_CHUNK + 1][REGISTRY_KEY_LEN];
    static const char *keys[RESEED_CHUNK + 1], *args[4 * RESEED_CHUNK + 1];
    registry          *r = arg;
    gp_kv             *kv = gp_app_kv(r->app);
    int                rows = err == GP_EOK ? PQntuples(res[0]) : 0;
    int               *order = NULL;
    unsigned          *start = NULL, *fill = NULL;

    (void)nres;
    if (err == GP_EOK && ((order = malloc(sizeof(int) * (size_t)(rows + 1))) == NULL ||
                          (start = calloc(REGISTRY_SHARDS + 1, sizeof(unsigned))) == NULL ||
                          (fill = calloc(REGISTRY_SHARDS, sizeof(unsigned))) == NULL))
        err = GP_ENOMEM;
    if (err != GP_EOK) {
        reseed_failed(r, gp_err_name(err), detail);
        free(order);
        free(start);
        free(fill);
        return;
    }
    /* rows by shard (counting sort) */
    for (int i = 0; i < rows; i++)
        start[registry_shard(PQgetvalue(res[0], i, 1)) + 1]++;
    for (unsigned s = 0; s < REGISTRY_SHARDS; s++)
        start[s + 1] += start[s];
    for (int i = 0; i < rows; i++) {
        unsigned s = registry_shard(PQgetvalue(res[0], i, 1));

        order[start[s] + fill[s]++] = i;
    }
    free(fill);
    r->reseed_rows = rows;
    r->reseed_bad = 0;
    r->reseed_pending = 1;                  /* this loop's own: no end before it is done */
    for (unsigned s = 0; s < REGISTRY_SHARDS && r->reseed_bad == 0; s++) {
        for (unsigned i = start[s]; i < start[s + 1] && r->reseed_bad == 0; i += RESEED_CHUNK) {
            int nk = 1, na = 0;

            registry_seen_key(keybuf[0], s);
            keys[0] = keybuf[0];
            args[na++] = r->detect_args;
            for (unsigned k = i; k < start[s + 1] && k < i + RESEED_CHUNK; k++) {
                int row = order[k];

                registry_node_key(keybuf[nk], s, PQgetvalue(res[0], row, 0));
                keys[nk] = keybuf[nk];
                nk++;
                args[na++] = PQgetvalue(res[0], row, 0);
                args[na++] = PQgetvalue(res[0], row, 1);
                args[na++] = PQgetvalue(res[0], row, 2);
                args[na++] = PQgetvalue(res[0], row, 3);
            }
            r->reseed_pending++;
            if (gp_kvscript_call(&r->reseed_script, kv, reseed_chunk_done, r, nk, keys, na, args,
                                 NULL) != GP_EOK) {
                r->reseed_pending--;
                r->reseed_bad++;            /* not sent: the chunks in flight still end */
            }
        }
        seeded_mark(r, s);
    }
    free(order);
    free(start);
    reseed_chunk_end(r);
}

static void
reseed_locked(void *arg, const redisReply *rep, gp_err err)
{
    registry *r = arg;

    if (err != GP_EOK || rep->type != REDIS_REPLY_STATUS) {
        r->reseeding = false;                /* nil: another instance is reseeding */
        return;
    }
    if (gp_db_query(gp_app_db(r->app), "SELECT id, site, state, adm FROM nodes", 0, NULL, 0, reseeded,
                    r) != GP_EOK)
        reseed_failed(r, "UNAVAIL", "inventory database unavailable");
}

static void
epoch_checked(void *arg, const redisReply *rep, gp_err err)
{
    registry *r = arg;
    char      ttl[16];

    if (err != GP_EOK || rep->type != REDIS_REPLY_INTEGER || rep->integer != 0 || r->reseeding)
        return;                              /* 1: the epoch is there */
    r->reseeding = true;
    snprintf(ttl, sizeof(ttl), "%u", (unsigned)RESEED_LOCK_MS);
    if (gp_kv_cmdf(gp_app_kv(r->app), reseed_locked, r, "SET " RESEED_LOCK_KEY " %s NX PX %s",
                   gp_app_instance(r->app), ttl) != GP_EOK)
        r->reseeding = false;
}

/* ---- removing a node from a shard, checked and retried ----
 *
 * A removal that failed would leave a deleted node's 'reg' mark (its beats
 * taken) or, after a site move, a healthy hash in the old shard that the
 * sweep would later report suspect.  So each one is kept in r->forgets until
 * Redis confirmed it, and a failed one is sent again from the cron after
 * its own backoff.  A registration of the same (site, node) cancels a
 * pending one: sent before the registration's script on the same
 * connection, one in flight lands first; one waiting is dropped, so a
 * late retry cannot remove the node that just registered. */

enum { FORGET_FREE, FORGET_WAIT, FORGET_FLIGHT, FORGET_CANCELLED };

static void forget_send(live_forget *f);

static void
forget_release(live_forget *f)
{
    f->st = FORGET_FREE;
    f->r->nforgets--;
    *f->r->m_forget_pending = f->r->nforgets;
}

static void
forget_retry_later(live_forget *f, const char *code)
{
    unsigned delay = gp_backoff_next_ms(&f->backoff);

    (*f->r->m_forget_failures)++;
    f->fails++;
    if ((f->fails & (f->fails - 1)) == 0)    /* 1st, 2nd, 4th, 8th...: a long outage logs little */
        GP_WARN("live_forget_failed", "site=%s node=%s code=%s failures=%u retry_ms=%u", f->site,
                f->node, code, f->fails, delay);
    f->st = FORGET_WAIT;
    f->not_before = gp_mono_ms() + delay;
}

static void
forget_done(void *arg, const redisReply *rep, gp_err err)
{
    live_forget *f = arg;

    if (f->again) {                          /* asked for again since this was sent */
        f->again = false;
        forget_send(f);
    } else if (f->st == FORGET_CANCELLED || (err == GP_EOK && rep->type != REDIS_REPLY_ERROR))
        forget_release(f);
    else
        forget_retry_later(f, err != GP_EOK ? gp_err_name(err) : "REDIS");
}

static gp_err
forget_call(registry *r, const char *site, const char *node, gp_kv_cb *cb, void *arg)
{
    char        kn[REGISTRY_KEY_LEN], ks[REGISTRY_KEY_LEN], kr[REGISTRY_KEY_LEN];
    const char *keys[3] = {kn, ks, kr};
    const char *args[1] = {node};
    unsigned    shard = registry_shard(site);

    registry_node_key(kn, shard, node);
    registry_seen_key(ks, shard);
    registry_rtt_key(kr, site);
    return gp_kvscript_call(&r->forget_script, gp_app_kv(r->app), cb, arg, 3, keys, 1, args,
                            NULL);
}

static void
forget_send(live_forget *f)
{
    f->st = FORGET_FLIGHT;
    if (forget_call(f->r, f->site, f->node, forget_done, f) != GP_EOK)
        forget_retry_later(f, "UNAVAIL");
}

static live_forget *
forget_find(registry *r, const char *site, const char *node)
{
    for (unsigned i = 0; r->forgets != NULL && i < REGISTRY_FORGET_MAX; i++) {
        live_forget *f = &r->forgets[i];

        if (f->st != FORGET_FREE && strcmp(f->site, site) == 0 && strcmp(f->node, node) == 0)
            return f;
    }
    return NULL;
}

void
registry_live_forget(registry *r, const char *site, const char *node)
{
    live_forget *f = forget_find(r, site, node);

    for (unsigned i = 0; f == NULL && r->forgets != NULL && i < REGISTRY_FORGET_MAX; i++) {
        if (r->forgets[i].st == FORGET_FREE) {
            f = &r->forgets[i];
            f->r = r;
            snprintf(f->site, sizeof(f->site), "%s", site);
            snprintf(f->node, sizeof(f->node), "%s", node);
            gp_backoff_init(&f->backoff, f);
            f->again = false;
            f->fails = 0;
            r->nforgets++;
            *r->m_forget_pending = r->nforgets;
            f->st = FORGET_WAIT;
        }
    }
    if (f == NULL) {                         /* the list is full: once, unchecked */
        (*r->m_forget_dropped)++;
        GP_WARN("live_forget_unchecked", "site=%s node=%s limit=%u", site, node,
                (unsigned)REGISTRY_FORGET_MAX);
        forget_call(r, site, node, NULL, NULL);
        return;
    }
    if (f->st == FORGET_CANCELLED) {
        f->st = FORGET_FLIGHT;               /* a registration came after the one in flight: */
        f->again = true;                     /* sent again once it answered */
    } else if (f->st == FORGET_WAIT)
        forget_send(f);
}

/* A registration of (site, node) is being sent: a pending removal of the
 * same keys must not follow it. */
static void
forget_cancel(registry *r, const char *site, const char *node)
{
    live_forget *f = r->nforgets > 0 ? forget_find(r, site, node) : NULL;

    if (f == NULL)
        return;
    if (f->st == FORGET_WAIT)
        forget_release(f);
    else if (f->st == FORGET_FLIGHT) {
        f->st = FORGET_CANCELLED;
        f->again = false;
    }
}

static void
forget_cron(registry *r)
{
    uint64_t now = gp_mono_ms();

    for (unsigned i = 0; r->nforgets > 0 && i < REGISTRY_FORGET_MAX; i++)
        if (r->forgets[i].st == FORGET_WAIT && now >= r->forgets[i].not_before)
            forget_send(&r->forgets[i]);
}

/* The recovery service holds gp:recovery:frozen (a few seconds, renewed)
 * while it takes the control plane to be cut off: no node turns lost
 * meanwhile (the sweep's sixth number). */
static void
frozen_read(void *arg, const redisReply *rep, gp_err err)
{
    registry *r = arg;
    bool      frozen = err == GP_EOK && rep->type == REDIS_REPLY_STRING;

    if (err != GP_EOK)
        return;                                /* the last reading stays */
    if (frozen != r->frozen)
        GP_WARN("lost_marking", "state=%s detail=\"%s\"", frozen ? "frozen" : "resumed",
                frozen ? "control-plane isolation (gp:recovery:frozen): nodes past their lost "
                         "deadline stay suspect"
                       : "nodes past their lost deadline turn lost again");
    r->frozen = frozen;
}

void
registry_live_cron(gp_app *app, void *arg)
{
    registry *r = arg;
    gp_kv    *kv = gp_app_kv(app);

    if (!gp_kv_is_connected(kv))
        return;
    /* Loaded ahead of the first call (and again after a NOSCRIPT);
     * gp/kvscript.h sends EVAL until then. */
    if (r->hb_script.sha[0] == '\0')
        gp_kvscript_load(&r->hb_script, kv);
    if (r->sweep_script.sha[0] == '\0')
        gp_kvscript_load(&r->sweep_script, kv);
    if (r->sweep_read_script.sha[0] == '\0')
        gp_kvscript_load(&r->sweep_read_script, kv);
    if (r->reseed_script.sha[0] == '\0')
        gp_kvscript_load(&r->reseed_script, kv);
    if (r->contact_script.sha[0] == '\0')
        gp_kvscript_load(&r->contact_script, kv);
    if (gp_db_is_connected(gp_app_db(app)) && !r->reseeding && gp_mono_ms() >= r->reseed_not_before)
        gp_kv_cmdf(kv, epoch_checked, r, "EXISTS " EPOCH_KEY);
    clock_cron(r, kv);
    gp_kv_cmdf(kv, frozen_read, r, "GET gp:recovery:frozen");
    forget_cron(r);
    sweep(r);
    registry_states_flush(r);
}

void
registry_live_start(registry *r)
{
    gp_metrics *m = gp_app_metrics(r->app);

    r->m_hb = gp_metrics_counter(m, "gp_registry_heartbeats_total", NULL, "Heartbeats recorded");
    r->m_hb_bad = gp_metrics_counter(m, "gp_registry_heartbeat_write_failures_total", NULL,
                                     "Heartbeats not recorded in Redis (Redis down or restarted)");
    r->m_hb_shed = gp_metrics_counter(m, "gp_registry_heartbeats_shed_total", NULL,
                                      "Heartbeats not written because Redis was behind: a "
                                      "waiting one replaced by the node's newer beat, or one "
                                      "more node past hb-pending-max");
    r->m_hb_waiting = gp_metrics_gauge(m, "gp_registry_heartbeats_waiting", NULL,
                                       "Nodes whose beat waits for the heartbeat window "
                                       "(hb-window scripts in flight)");
    if ((r->hbq = calloc(1, sizeof(*r->hbq))) == NULL)
        GP_ERROR("registry_no_memory", "detail=\"the heartbeat queue\"");
    r->m_transitions = gp_metrics_counter(m, "gp_registry_node_transitions_total", NULL,
                                          "Node state changes published");
    r->m_reseeds = gp_metrics_counter(m, "gp_registry_redis_reseeds_total", NULL,
                                      "Times Redis was found empty and reseeded from PostgreSQL");
    r->m_hb_unknown = gp_metrics_counter(m, "gp_registry_heartbeats_unknown_node_total", NULL,
                                         "Heartbeats dropped because the node is not in the "
                                         "inventory (never registered, or deleted)");
    r->m_register_again = gp_metrics_counter(m, "gp_registry_register_again_total", NULL,
                                             "Nodes told to register again (a beat of a node "
                                             "its seeded shard does not hold)");
    r->m_reseed_failures = gp_metrics_counter(m, "gp_registry_redis_reseed_failures_total", NULL,
                                              "Reseeds of Redis that failed (a chunk or the "
                                              "inventory read), retried after a backoff");
    gp_backoff_init(&r->reseed_backoff, &r->reseed_backoff);
    gp_kvscript_init(&r->unlock_script, registry_unlock_lua);
    gp_kvscript_init(&r->forget_script, registry_forget_lua);
    r->m_forget_failures = gp_metrics_counter(m, "gp_registry_live_cleanup_failures_total", NULL,
                                              "Removals of a node from a Redis shard (delete, "
                                              "site move) that failed, retried with backoff");
    r->m_forget_dropped = gp_metrics_counter(m, "gp_registry_live_cleanup_unchecked_total", NULL,
                                             "Removals sent unchecked because the retry list "
                                             "was full");
    r->m_forget_pending = gp_metrics_gauge(m, "gp_registry_live_cleanup_pending", NULL,
                                           "Removals of a node from a Redis shard not yet "
                                           "confirmed");
    r->forgets = calloc(REGISTRY_FORGET_MAX, sizeof(*r->forgets));
    if (r->forgets == NULL)
        GP_WARN("live_forget_unchecked", "code=NOMEM");
    gp_kvscript_init(&r->hb_script, registry_hb_lua);
    gp_kvscript_init(&r->sweep_script, registry_sweep_lua);
    gp_kvscript_init(&r->sweep_read_script, registry_sweep_read_lua);
    gp_kvscript_init(&r->reseed_script, registry_reseed_lua);
    gp_kvscript_init(&r->contact_script, registry_contact_lua);
    gp_kvscript_init(&r->adm_script, registry_adm_lua);
    r->m_quarantines = gp_metrics_counter(m, "gp_registry_quarantines_total", NULL,
                                          "Nodes quarantined by a rule (XIDs, ECC, lost GPU, "
                                          "flapping)");
    r->m_contacts = gp_metrics_counter(m, "gp_registry_contacts_total", NULL,
                                       "Lease renewals taken as contact by the failure detector");
    r->chains = calloc(REGISTRY_SHARDS, sizeof(*r->chains));
    r->sweep_more = calloc(REGISTRY_SHARDS, sizeof(*r->sweep_more));
    if (r->chains == NULL || r->sweep_more == NULL) {
        free(r->chains);
        free(r->sweep_more);
        r->chains = NULL;          /* no sweep: logged, the service still serves */
        r->sweep_more = NULL;
        GP_WARN("sweep_disabled", "code=NOMEM");
    }
}
