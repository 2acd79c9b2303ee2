/* attempts.c -- attempt events from the agents, and max run time.
 *
 * Agents publish every AttemptEvent to the stream ATTEMPTS and retry until
 * it is stored (the final event carries the counters billing needs), so
 * nothing is lost while this service is down: the durable consumer
 * "scheduler-attempts" takes them when it comes back.  A message may come
 * twice (a redelivery, or an agent's retry stored under another id), so
 * the handling is idempotent on (job, attempt, event): the SQL function
 * sched_attempt_event (migrate.c, step 3) moves an attempt only out of
 * the states the event can follow, keeps counters as the largest value
 * reported, and moves the job only for its newest attempt while the job
 * is live.  An event of an attempt that is no longer current (superseded,
 * cancelled, preempted, timed out) only updates that attempt's row.
 * Every change of the job writes its job_events row in the same
 * transaction (the outbox); the rows come back and are published after
 * the commit.  An attempt that ended frees its node's GPUs
 * (sched_attempt_ended); a failed node of a multi-node attempt stops the
 * others. */
#include <ev.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/dbarray.h"
#include "gp/id.h"
#include "gp/log.h"
#include "scheduler.h"

/* Max run time: jobs ended per pass (a bounded transaction). */
#define MAXRUN_BATCH "200"

/* The event's end: which AttemptEvent events end the attempt on its node. */
static bool
ends(int32_t event)
{
    return event != MSG_ATTEMPT_EVENT_EVENT_STARTED && event != MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED;
}

static void
publish_row(sched *s, const PGresult *res, int i)
{
    msg_job_event ev = {0};

    if (sched_row_to_msg(&msg_job_event_desc, res, i, &ev) == GP_EOK)
        sched_event_publish(s, &ev);   /* a failure leaves the row to the outbox */
}

/* A preempted attempt ended on one node (its GPUs are released by
 * sched_attempt_ended like any end): the preemption goes on for that node.
 * sched_preempted_ended() (preempt_run.c) is idempotent: the stop's
 * acknowledgement may have run it already. */
static void
preempted_ended(sched *s, const char *job_id, uint32_t attempt, const char *node)
{
    GP_INFO("preempted_attempt_ended", "job=%s attempt=%u node=%s", job_id, attempt, node);
    sched_preempted_ended(s, job_id, attempt, node);
}

/* The rows of res (all, or those whose column "ord" is ord when ord > 0:
 * one event's rows of a batch). */
static void
rows_of(sched *s, const PGresult *res, long ord)
{
    int kind = PQfnumber(res, "kind"), job = PQfnumber(res, "job_id");
    int att = PQfnumber(res, "attempt"), site = PQfnumber(res, "site");
    int node = PQfnumber(res, "node"), oc = PQfnumber(res, "ord");

    for (int i = 0; i < PQntuples(res); i++) {
        if (ord > 0 && (oc < 0 || strtol(PQgetvalue(res, i, oc), NULL, 10) != ord))
            continue;
        if (strcmp(PQgetvalue(res, i, kind), "event") == 0) {
            publish_row(s, res, i);
            continue;
        }
        if (strcmp(PQgetvalue(res, i, kind), "stop") == 0)
            sched_attempt_stop(s, PQgetvalue(res, i, job),
                               (uint32_t)strtoul(PQgetvalue(res, i, att), NULL, 10),
                               PQgetvalue(res, i, site), PQgetvalue(res, i, node));
        if (strcmp(PQgetvalue(res, i, kind), "preempted") == 0)
            preempted_ended(s, PQgetvalue(res, i, job),
                            (uint32_t)strtoul(PQgetvalue(res, i, att), NULL, 10),
                            PQgetvalue(res, i, node));
    }
}

void
sched_attempt_rows(sched *s, const PGresult *res)
{
    rows_of(s, res, 0);
}

/* ---- the durable route ----------------------------------------------------------- */

/* One event's outcome: rows (its own, ord) of res, or the failure (the
 * message is nak'ed and delivered again after a backoff). */
static void
event_finish(gp_req *req, gp_err err, const PGresult *res, long ord, const char *detail)
{
    sched                   *s = gp_req_state(req);
    const msg_attempt_event *ev = gp_req_in(req);

    if (err != GP_EOK) {
        sched_count(s->m_attempt_event_errors);
        GP_WARN("attempt_event_failed", "job=%s attempt=%u event=%s code=%s detail=\"%s\"",
                ev->job_id, ev->attempt, msg_attempt_event_event_names[ev->event],
                gp_err_name(err), detail);
        gp_req_done(req, gp_req_fail(req, err, "database: %s", detail));
        return;
    }
    rows_of(s, res, ord);
    /* the release is fenced and idempotent: a repeated end frees nothing */
    if (ends(ev->event))
        sched_attempt_ended(s, ev->job_id, ev->attempt, ev->site, ev->node);
    if (ev->event == MSG_ATTEMPT_EVENT_EVENT_FAILED_TO_START)
        snap_node_fault(&s->snap, ev->node, gp_mono_ms());
    GP_INFO("attempt_event", "job=%s attempt=%u node=%s event=%s", ev->job_id, ev->attempt,
            ev->node, msg_attempt_event_event_names[ev->event]);
    gp_req_done(req, GP_EOK);
}

static void
event_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    if (err == GP_EOK && nres != 1)
        err = GP_EINTERNAL, detail = "no result";
    event_finish(arg, err, err == GP_EOK ? res[0] : NULL, 0, detail);
}

static void
u64(char *out, size_t n, const msg_attempt_event *ev, int field, uint64_t v)
{
    if (GP_HAS(ev, field))
        snprintf(out, n, "%llu", (unsigned long long)v);
    else
        out[0] = '\0';
}

/* The 11 parameters of sched_attempt_event, as text. */
#define EV_NPARAMS 11
typedef struct ev_params {
    char        att[16], code[16], at[24], gpu[24], mj[24], prog[24], now[24];
    const char *p[EV_NPARAMS];
} ev_params;

static void
ev_params_of(const msg_attempt_event *ev, ev_params *v)
{
    snprintf(v->att, sizeof(v->att), "%u", ev->attempt);
    if (GP_HAS(ev, MSG_ATTEMPT_EVENT__EXIT_CODE))
        snprintf(v->code, sizeof(v->code), "%d", ev->exit_code);
    else
        v->code[0] = '\0';
    snprintf(v->at, sizeof(v->at), "%llu", (unsigned long long)ev->at_ms);
    u64(v->gpu, sizeof(v->gpu), ev, MSG_ATTEMPT_EVENT__GPU_MS, ev->gpu_ms);
    u64(v->mj, sizeof(v->mj), ev, MSG_ATTEMPT_EVENT__ENERGY_MJ, ev->energy_mj);
    u64(v->prog, sizeof(v->prog), ev, MSG_ATTEMPT_EVENT__PROGRESS_MS, ev->progress_ms);
    snprintf(v->now, sizeof(v->now), "%llu", (unsigned long long)gp_wall_ms());
    const char *p[EV_NPARAMS] = {ev->job_id, v->att, ev->site, ev->node,
                                 msg_attempt_event_event_names[ev->event], v->code, v->at,
                                 v->gpu, v->mj, v->prog, v->now};
    memcpy(v->p, p, sizeof(p));
}

static void
event_send(gp_req *req)
{
    sched    *s = gp_req_state(req);
    ev_params v;
    gp_err    rc;

    ev_params_of(gp_req_in(req), &v);
    rc = gp_db_query(gp_app_db(s->app),
                     "SELECT * FROM sched_attempt_event($1, $2::int, $3, $4, $5, "
                     "NULLIF($6, '')::int, $7::bigint, NULLIF($8, '')::bigint, "
                     "NULLIF($9, '')::bigint, NULLIF($10, '')::bigint, $11::bigint)",
                     EV_NPARAMS, v.p, 0, event_done, req);
    if (rc != GP_EOK)
        event_finish(req, GP_EUNAVAIL, NULL, 0, gp_err_name(rc));
}

/* ---- events in batches --------------------------------------------------------------
 *
 * The events one wake-up of the loop brought (an ev_prepare flushes them
 * before it waits again) go to the database as ONE statement: the
 * function is called for each, in arrival order (a LATERAL call over the
 * arrays WITH ORDINALITY runs row by row, each call seeing the ones
 * before), and each row it returns carries its event's ord.  One
 * statement per event was one of the round trips every job cost
 * PostgreSQL (place_bench).  A batch that fails (one event's error aborts
 * the statement) is sent again event by event, so each is acked or
 * nak'ed on its own. */
#define EVENT_BATCH 64

static struct {
    ev_prepare prep;
    bool       armed;
    gp_req    *req[EVENT_BATCH];
    unsigned   n;
} eq;

typedef struct evbatch {
    gp_req  *req[EVENT_BATCH];
    unsigned n;
} evbatch;

static void
batch_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    evbatch *b = arg;

    if (err != GP_EOK || nres != 1) {
        GP_WARN("attempt_event_batch_failed", "events=%u code=%s detail=\"%s\"", b->n,
                gp_err_name(err), detail);
        for (unsigned i = 0; i < b->n; i++)
            event_send(b->req[i]);
    } else {
        for (unsigned i = 0; i < b->n; i++)
            event_finish(b->req[i], GP_EOK, res[0], (long)i + 1, "");
    }
    free(b);
}

static const char batch_sql[] =
    "SELECT e.ord, r.* FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[],\n"
    "    $6::text[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::bigint[])\n"
    "  WITH ORDINALITY AS e(job, att, site, node, ev, code, at, gpu, mj, prog, now, ord)\n"
    "CROSS JOIN LATERAL sched_attempt_event(e.job, e.att, e.site, e.node, e.ev,\n"
    "  NULLIF(e.code, '')::int, e.at, NULLIF(e.gpu, '')::bigint, NULLIF(e.mj, '')::bigint,\n"
    "  NULLIF(e.prog, '')::bigint, e.now) r\n"
    "ORDER BY e.ord";

static void
events_flush(sched *s)
{
    evbatch    *b;
    gp_buf      arr[EV_NPARAMS];
    const char *p[EV_NPARAMS];
    gp_err      rc = GP_EOK;

    if (eq.armed)
        ev_prepare_stop(gp_app_loop(s->app), &eq.prep);
    eq.armed = false;
    if (eq.n == 0)
        return;
    if (eq.n == 1 || (b = calloc(1, sizeof(*b))) == NULL) {
        for (unsigned i = 0; i < eq.n; i++)
            event_send(eq.req[i]);
        eq.n = 0;
        return;
    }
    memcpy(b->req, eq.req, eq.n * sizeof(eq.req[0]));
    b->n = eq.n;
    eq.n = 0;
    for (int k = 0; k < EV_NPARAMS; k++) {
        gp_buf_init(&arr[k], EVENT_BATCH * 160 + 8);
        if (rc == GP_EOK)
            rc = gp_pgarr_begin(&arr[k]);
    }
    for (unsigned i = 0; i < b->n && rc == GP_EOK; i++) {
        ev_params v;

        ev_params_of(gp_req_in(b->req[i]), &v);
        for (int k = 0; k < EV_NPARAMS && rc == GP_EOK; k++)
            rc = gp_pgarr_add(&arr[k], v.p[k]);
    }
    for (int k = 0; k < EV_NPARAMS; k++) {
        if (rc == GP_EOK)
            rc = gp_pgarr_end(&arr[k]);
        p[k] = arr[k].p;
    }
    sched_count(s->m_event_batches);
    if (rc == GP_EOK)
        rc = gp_db_query(gp_app_db(s->app), batch_sql, EV_NPARAMS, p, 0, batch_done, b);
    for (int k = 0; k < EV_NPARAMS; k++)
        gp_buf_fini(&arr[k]);
    if (rc != GP_EOK)
        batch_done(b, rc, NULL, 0, "not sent");
}

static void
events_due(struct ev_loop *loop, ev_prepare *w, int revents)
{
    (void)loop, (void)revents;
    events_flush(w->data);
}

static void
event_queue(sched *s, gp_req *req)
{
    eq.req[eq.n++] = req;
    if (eq.n == EVENT_BATCH) {
        events_flush(s);
        return;
    }
    if (!eq.armed) {
        ev_prepare_init(&eq.prep, events_due);
        eq.prep.data = s;
        ev_prepare_start(gp_app_loop(s->app), &eq.prep);
        eq.armed = true;
    }
}

static gp_err
on_attempt_event(gp_req *req, const void *in, void *out)
{
    const msg_attempt_event *ev = in;
    sched                   *s = gp_req_state(req);

    (void)out;
    /* the subject is the node's own (its NATS identity allows no other):
     * a body that names another node is refused, as the registry does */
    if (strcmp(ev->site, gp_req_param(req, "site")) != 0 ||
        strcmp(ev->node, gp_req_param(req, "node")) != 0)
        return gp_req_fail(req, GP_EDENIED, "site, node: the body names another node than the "
                           "subject");
    if (!gp_id_ok(ev->job_id) || !gp_id_ok(ev->site) || !gp_id_ok(ev->node))
        return gp_req_fail(req, GP_EINVAL, "job_id, site, node: must be 1 to 63 of "
                           "[A-Za-z0-9_-]");
    sched_count(s->m_attempt_events[ev->event]);
    event_queue(s, req);
    return GP_EPENDING;
}

/* Redelivered after 1 s, doubling, up to 12 deliveries (about an hour of
 * a database outage) before the dead-letter stream keeps it. */
const gp_durable sched_attempts_durable = {.stream = "ATTEMPTS", .name = "scheduler-attempts",
                                           .max_deliver = 12, .ack_wait_ms = 30000,
                                           .backoff_ms = 1000};

const gp_route sched_attempt_routes[] = {
    {GP_OP_NODE_ATTEMPT, on_attempt_event, 0, 10000, NULL, &sched_attempts_durable},
    {NULL},
};

/* ---- max run time ------------------------------------------------------------------ */

static void
maxrun_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched *s = arg;
    int    n = 0;

    s->maxrun_busy = false;
    if (err != GP_EOK || nres != 1) {
        GP_WARN("maxrun_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    for (int i = 0; i < PQntuples(res[0]); i++)
        n += strcmp(PQgetvalue(res[0], i, 0), "event") == 0;
    if (n > 0) {
        for (int i = 0; i < n; i++)
            sched_count(s->m_timed_out);
        GP_INFO("maxrun_ended", "jobs=%d", n);
    }
    sched_attempt_rows(s, res[0]);
}

/* Measured on the database's clock from when the scheduler took the
 * attempt's 'started' (attempts.running_since_ms), never on an agent's
 * date nor this host's. */
void
sched_maxrun_run(gp_app *app, void *arg)
{
    sched      *s = arg;
    char        now[24];
    const char *p[] = {now, MAXRUN_BATCH};

    if (s->maxrun_busy)
        return;
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    if (gp_db_query(gp_app_db(app), "SELECT * FROM sched_maxrun($1::bigint, $2::int)", 2, p, 0,
                    maxrun_done, s) == GP_EOK)
        s->maxrun_busy = true;
}

void
sched_attempts_start(sched *s)
{
    gp_metrics *m = gp_app_metrics(s->app);

    gp_metrics_counters(m, "gp_scheduler_attempt_events_total", "event",
                        msg_attempt_event_event_names, 6, "Attempt events taken, by event",
                        s->m_attempt_events);
    s->m_attempt_event_errors = gp_metrics_counter(
        m, "gp_scheduler_attempt_event_errors_total", NULL,
        "Attempt events that could not be stored (delivered again)");
    s->m_release_failures = gp_metrics_counter(
        m, "gp_scheduler_release_failures_total", NULL,
        "GPU releases of ended attempts that failed (the reconcile removes them)");
    s->m_timed_out = gp_metrics_counter(m, "gp_scheduler_max_run_time_total", NULL,
                                        "Jobs ended by their max run time");
    s->m_event_batches = gp_metrics_counter(m, "gp_scheduler_attempt_event_batches_total", NULL,
                                            "Statements that took two or more attempt events");
}
