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
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
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

void
sched_attempt_rows(sched *s, const PGresult *res)
{
    int kind = PQfnumber(res, "kind"), job = PQfnumber(res, "job_id");
    int att = PQfnumber(res, "attempt"), site = PQfnumber(res, "site");
    int node = PQfnumber(res, "node");

    for (int i = 0; i < PQntuples(res); i++) {
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

/* ---- the durable route ----------------------------------------------------------- */

static void
event_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req                  *req = arg;
    sched                   *s = gp_req_state(req);
    const msg_attempt_event *ev = gp_req_in(req);

    if (err != GP_EOK || nres != 1) {   /* nak'ed: delivered again after a backoff */
        sched_count(s->m_attempt_event_errors);
        GP_WARN("attempt_event_failed", "job=%s attempt=%u event=%s code=%s detail=\"%s\"",
                ev->job_id, ev->attempt, msg_attempt_event_event_names[ev->event],
                gp_err_name(err), detail);
        gp_req_done(req, gp_req_fail(req, err != GP_EOK ? err : GP_EINTERNAL, "database: %s",
                                     detail));
        return;
    }
    sched_attempt_rows(s, res[0]);
    /* the release is fenced and idempotent: a repeated end frees nothing */
    if (ends(ev->event))
        sched_attempt_ended(s, ev->job_id, ev->attempt, ev->site, ev->node);
    if (ev->event == MSG_ATTEMPT_EVENT_EVENT_FAILED_TO_START)
        snap_node_fault(&s->snap, ev->node, gp_mono_ms());
    GP_INFO("attempt_event", "job=%s attempt=%u node=%s event=%s job_events=%d", ev->job_id,
            ev->attempt, ev->node, msg_attempt_event_event_names[ev->event], PQntuples(res[0]));
    gp_req_done(req, GP_EOK);
}

static void
u64(char *out, size_t n, const msg_attempt_event *ev, int field, uint64_t v)
{
    if (GP_HAS(ev, field))
        snprintf(out, n, "%llu", (unsigned long long)v);
    else
        out[0] = '\0';
}

static gp_err
on_attempt_event(gp_req *req, const void *in, void *out)
{
    const msg_attempt_event *ev = in;
    sched                   *s = gp_req_state(req);
    char                     att[16], code[16], at[24], gpu[24], mj[24], prog[24], now[24];
    const char              *p[] = {ev->job_id, att, ev->site, ev->node,
                                    msg_attempt_event_event_names[ev->event], code, at, gpu, mj,
                                    prog, now};
    gp_err                   rc;

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
    snprintf(att, sizeof(att), "%u", ev->attempt);
    if (GP_HAS(ev, MSG_ATTEMPT_EVENT__EXIT_CODE))
        snprintf(code, sizeof(code), "%d", ev->exit_code);
    else
        code[0] = '\0';
    snprintf(at, sizeof(at), "%llu", (unsigned long long)ev->at_ms);
    u64(gpu, sizeof(gpu), ev, MSG_ATTEMPT_EVENT__GPU_MS, ev->gpu_ms);
    u64(mj, sizeof(mj), ev, MSG_ATTEMPT_EVENT__ENERGY_MJ, ev->energy_mj);
    u64(prog, sizeof(prog), ev, MSG_ATTEMPT_EVENT__PROGRESS_MS, ev->progress_ms);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    rc = gp_db_query(gp_app_db(s->app),
                     "SELECT * FROM sched_attempt_event($1, $2::int, $3, $4, $5, "
                     "NULLIF($6, '')::int, $7::bigint, NULLIF($8, '')::bigint, "
                     "NULLIF($9, '')::bigint, NULLIF($10, '')::bigint, $11::bigint)",
                     11, p, 0, event_done, req);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, GP_EUNAVAIL, "database: %s",
                                                    gp_err_name(rc));
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
}
