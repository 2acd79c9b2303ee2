/* events.c -- job events: the outbox and the stream JOBS, and each
 * tenant's durable consumer on it (made here, read by the tenant).
 *
 * Every state change of a job writes its job_events row in the same
 * transaction as the change, unpublished.  After the commit the handler
 * calls sched_event_publish: a JetStream publish with Nats-Msg-Id
 * "<job>.<seq>", then the row is marked published.  A crash or a failed
 * publish between the two leaves the row unpublished; the "outbox" task
 * republishes such rows once they are older than outbox-grace-ms (so it
 * does not race the handler's own publish), and the stream's duplicate
 * window stores a message published twice only once.  Integrators who
 * still see one twice (past the window) can tell by job_id and seq. */
#include <ev.h>
#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/dbarray.h"
#include "gp/log.h"
#include "gp/tenant_events.h"
#include "scheduler.h"

/* Outbox rows per pass: one pass's publishes stay a bounded burst. */
#define OUTBOX_BATCH 256

/* The stream takes every subject below gp.events.<tenant>.job (filled by
 * sched_events_start from the jobEvent operation), not just the op's
 * pattern: a consumer's filter must lie inside the stream's subjects, and
 * an integrator filters on gp.events.<tenant>.job.> or one job's ">". */
static char        jobs_subject[GP_MAX_SUBJECT];
static const char *jobs_subjects[] = {jobs_subject, NULL};
/* ATTEMPTS: the nodeAttempt op's pattern (every node's attempt events). */
static char        attempts_subject[GP_MAX_SUBJECT];
static const char *attempts_subjects[] = {attempts_subject, NULL};

/* Integrators replay a week with a durable consumer; a publish retried
 * within two minutes is stored once.  Byte limits (alike in every service
 * that declares the stream; stream-max-bytes-mb overrides them): 1 GiB
 * each, a week of ~2 M job events or attempt events of ~500 bytes; when
 * full, a new event is refused (its outbox keeps it) and alerting's
 * StreamFull has fired at 90%. */
const gp_stream_cfg sched_streams[] = {
    {.name = "JOBS", .subjects = (const char **)jobs_subjects, .max_age_s = 7 * 24 * 3600,
     .max_bytes = 1LL << 30, .duplicate_window_s = 120, .memory = false},
    /* Attempt events until the scheduler took them (the agents retry until
     * stored; the final event carries the counters billing needs): a week
     * covers any outage of the scheduler; an agent's retry within 10 min
     * (its outbox's backoff tops at 15 s, a cut uplink may hold it longer)
     * is stored once. */
    {.name = "ATTEMPTS", .subjects = (const char **)attempts_subjects,
     .max_age_s = 7 * 24 * 3600, .max_bytes = 1LL << 30, .duplicate_window_s = 600,
     .memory = false},
    {.name = NULL},
};

typedef struct pub {
    sched *s;
    bool   outbox;                  /* sent by the outbox task */
    char   job_id[GP_MAX_ID + 1];
    char   seq[24];
} pub;

/* Published rows are marked in batches: one UPDATE for up to MARK_BATCH
 * rows, sent MARK_DELAY_S after the first or when full.  One UPDATE per
 * event was three of the statements PostgreSQL ran for every job
 * (submitted, placed, started), each its own round trip (place_bench).
 * A mark lost (a crash, a failed write) only makes the outbox publish the
 * event again: a duplicate the stream's window drops. */
#define MARK_BATCH   256
#define MARK_DELAY_S 0.005

static struct marks {
    sched    *s;
    ev_timer  timer;
    bool      armed;
    unsigned  n;
    char      job[MARK_BATCH][GP_MAX_ID + 1];
    uint64_t  seq[MARK_BATCH];
} mk;

/* The marks of an outbox pass's rows end the pass (MARK_OUTBOX in arg):
 * the next pass must not read them again before they are written, or a
 * row the pass published is published twice (the stream drops the second,
 * core subscribers saw both: sched_api_test under CI load). */
#define MARK_OUTBOX (1u << 31)

static void
marked(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    unsigned a = (unsigned)(uintptr_t)arg;

    (void)res, (void)nres;
    if (err != GP_EOK)   /* the outbox will publish them again: duplicates the stream drops */
        GP_WARN("job_event_mark_failed", "events=%u code=%s detail=\"%s\"", a & ~MARK_OUTBOX,
                gp_err_name(err), detail);
    if ((a & MARK_OUTBOX) && mk.s != NULL)
        mk.s->outbox_busy = false;
}

static void
marks_flush(bool outbox)
{
    gp_buf jobs, seqs;
    char   seq[24];
    gp_err rc;

    if (mk.armed)
        ev_timer_stop(gp_app_loop(mk.s->app), &mk.timer);
    mk.armed = false;
    if (mk.n == 0) {
        if (outbox)
            mk.s->outbox_busy = false;
        return;
    }
    gp_buf_init(&jobs, MARK_BATCH * (GP_MAX_ID + 4) + 8);
    gp_buf_init(&seqs, MARK_BATCH * 24 + 8);
    rc = gp_pgarr_begin(&jobs);
    if (rc == GP_EOK)
        rc = gp_pgarr_begin(&seqs);
    for (unsigned i = 0; rc == GP_EOK && i < mk.n; i++) {
        snprintf(seq, sizeof(seq), "%llu", (unsigned long long)mk.seq[i]);
        rc = gp_pgarr_add(&jobs, mk.job[i]);
        if (rc == GP_EOK)
            rc = gp_pgarr_add(&seqs, seq);
    }
    if (rc == GP_EOK)
        rc = gp_pgarr_end(&jobs);
    if (rc == GP_EOK)
        rc = gp_pgarr_end(&seqs);
    const char *params[] = {jobs.p, seqs.p};

    if (rc == GP_EOK)
        rc = gp_db_query(gp_app_db(mk.s->app),
                         "UPDATE job_events e SET published = true\n"
                         "FROM unnest($1::text[], $2::bigint[]) AS m(job, seq)\n"
                         "WHERE e.job_id = m.job AND e.seq = m.seq AND NOT e.published",
                         2, params, 0, marked,
                         (void *)(uintptr_t)(mk.n | (outbox ? MARK_OUTBOX : 0)));
    if (rc != GP_EOK)
        marked((void *)(uintptr_t)(mk.n | (outbox ? MARK_OUTBOX : 0)), rc, NULL, 0,
               "not queued");
    gp_buf_fini(&jobs);
    gp_buf_fini(&seqs);
    mk.n = 0;
}

static void
marks_due(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)w, (void)revents;
    mk.armed = false;
    marks_flush(false);
}

static void
mark_add(sched *s, const char *job, uint64_t seq)
{
    mk.s = s;
    if (mk.n == MARK_BATCH)
        marks_flush(false);
    snprintf(mk.job[mk.n], sizeof(mk.job[0]), "%s", job);
    mk.seq[mk.n++] = seq;
    if (!mk.armed) {
        ev_timer_init(&mk.timer, marks_due, MARK_DELAY_S, 0);
        ev_timer_start(gp_app_loop(s->app), &mk.timer);
        mk.armed = true;
    }
}

static void
outbox_release(pub *p)
{
    if (p->outbox && p->s->outbox_inflight > 0 && --p->s->outbox_inflight == 0) {
        mk.s = p->s;
        marks_flush(true);             /* the pass ends when its marks are written */
    }
}

static void
published(void *arg, gp_err err)
{
    pub *p = arg;

    if (err != GP_EOK) {
        outbox_release(p);
        sched_count(p->s->m_event_publish_failures);
        GP_WARN("job_event_publish_failed", "job=%s seq=%s code=%s", p->job_id, p->seq,
                gp_err_name(err));
        free(p);
        return;
    }
    sched_count(p->s->m_events_published);
    mark_add(p->s, p->job_id, strtoull(p->seq, NULL, 10));
    outbox_release(p);                 /* after: its mark is in the pass's flush */
    free(p);
}

static gp_err
publish(sched *s, const msg_job_event *ev, bool outbox)
{
    char        subj[GP_MAX_SUBJECT], id[GP_MAX_ID * 2 + 24];
    const char *args[] = {ev->tenant, ev->job_id, msg_job_event_event_names[ev->event]};
    pub        *p = calloc(1, sizeof(*p));
    gp_buf      b;
    gp_err      rc;

    if (p == NULL)
        return GP_ENOMEM;
    *p = (pub){.s = s, .outbox = outbox};
    snprintf(p->job_id, sizeof(p->job_id), "%s", ev->job_id);
    snprintf(p->seq, sizeof(p->seq), "%llu", (unsigned long long)ev->seq);
    snprintf(id, sizeof(id), "%s.%s", p->job_id, p->seq);
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    rc = gp_op_subject(GP_OP_JOB_EVENT, subj, sizeof(subj), args);
    if (rc == GP_EOK)
        rc = gp_msg_encode(&msg_job_event_desc, ev, &b);
    if (rc == GP_EOK)
        rc = gp_bus_js_pub(gp_app_bus(s->app), subj, id, b.p, b.n, published, p);
    gp_buf_fini(&b);
    if (rc != GP_EOK)
        free(p);
    return rc;
}

void
sched_event_publish(sched *s, const msg_job_event *ev)
{
    gp_err rc = publish(s, ev, false);

    if (rc != GP_EOK) {          /* the row stays unpublished: the outbox sends it */
        sched_count(s->m_event_publish_failures);
        GP_WARN("job_event_publish_failed", "job=%s seq=%llu code=%s", ev->job_id,
                (unsigned long long)ev->seq, gp_err_name(rc));
    }
}

/* Publishes the event rows a statement RETURNING e.* gave back; tenant
 * NULL: each row's own "tenant" column. */
void
sched_event_rows(sched *s, const char *tenant, const PGresult *res)
{
    for (int i = 0; res != NULL && i < PQntuples(res); i++) {
        msg_job_event ev = {0};

        if (sched_row_to_msg(&msg_job_event_desc, res, i, &ev) != GP_EOK)
            continue;                    /* logged; the row stays for the outbox */
        if (tenant != NULL)
            snprintf(ev.tenant, sizeof(ev.tenant), "%s", tenant);
        sched_event_publish(s, &ev);
    }
}

static void
outbox_rows(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched *s = arg;
    int    n = err == GP_EOK && nres == 1 ? PQntuples(res[0]) : 0;

    s->outbox_busy = false;
    if (err != GP_EOK) {
        GP_WARN("outbox_read_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    for (int i = 0; i < n; i++) {
        msg_job_event ev = {0};

        if (sched_row_to_msg(&msg_job_event_desc, res[0], i, &ev) != GP_EOK)
            continue;
        if (publish(s, &ev, true) == GP_EOK) {
            s->outbox_inflight++;
            sched_count(s->m_outbox_resent);
        } else {
            sched_count(s->m_event_publish_failures);
            GP_WARN("job_event_publish_failed", "job=%s seq=%llu outbox=1", ev.job_id,
                    (unsigned long long)ev.seq);
        }
    }
    s->outbox_busy = s->outbox_inflight > 0;
    if (n > 0)
        GP_INFO("outbox_republished", "events=%d", n);
}

void
sched_outbox_run(gp_app *app, void *arg)
{
    sched      *s = arg;
    char        cutoff[24], limit[16], sql[512];
    const char *params[] = {cutoff, limit};

    (void)app;
    if (s->outbox_busy)             /* the last pass is still publishing */
        return;
    /* at_ms is a stored wall-clock stamp, so the cutoff is too; a clock
     * step only makes a resend early or late, and the stream drops a
     * duplicate */
    snprintf(cutoff, sizeof(cutoff), "%llu",
             (unsigned long long)(gp_wall_ms() - s->cfg->outbox_grace_ms));
    snprintf(limit, sizeof(limit), "%d", OUTBOX_BATCH);
    snprintf(sql, sizeof(sql),
             "SELECT %s FROM job_events e JOIN jobs j ON j.id = e.job_id "
             "WHERE NOT e.published AND e.at_ms < $1::bigint ORDER BY e.at_ms LIMIT $2::int",
             sched_event_cols);
    if (gp_db_query(gp_app_db(s->app), sql, 2, params, 0, outbox_rows, s) == GP_EOK)
        s->outbox_busy = true;
}

/* ---- each tenant's consumer ----------------------------------------------------- */

typedef struct made {
    sched *s;
    char   durable[GP_MAX_ID + 16];
} made;

static void
consumer_made(void *arg, gp_err err)
{
    made *m = arg;

    sched_count(m->s->m_tenant_consumers[err == GP_EOK ? 0 : 1]);
    if (err != GP_EOK)              /* made at the tenant's next check instead */
        GP_WARN("tenant_consumer_failed", "stream=%s durable=%s code=%s", GP_JOBS_STREAM,
                m->durable, gp_err_name(err));
    free(m);
}

/* Its config is the chassis' default for a durable (explicit acks, 30 s to
 * ack, 1024 unacked) with the tenant's filter; a new one starts at the
 * stream's first message, so one made after the tenant's first events
 * still gives them, and making it again alike changes nothing. */
void
sched_tenant_consumer(sched *s, const char *tenant)
{
    char        filter[GP_MAX_SUBJECT + 1];
    made       *m = calloc(1, sizeof(*m));
    gp_pull_cfg c = {.stream = GP_JOBS_STREAM, .filter_subject = filter};
    gp_err      rc = m == NULL ? GP_ENOMEM
                               : gp_op_stream_filter(GP_OP_JOB_EVENT, "job",
                                                     (const char *const[]){tenant, NULL, NULL},
                                                     filter, sizeof(filter));

    if (rc == GP_EOK) {
        m->s = s;
        snprintf(m->durable, sizeof(m->durable), GP_TENANT_CONSUMER_FMT, tenant);
        c.durable = m->durable;
        rc = gp_bus_js_consumer(gp_app_bus(s->app), &c, consumer_made, m);
    }
    if (rc != GP_EOK) {
        sched_count(s->m_tenant_consumers[1]);
        GP_WARN("tenant_consumer_failed", "tenant=%s code=%s", tenant, gp_err_name(rc));
        free(m);
    }
}

void
sched_events_start(sched *s)
{
    gp_metrics *m = gp_app_metrics(s->app);

    /* every job and event of every tenant (gridpool-alerting declares JOBS too) */
    gp_op_stream_subject(GP_OP_JOB_EVENT, "job", jobs_subject, sizeof(jobs_subject));
    GP_INFO("jobs_stream", "subjects=%s", jobs_subject);
    {
        const char *any[] = {NULL, NULL, NULL};   /* every site and node */

        gp_op_pattern(GP_OP_NODE_ATTEMPT, attempts_subject, sizeof(attempts_subject), any);
    }

    s->m_events_published = gp_metrics_counter(m, "gp_scheduler_job_events_published_total", NULL,
                                               "Job events stored in the stream JOBS");
    s->m_event_publish_failures = gp_metrics_counter(
        m, "gp_scheduler_job_event_publish_failures_total", NULL,
        "Job event publishes that failed (the outbox sends them again)");
    s->m_outbox_resent = gp_metrics_counter(m, "gp_scheduler_outbox_republished_total", NULL,
                                            "Job events the outbox task published again");
    gp_metrics_counters(m, "gp_scheduler_tenant_consumers_total", "result",
                        (const char *const[]){"made", "failed"}, 2,
                        "Tenants' durable consumers on JOBS made (or made again alike), and "
                        "failures", s->m_tenant_consumers);
}
