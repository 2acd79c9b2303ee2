/* states.c -- node state changes: published at once by live.c, written
 * to PostgreSQL's nodes.state here, in batches.
 *
 * A change is never dropped for a failed write: the batch in flight is
 * kept until PostgreSQL confirms it; refused or failed, it goes back into
 * the queue (older than anything queued since) and is sent again after a
 * backoff (gp/backoff.h), counted in gp_registry_state_write_retries_total.
 * The queue is coalesced by node (only the newest state of a node is
 * written: a batch must not name a node twice, the UPDATE would pick one of
 * the rows at random), so it holds at most one entry per node of the
 * fleet.  CHANGES_MAX bounds it for a fleet past the design size: a change
 * that finds it full of other nodes is dropped, counted
 * (gp_registry_state_changes_dropped_total) and logged; the node's next
 * transition writes it again.
 *
 * Order across instances: each change carries the wall time of the
 * transition it reports (at_ms, the NodeState's), and the row takes it
 * only when it is newer than the row's state_since, which it then becomes
 * (also for the same state: the node left it and came back meanwhile).  So
 * an older transition that reaches PostgreSQL late (a batch retried after
 * a backoff on one instance while another wrote the node's next one) never
 * overwrites a newer one.  Equal times: the first written wins (a batch
 * written twice changes nothing).  The time is Redis's clock
 * (registry_now_ms: TIME every 10 s, carried on by the monotonic clock),
 * the clock of the live view, so an instance whose wall clock is off
 * (stepped an hour) neither blocks the others' writes nor has its own
 * refused.
 *
 * At a graceful stop (registry_states_stop) the queue is written at once,
 * whatever the backoff, and the drain waits for PostgreSQL's answer
 * (gp_app_hold, bounded by drain-ms).  A batch that fails then is not
 * retried: its changes are logged as unwritten (node_state_unwritten);
 * the nodes' next transitions, or the reseed of a new Redis, are what
 * repair them. */

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/backoff.h"
#include "gp/clock.h"
#include "gp/dbarray.h"
#include "gp/log.h"
#include "registry.h"

/* State names are the schema's (NodeState.state enum), never restated. */
#define STATE_FIELD (&msg_node_state_desc.fields[MSG_NODE_STATE__STATE])

const char *
registry_state_name(int32_t state)
{
    return state >= 0 && (uint32_t)state < STATE_FIELD->nenums ? STATE_FIELD->enums[state]
                                                               : STATE_FIELD->enums[0];
}

int32_t
registry_state_from_name(const char *s)
{
    for (uint32_t i = 0; s != NULL && i < STATE_FIELD->nenums; i++)
        if (strcmp(s, STATE_FIELD->enums[i]) == 0)
            return (int32_t)i;
    return MSG_NODE_STATE_STATE_UNKNOWN;
}

#define CHANGES_MAX  262144     /* > 2 x the 100,000 nodes of the design; 80 B each: 20 MB */

static void flush_changes(registry *r);

static int
change_cmp(const void *a, const void *b)
{
    const state_change *x = a, *y = b;
    int                 c = strcmp(x->node, y->node);

    return c != 0 ? c : x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Keeps the newest change of each node. */
static void
coalesce(state_change *v, unsigned *n)
{
    unsigned k = 0;

    if (*n < 2)
        return;
    qsort(v, *n, sizeof(*v), change_cmp);
    for (unsigned i = 0; i < *n; i++) {
        if (i + 1 < *n && strcmp(v[i].node, v[i + 1].node) == 0)
            continue;                              /* a newer one follows */
        v[k++] = v[i];
    }
    *n = k;
}

/* Appends a change; false when the queue is full of other nodes. */
static bool
queue_put(registry *r, const state_change *c)
{
    if (r->nchanges == r->capchanges && r->capchanges < CHANGES_MAX) {
        unsigned      cap = r->capchanges ? r->capchanges * 2 : 256;
        state_change *v;

        cap = cap > CHANGES_MAX ? CHANGES_MAX : cap;
        if ((v = realloc(r->changes, cap * sizeof(*v))) != NULL) {
            r->changes = v;
            r->capchanges = cap;
        }
    }
    if (r->nchanges == r->capchanges)
        coalesce(r->changes, &r->nchanges);
    if (r->nchanges == r->capchanges) {
        (*r->m_changes_dropped)++;
        if (!r->overflow_logged)
            GP_WARN("node_state_queue_full", "limit=%u node=%s state=%s "
                    "detail=\"PostgreSQL is behind; the state of this node is written on its next change\"",
                    (unsigned)CHANGES_MAX, c->node, registry_state_name(c->state));
        r->overflow_logged = true;
        return false;
    }
    r->changes[r->nchanges++] = *c;
    return true;
}

/* While stopping, the drain is held exactly while a batch is in flight. */
static void
stop_hold_update(registry *r)
{
    if (!r->stopping)
        return;
    if (r->flushing && !r->holding) {
        r->holding = true;
        gp_app_hold(r->app);
    } else if (!r->flushing && r->holding) {
        r->holding = false;
        gp_app_release(r->app);             /* may close the app: last */
    }
}

/* Logs the changes a stopping registry leaves unwritten (the first nodes). */
static void
log_unwritten(const state_change *v, unsigned n, gp_err err, const char *detail)
{
    char     nodes[512];
    size_t   len = 0;
    unsigned i;

    nodes[0] = '\0';
    for (i = 0; i < n && len + GP_MAX_ID + 2 < sizeof(nodes); i++)
        len += (size_t)snprintf(nodes + len, sizeof(nodes) - len, "%s%s:%s", i ? "," : "",
                                v[i].node, registry_state_name(v[i].state));
    GP_WARN("node_state_unwritten", "code=%s changes=%u nodes=\"%s%s\" detail=\"%s\"",
            gp_err_name(err), n, nodes, i < n ? ",..." : "", detail ? detail : "");
}

/* A failed batch: counted, logged, and the next one waits for a backoff. */
static void
retry_later(registry *r, gp_err err, unsigned n, const char *detail)
{
    unsigned delay = gp_backoff_next_ms(&r->flush_backoff);

    GP_WARN("node_state_write_failed", "code=%s changes=%u retry_ms=%u detail=\"%s\"",
            gp_err_name(err), n, delay, detail ? detail : "");
    (*r->m_write_retries)++;
    r->flush_not_before = gp_mono_ms() + delay;
}

/* The batch in flight goes back into the queue (older seq: a newer queued
 * change of the same node wins). */
static void
requeue_inflight(registry *r)
{
    for (unsigned i = 0; i < r->ninflight; i++)
        queue_put(r, &r->inflight[i]);
    r->ninflight = 0;
}

static void
changes_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    registry *r = arg;

    (void)res;
    (void)nres;
    r->flushing = false;
    if (err != GP_EOK && r->stopping) {
        /* no retry at stop: logged, then the drain may end */
        (*r->m_write_retries)++;
        requeue_inflight(r);
        log_unwritten(r->changes, r->nchanges, err, detail);
        stop_hold_update(r);
        return;
    }
    if (err != GP_EOK) {
        retry_later(r, err, r->ninflight, detail);
        requeue_inflight(r);
        return;
    }
    gp_backoff_reset(&r->flush_backoff);
    r->flush_not_before = 0;
    r->ninflight = 0;
    r->overflow_logged = false;
    if (r->nchanges > 0)
        flush_changes(r);
    stop_hold_update(r);
}

static void
flush_changes(registry *r)
{
    gp_buf        ids, states, ats;
    const char   *params[3];
    state_change *t;
    unsigned      tn;
    gp_err        rc = GP_EOK;

    if (r->flushing || r->nchanges == 0 || gp_app_db(r->app) == NULL ||
        (!r->stopping && gp_mono_ms() < r->flush_not_before))
        return;
    coalesce(r->changes, &r->nchanges);
    gp_buf_init(&ids, 0);
    gp_buf_init(&states, 0);
    gp_buf_init(&ats, 0);
    rc = gp_pgarr_begin(&ids);
    rc = rc ? rc : gp_pgarr_begin(&states);
    rc = rc ? rc : gp_pgarr_begin(&ats);
    for (unsigned i = 0; i < r->nchanges && rc == GP_EOK; i++) {
        char at[24];

        snprintf(at, sizeof(at), "%llu", (unsigned long long)r->changes[i].at_ms);
        rc = gp_pgarr_add(&ids, r->changes[i].node);
        rc = rc ? rc : gp_pgarr_add(&states, registry_state_name(r->changes[i].state));
        rc = rc ? rc : gp_pgarr_add(&ats, at);
    }
    rc = rc ? rc : gp_pgarr_end(&ids);
    rc = rc ? rc : gp_pgarr_end(&states);
    rc = rc ? rc : gp_pgarr_end(&ats);
    params[0] = ids.p;
    params[1] = states.p;
    params[2] = ats.p;
    /* at_ms to timestamptz exactly (no float); a NULL state_since (never
     * in this schema) counts as older than anything */
    if (rc == GP_EOK)
        rc = gp_db_query(gp_app_db(r->app),
                         "UPDATE nodes SET state = v.s, state_since = v.t "
                         "FROM (SELECT id, s, timestamptz 'epoch' + at * interval '1 millisecond' AS t"
                         " FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(id, s, at)) AS v "
                         "WHERE nodes.id = v.id"
                         " AND (nodes.state_since IS NULL OR nodes.state_since < v.t)",
                         3, params, 0, changes_written, r);
    if (rc == GP_EOK) {
        /* the queue becomes the batch in flight; the old batch array the queue */
        t = r->inflight;
        tn = r->capinflight;
        r->inflight = r->changes;
        r->capinflight = r->capchanges;
        r->ninflight = r->nchanges;
        r->changes = t;
        r->capchanges = tn;
        r->nchanges = 0;
        r->flushing = true;
    } else {
        retry_later(r, rc, r->nchanges, "not sent");
        if (r->stopping)
            log_unwritten(r->changes, r->nchanges, rc, "not sent");
    }
    gp_buf_fini(&ids);
    gp_buf_fini(&states);
    gp_buf_fini(&ats);
    stop_hold_update(r);
}


void
registry_states_queue(registry *r, const char *node, int32_t state, uint64_t at_ms)
{
    state_change c = {.state = state, .seq = ++r->change_seq, .at_ms = at_ms};

    snprintf(c.node, sizeof(c.node), "%s", node);
    if (queue_put(r, &c))
        flush_changes(r);
}

void
registry_states_flush(registry *r)
{
    flush_changes(r);
}

void
registry_states_stop(gp_app *app, void *arg)
{
    registry *r = arg;

    (void)app;
    r->stopping = true;
    if (r->nchanges > 0 || r->flushing)
        GP_INFO("node_state_flush_at_stop", "queued=%u in_flight=%u", r->nchanges,
                r->ninflight);
    flush_changes(r);                       /* at once: the backoff no longer applies */
    stop_hold_update(r);                    /* a batch already in flight holds the drain too */
}

static void
collect_changes(void *arg)
{
    registry *r = arg;

    if (r->m_changes_pending != NULL)
        *r->m_changes_pending = (double)r->nchanges + (double)r->ninflight;
}

void
registry_states_start(registry *r)
{
    gp_metrics *m = gp_app_metrics(r->app);

    r->m_write_retries = gp_metrics_counter(m, "gp_registry_state_write_retries_total", NULL,
                                            "Batches of node states PostgreSQL refused or did not "
                                            "take, queued again for a retry");
    r->m_changes_dropped = gp_metrics_counter(m, "gp_registry_state_changes_dropped_total", NULL,
                                              "Node state changes not queued for PostgreSQL "
                                              "(queue full of other nodes)");
    r->m_changes_pending = gp_metrics_gauge(m, "gp_registry_state_changes_pending", NULL,
                                            "Node state changes not yet confirmed by PostgreSQL "
                                            "(queued or in flight)");
    gp_metrics_on_collect(m, collect_changes, r);
    gp_backoff_init(&r->flush_backoff, r);
}
