/* states.c -- node state changes: published at once by live.c, written
 * to PostgreSQL here, in batches: the newest state of each node into
 * nodes.state, and every transition (prev, state, reason, when) as a row
 * of node_transitions, the node's history an operator reads.
 *
 * A change is never dropped for a failed write: the batch in flight is
 * kept until PostgreSQL confirms it; refused or failed, it goes back into
 * the queue (older than anything queued since) and is sent again after a
 * backoff (gp/backoff.h), counted in gp_registry_state_write_retries_total.
 * A batch keeps every transition for the history; the UPDATE takes each
 * node's newest (DISTINCT ON).  Only a queue that fills up is coalesced by
 * node (its older transitions leave the history, counted in
 * gp_registry_state_history_dropped_total), so it holds at most one entry
 * per node of the fleet then.  CHANGES_MAX bounds it for a fleet past the
 * design size: a change that finds it full of other nodes is dropped,
 * counted (gp_registry_state_changes_dropped_total) and logged; the node's
 * next transition writes it again.
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

/* Keeps the newest change of each node; returns how many went. */
static unsigned
coalesce(state_change *v, unsigned *n)
{
    unsigned k = 0, n0 = *n;

    if (*n < 2)
        return 0;
    qsort(v, *n, sizeof(*v), change_cmp);
    for (unsigned i = 0; i < *n; i++) {
        if (i + 1 < *n && strcmp(v[i].node, v[i + 1].node) == 0)
            continue;                              /* a newer one follows */
        v[k++] = v[i];
    }
    *n = k;
    return n0 - k;
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
        *r->m_history_dropped += coalesce(r->changes, &r->nchanges);
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

/* The batch's columns, one text[] literal each (gp/dbarray.h). */
enum { COL_NODE, COL_SITE, COL_PREV, COL_STATE, COL_REASON, COL_AT, NCOLS };

static gp_err
batch_columns(const state_change *v, unsigned n, gp_buf cols[NCOLS])
{
    gp_err rc = GP_EOK;

    for (int c = 0; c < NCOLS && rc == GP_EOK; c++)
        rc = gp_pgarr_begin(&cols[c]);
    for (unsigned i = 0; i < n && rc == GP_EOK; i++) {
        char at[24];

        snprintf(at, sizeof(at), "%llu", (unsigned long long)v[i].at_ms);
        rc = gp_pgarr_add(&cols[COL_NODE], v[i].node);
        rc = rc ? rc : gp_pgarr_add(&cols[COL_SITE], v[i].site);
        rc = rc ? rc : gp_pgarr_add(&cols[COL_PREV], registry_state_name(v[i].prev));
        rc = rc ? rc : gp_pgarr_add(&cols[COL_STATE], registry_state_name(v[i].state));
        rc = rc ? rc : gp_pgarr_add(&cols[COL_REASON], v[i].reason);
        rc = rc ? rc : gp_pgarr_add(&cols[COL_AT], at);
    }
    for (int c = 0; c < NCOLS && rc == GP_EOK; c++)
        rc = gp_pgarr_end(&cols[c]);
    return rc;
}

/* Every transition into the history; each node's newest into its row.
 * at_ms to timestamptz exactly (no float); a NULL state_since (never in
 * this schema) counts as older than anything. */
static const char write_sql[] =
    "WITH v AS (SELECT id, site, prev, s, why, ord,"
    "   timestamptz 'epoch' + at * interval '1 millisecond' AS t"
    "   FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])"
    "   WITH ORDINALITY AS u(id, site, prev, s, why, at, ord)),"
    " h AS (INSERT INTO node_transitions (node, site, prev, state, reason, at)"
    "   SELECT id, site, prev, s, why, t FROM v ORDER BY ord),"
    " last AS (SELECT DISTINCT ON (id) id, s, t FROM v ORDER BY id, t DESC, ord DESC)"
    " UPDATE nodes SET state = last.s, state_since = last.t FROM last"
    " WHERE nodes.id = last.id AND (nodes.state_since IS NULL OR nodes.state_since < last.t)";

static void
flush_changes(registry *r)
{
    gp_buf        cols[NCOLS];
    const char   *params[NCOLS];
    state_change *t;
    unsigned      tn;
    gp_err        rc = GP_EOK;

    if (r->flushing || r->nchanges == 0 || gp_app_db(r->app) == NULL ||
        (!r->stopping && gp_mono_ms() < r->flush_not_before))
        return;
    for (int c = 0; c < NCOLS; c++)
        gp_buf_init(&cols[c], 0);
    rc = batch_columns(r->changes, r->nchanges, cols);
    for (int c = 0; c < NCOLS; c++)
        params[c] = cols[c].p;
    if (rc == GP_EOK)
        rc = gp_db_query(gp_app_db(r->app), write_sql, NCOLS, params, 0, changes_written, r);
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
    for (int c = 0; c < NCOLS; c++)
        gp_buf_fini(&cols[c]);
    stop_hold_update(r);
}


void
registry_states_queue(registry *r, const char *site, const char *node, int32_t prev,
                      int32_t state, const char *reason, uint64_t at_ms)
{
    state_change c = {.prev = prev, .state = state, .seq = ++r->change_seq, .at_ms = at_ms};

    snprintf(c.node, sizeof(c.node), "%s", node);
    snprintf(c.site, sizeof(c.site), "%s", site);
    snprintf(c.reason, sizeof(c.reason), "%s", reason);
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
    r->m_history_dropped = gp_metrics_counter(m, "gp_registry_state_history_dropped_total", NULL,
                                              "Node transitions left out of node_transitions "
                                              "(a full queue kept only each node's newest)");
    r->m_changes_pending = gp_metrics_gauge(m, "gp_registry_state_changes_pending", NULL,
                                            "Node state changes not yet confirmed by PostgreSQL "
                                            "(queued or in flight)");
    gp_metrics_on_collect(m, collect_changes, r);
    gp_backoff_init(&r->flush_backoff, r);
}

/* ---- history retention ------------------------------------------------------------ */

/* Every instance may run it: a DELETE of rows already deleted finds none.
 * A batch a run (every 10 min, 20,000 rows) keeps each statement short;
 * a day of a 100,000-node fleet flapping is far less than that. */
static const char trim_sql[] =
    "DELETE FROM node_transitions WHERE id IN (SELECT id FROM node_transitions\n"
    "  WHERE at < now() - $1::int * interval '1 day' ORDER BY at LIMIT 20000)";

static void
trimmed(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    (void)arg;
    if (err != GP_EOK)
        GP_WARN("history_trim_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    else if (nres > 0 && atol(PQcmdTuples(res[0])) > 0)
        GP_INFO("history_trimmed", "rows=%s", PQcmdTuples(res[0]));
}

void
registry_history_trim(gp_app *app, void *arg)
{
    registry   *r = arg;
    char        days[16];
    const char *p[1] = {days};

    snprintf(days, sizeof(days), "%u", r->cfg->history_days);
    (void)gp_db_query(gp_app_db(app), trim_sql, 1, p, 0, trimmed, NULL);
}
