/* attempts.c -- attempt events from the agents, and max run time.
 *
 * Agents publish every AttemptEvent to the stream ATTEMPTS and retry until
 * it is stored (the final event carries the counters billing needs), so
 * nothing is lost while this service is down: the durable consumer
 * "scheduler-attempts" takes them when it comes back.  A message may come
 * twice (a redelivery, or an agent's retry stored under another id), so
 * the handling is idempotent on (job, attempt, event): the SQL function
 * sched_attempt_event (migrate.c) moves an attempt only out of the states
 * the event can follow, keeps counters as the largest value reported, and
 * ends it through sched_attempt_end (end.h: the retry rule, its GPUs, the
 * other nodes of a failed attempt).  This file gathers the events of one
 * wake-up of the loop into one call of end.h and acks or naks each. */
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "end.h"
#include "gp/clock.h"
#include "gp/id.h"
#include "gp/log.h"
#include "scheduler.h"

/* Max run time: jobs ended per pass (a bounded transaction). */
#define MAXRUN_BATCH 200

/* ---- the durable route ----------------------------------------------------------- */

/* One event's outcome: acked, or nak'ed and delivered again after a
 * backoff. */
static void
event_finish(gp_req *req, gp_err err, const char *detail)
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
    /* an image that cannot be pulled is the job's or its registry's
     * fault, not the node's: its reliability is not charged */
    if (ev->event == MSG_ATTEMPT_EVENT_EVENT_FAILED_TO_START && strncmp(ev->reason, "image", 5) != 0)
        snap_node_fault(&s->snap, ev->node, gp_mono_ms());
    GP_INFO("attempt_event", "job=%s attempt=%u node=%s event=%s", ev->job_id, ev->attempt,
            ev->node, msg_attempt_event_event_names[ev->event]);
    gp_req_done(req, GP_EOK);
}

static void
one_done(void *arg, gp_err err, const char *detail)
{
    event_finish(arg, err, detail);
}

static void
event_send(gp_req *req)
{
    const msg_attempt_event *ev = gp_req_in(req);
    gp_err                   rc = sched_end_reported(gp_req_state(req), &ev, 1, one_done, req);

    if (rc != GP_EOK)
        event_finish(req, GP_EUNAVAIL, gp_err_name(rc));
}

/* ---- events in batches --------------------------------------------------------------
 *
 * The events one wake-up of the loop brought (an ev_prepare flushes them
 * before it waits again) go to end.h as one call: one statement.  A batch
 * that fails (one event's error aborts the statement) is sent again event
 * by event, so each is acked or nak'ed on its own. */
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
batch_done(void *arg, gp_err err, const char *detail)
{
    evbatch *b = arg;

    if (err != GP_EOK) {
        GP_WARN("attempt_event_batch_failed", "events=%u code=%s detail=\"%s\"", b->n,
                gp_err_name(err), detail);
        for (unsigned i = 0; i < b->n; i++)
            event_send(b->req[i]);
    } else {
        for (unsigned i = 0; i < b->n; i++)
            event_finish(b->req[i], GP_EOK, "");
    }
    free(b);
}

static void
events_flush(sched *s)
{
    const msg_attempt_event *ev[EVENT_BATCH];
    evbatch                 *b;

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
    for (unsigned i = 0; i < b->n; i++)
        ev[i] = gp_req_in(b->req[i]);
    sched_count(s->m_event_batches);
    if (sched_end_reported(s, ev, b->n, batch_done, b) != GP_EOK)
        batch_done(b, GP_EUNAVAIL, "not sent");
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
maxrun_done(void *arg, gp_err err, int ended, const char *detail)
{
    sched *s = arg;

    s->maxrun_busy = false;
    if (err != GP_EOK) {
        GP_WARN("maxrun_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    for (int i = 0; i < ended; i++)
        sched_count(s->m_timed_out);
    if (ended > 0)
        GP_INFO("maxrun_ended", "jobs=%d", ended);
}

/* Measured on the database's clock from when the scheduler took the
 * attempt's 'started' (attempts.running_since_ms), never on an agent's
 * date nor this host's. */
void
sched_maxrun_run(gp_app *app, void *arg)
{
    sched *s = arg;

    (void)app;
    if (s->maxrun_busy)
        return;
    if (sched_end_overrun(s, MAXRUN_BATCH, maxrun_done, s) == GP_EOK)
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
