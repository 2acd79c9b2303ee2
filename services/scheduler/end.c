/* end.c -- the only place an attempt ends and its job is requeued or
 * failed (end.h).  Each entry point is one statement (or one transaction)
 * around the SQL function sched_attempt_end; apply() then acts on the rows
 * it returned, in order:
 *
 *   'event'    a job_events row written with the change: published now
 *              (a failure leaves it to the outbox task, events.c);
 *   'release'  a node whose row this call ended: its GPUs go back (held
 *              for the preemptor when 'heir' is set);
 *   'stop'     the same for a node that may still run the attempt: it is
 *              told to stop first (a lost signal is caught by the node's
 *              next lease renewal, whose grants no longer include it).
 *
 * The job row is locked first by every writer of a job and its attempts,
 * so ends of one job from several instances, agents and timers are
 * serialized; a transaction that ends several jobs locks them in id order
 * first (no deadlock between instances). */
#include "end.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "booking.h"
#include "gp/clock.h"
#include "gp/dbarray.h"
#include "gp/imageref.h"
#include "gp/log.h"
#include "plan/endpoints.h"
#include "scheduler.h"
#include "signal.h"

/* The attempt states an end leaves (Attempt.state), for the counter. */
static const char *const end_states[] = {"succeeded", "failed",    "failed_to_start",
                                         "killed",    "lost",      "timed_out",
                                         "cancelled", "preempted", "superseded"};
#define END_STATES (sizeof(end_states) / sizeof(end_states[0]))
_Static_assert(END_STATES == SCHED_END_STATES, "scheduler.h's m_ends counts one per state");

static void
count_end(sched *s, const char *state)
{
    for (size_t k = 0; k < END_STATES; k++)
        if (strcmp(state, end_states[k]) == 0)
            sched_count(s->m_ends[k]);
}

/* ---- what the rows say ---------------------------------------------------------- */

static void
publish_row(sched *s, const PGresult *res, int i)
{
    msg_job_event ev = {0};

    if (sched_row_to_msg(&msg_job_event_desc, res, i, &ev) != GP_EOK)
        return;                         /* logged; the row stays for the outbox */
    sched_event_publish(s, &ev);        /* a failure leaves the row to the outbox */
    if (ev.event == MSG_JOB_EVENT_EVENT_REQUEUED && strcmp(ev.reason, "preempted") == 0)
        GP_INFO("job_requeued_after_preemption", "job=%s attempt=%u", ev.job_id, ev.attempt);
}

static void
release_row(sched *s, const PGresult *res, int i, bool stop)
{
    const char *job = PQgetvalue(res, i, PQfnumber(res, "job_id"));
    const char *site = PQgetvalue(res, i, PQfnumber(res, "site"));
    uint32_t    att = (uint32_t)strtoul(PQgetvalue(res, i, PQfnumber(res, "attempt")), NULL, 10);
    int         heir = PQfnumber(res, "heir");
    char        node[1][GP_MAX_ID + 1];

    snprintf(node[0], sizeof(node[0]), "%s", PQgetvalue(res, i, PQfnumber(res, "node")));
    count_end(s, PQgetvalue(res, i, PQfnumber(res, "state")));
    if (stop)
        sched_signal(s, site, node[0], job, att, MSG_ATTEMPT_SIGNAL_ACTION_STOP, NULL, NULL);
    sched_release_to(s, site, job, att, node, 1,
                     heir >= 0 && !PQgetisnull(res, i, heir) ? PQgetvalue(res, i, heir) : NULL);
    if (strcmp(PQgetvalue(res, i, PQfnumber(res, "state")), "preempted") == 0)
        GP_INFO("preempted_attempt_ended", "job=%s attempt=%u node=%s", job, att, node[0]);
    else
        GP_DEBUG("attempt_ended", "job=%s attempt=%u site=%s node=%s state=%s stop=%d", job, att,
                 site, node[0], PQgetvalue(res, i, PQfnumber(res, "state")), stop);
}

/* Acts on the rows of sched_attempt_end (and of the functions that call
 * it) after their commit. */
static void
apply(sched *s, const PGresult *res)
{
    int kind = PQfnumber(res, "kind");

    if (kind < 0)
        return;
    for (int i = 0; i < PQntuples(res); i++) {
        const char *k = PQgetvalue(res, i, kind);

        if (strcmp(k, "event") == 0)
            publish_row(s, res, i);
        else if (strcmp(k, "release") == 0 || strcmp(k, "stop") == 0)
            release_row(s, res, i, k[0] == 's');
    }
}

/* ---- one call: a statement or a transaction, then apply() ----------------------- */

typedef struct end_call {
    sched           *s;
    int              rows;        /* the result holding sched_attempt_end's rows */
    sched_end_cb    *cb;
    sched_cancel_cb *cancel_cb;
    sched_overrun_cb *overrun_cb;
    void            *arg;
} end_call;

static int
events_in(const PGresult *res)
{
    int kind = PQfnumber(res, "kind"), event = PQfnumber(res, "event"), n = 0;

    for (int i = 0; kind >= 0 && i < PQntuples(res); i++)
        n += strcmp(PQgetvalue(res, i, kind), "event") == 0 &&
             strcmp(PQgetvalue(res, i, event), "timed_out") == 0;
    return n;
}

static void
ended(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    end_call       *c = arg;
    const PGresult *rows = NULL;

    if (err == GP_EOK && nres <= c->rows)
        err = GP_EINTERNAL, detail = "no result";
    if (err == GP_EOK) {
        rows = res[c->rows];
        apply(c->s, rows);
    }
    if (c->cb != NULL)
        c->cb(c->arg, err, detail);
    if (c->overrun_cb != NULL)
        c->overrun_cb(c->arg, err, rows != NULL ? events_in(rows) : 0, detail);
    if (c->cancel_cb != NULL) {
        bool cancelled = false;

        for (int i = 0; rows != NULL && i < PQntuples(rows); i++)
            cancelled = cancelled || strcmp(PQgetvalue(rows, i, PQfnumber(rows, "event")),
                                            "cancelled") == 0;
        c->cancel_cb(c->arg, err, err == GP_EOK && nres > c->rows + 1 ? res[c->rows + 1] : NULL,
                     cancelled, detail);
    }
    free(c);
}

static end_call *
call_new(sched *s, int rows, void *arg)
{
    end_call *c = calloc(1, sizeof(*c));

    if (c != NULL)
        *c = (end_call){.s = s, .rows = rows, .arg = arg};
    return c;
}

static gp_err
run_query(end_call *c, const char *sql, int n, const char *const *p)
{
    gp_err rc = gp_db_query(gp_app_db(c->s->app), sql, n, p, 0, ended, c);

    if (rc != GP_EOK)
        free(c);
    return rc;
}

/* Statements in one transaction; the end's rows are those of the second
 * (the first takes the jobs' row locks in id order). */
static gp_err
run_tx(end_call *c, const char *lock_sql, int nl, const char *end_sql, int ne, const char *tail_sql,
       int nt, const char *const *p)
{
    gp_db_tx *tx = gp_db_tx_new(gp_app_db(c->s->app));
    gp_err    rc;

    gp_db_tx_add(tx, lock_sql, nl, p);
    gp_db_tx_add(tx, end_sql, ne, p);
    if (tail_sql != NULL)
        gp_db_tx_add(tx, tail_sql, nt, p);
    rc = gp_db_tx_run(tx, 0, ended, c);
    if (rc != GP_EOK)
        free(c);
    return rc;
}

static void
now_text(char out[24])
{
    snprintf(out, 24, "%llu", (unsigned long long)gp_wall_ms());
}

static void
platform_max(const sched *s, char out[16])
{
    snprintf(out, 16, "%u", s->cfg->max_platform_retries);
}

/* Two PostgreSQL arrays: jobs and attempt numbers. */
static gp_err
pairs(char (*job)[GP_MAX_ID + 1], const uint32_t *attempt, unsigned n, gp_buf *jobs, gp_buf *atts)
{
    char   num[16];
    gp_err rc;

    gp_buf_init(jobs, (size_t)n * (2 * GP_MAX_ID + 4) + 8);
    gp_buf_init(atts, (size_t)n * 12 + 8);
    rc = gp_pgarr_begin(jobs);
    rc = rc ? rc : gp_pgarr_begin(atts);
    for (unsigned i = 0; i < n && rc == GP_EOK; i++) {
        snprintf(num, sizeof(num), "%u", attempt[i]);
        rc = gp_pgarr_add(jobs, job[i]);
        rc = rc ? rc : gp_pgarr_add(atts, num);
    }
    rc = rc ? rc : gp_pgarr_end(jobs);
    return rc ? rc : gp_pgarr_end(atts);
}

#define PAIRS "SELECT * FROM unnest($1::text[], $2::int[]) AS p(job_id, attempt)"
static const char lock_pairs_sql[] =
    "SELECT id FROM jobs WHERE id IN (SELECT job_id FROM (" PAIRS ") x) ORDER BY id FOR UPDATE";

/* ---- what agents reported ----------------------------------------------------------
 *
 * The events one wake-up of the loop brought go as ONE statement: the
 * function is called for each, in arrival order (a LATERAL call over the
 * arrays WITH ORDINALITY runs row by row, each call seeing the ones
 * before).  One statement per event was one of the round trips every job
 * cost PostgreSQL (place_bench). */

#define EV_NPARAMS 17

static const char reported_sql[] =
    "SELECT r.* FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[],\n"
    "    $6::text[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::bigint[],\n"
    "    $12::text[], $13::text[], $14::text[], $15::text[], $16::text[])\n"
    "  WITH ORDINALITY AS e(job, att, site, node, ev, code, at, gpu, mj, prog, now, why, dg,\n"
    "    step, cid, eps, ord)\n"
    "CROSS JOIN LATERAL sched_attempt_event(e.job, e.att, e.site, e.node, e.ev,\n"
    "  NULLIF(e.code, '')::int, e.at, NULLIF(e.gpu, '')::bigint, NULLIF(e.mj, '')::bigint,\n"
    "  NULLIF(e.prog, '')::bigint, e.now, $17::int, NULLIF(e.why, ''), NULLIF(e.dg, ''),\n"
    "  NULLIF(e.step, '')::bigint, e.cid, NULLIF(e.eps, '')) r\n"
    "ORDER BY e.ord";

static void
u64_text(char *out, size_t n, const msg_attempt_event *ev, int field, uint64_t v)
{
    if (GP_HAS(ev, field))
        snprintf(out, n, "%llu", (unsigned long long)v);
    else
        out[0] = '\0';
}

/* One event's 16 values, as text, into the arrays. */
static gp_err
event_add(gp_buf *arr, const msg_attempt_event *ev, const char *now)
{
    char        att[16], code[16], at[24], gpu[24], mj[24], prog[24], step[24];
    char        eps[SCHED_ENDPOINTS_MAX];
    gp_err      rc = GP_EOK;

    snprintf(att, sizeof(att), "%u", ev->attempt);
    if (GP_HAS(ev, MSG_ATTEMPT_EVENT__EXIT_CODE))
        snprintf(code, sizeof(code), "%d", ev->exit_code);
    else
        code[0] = '\0';
    snprintf(at, sizeof(at), "%llu", (unsigned long long)ev->at_ms);
    u64_text(gpu, sizeof(gpu), ev, MSG_ATTEMPT_EVENT__GPU_MS, ev->gpu_ms);
    u64_text(mj, sizeof(mj), ev, MSG_ATTEMPT_EVENT__ENERGY_MJ, ev->energy_mj);
    u64_text(prog, sizeof(prog), ev, MSG_ATTEMPT_EVENT__PROGRESS_MS, ev->progress_ms);
    u64_text(step, sizeof(step), ev, MSG_ATTEMPT_EVENT__CHECKPOINT_STEP, ev->checkpoint_step);
    /* a digest the contract's pattern would refuse is not stored (the
     * column's CHECK would fail the whole batch) */
    const char *dg = gp_image_digest_ok(ev->image_digest) ? ev->image_digest : "";
    const char *v[EV_NPARAMS - 1] = {ev->job_id, att, ev->site, ev->node,
                                     msg_attempt_event_event_names[ev->event], code, at, gpu, mj,
                                     prog, now, ev->reason, dg, step, ev->checkpoint_id, eps};

    sched_endpoints_text(&ev->endpoints, eps, sizeof(eps));

    for (int k = 0; k < EV_NPARAMS - 1 && rc == GP_EOK; k++)
        rc = gp_pgarr_add(&arr[k], v[k]);
    return rc;
}

gp_err
sched_end_reported(sched *s, const msg_attempt_event *const *ev, unsigned n, sched_end_cb *cb,
                   void *arg)
{
    gp_buf      arr[EV_NPARAMS - 1];
    const char *p[EV_NPARAMS];
    char        now[24], pmax[16];
    end_call   *c;
    gp_err      rc = GP_EOK;

    now_text(now);
    platform_max(s, pmax);
    for (int k = 0; k < EV_NPARAMS - 1; k++) {
        gp_buf_init(&arr[k], n * 600 + 64);   /* a reason: 255 bytes, escaped */
        rc = rc ? rc : gp_pgarr_begin(&arr[k]);
    }
    for (unsigned i = 0; i < n && rc == GP_EOK; i++)
        rc = event_add(arr, ev[i], now);
    for (int k = 0; k < EV_NPARAMS - 1; k++) {
        rc = rc ? rc : gp_pgarr_end(&arr[k]);
        p[k] = arr[k].p;
    }
    p[EV_NPARAMS - 1] = pmax;
    if (rc == GP_EOK && (c = call_new(s, 0, arg)) == NULL)
        rc = GP_ENOMEM;
    if (rc == GP_EOK) {
        c->cb = cb;
        rc = run_query(c, reported_sql, EV_NPARAMS, p);
    }
    for (int k = 0; k < EV_NPARAMS - 1; k++)
        gp_buf_fini(&arr[k]);
    return rc;
}

/* ---- a lost node ---------------------------------------------------------------- */

/* 'lease_expired' on that node: what its agent would report had it lived */
static const char lost_sql[] =
    "SELECT r.* FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS e(job, att, ord)\n"
    "CROSS JOIN LATERAL sched_attempt_event(e.job, e.att, $3, $4, 'lease_expired', NULL,\n"
    "  $5::bigint, NULL, NULL, NULL, $5::bigint, $6::int) r\n"
    "ORDER BY e.ord";

gp_err
sched_end_lost(sched *s, const char *site, const char *node, char (*job)[GP_MAX_ID + 1],
               const uint32_t *attempt, unsigned n, sched_end_cb *cb, void *arg)
{
    gp_buf    jobs, atts;
    char      now[24], pmax[16];
    end_call *c = NULL;
    gp_err    rc = pairs(job, attempt, n, &jobs, &atts);

    now_text(now);
    platform_max(s, pmax);
    const char *p[] = {jobs.p, atts.p, site, node, now, pmax};

    if (rc == GP_EOK && (c = call_new(s, 0, arg)) == NULL)
        rc = GP_ENOMEM;
    if (rc == GP_EOK) {
        c->cb = cb;
        rc = run_query(c, lost_sql, 6, p);
    }
    gp_buf_fini(&jobs);
    gp_buf_fini(&atts);
    return rc;
}

/* ---- a failed start ------------------------------------------------------------- */

gp_err
sched_end_failed_start(sched *s, const char *job, uint32_t attempt, const char *node, bool own,
                       const char *why, sched_end_cb *cb, void *arg)
{
    char        att[16], now[24], pmax[16];
    const char *p[] = {job, att, node, own ? "job" : "platform", why, now, pmax};
    end_call   *c = call_new(s, 0, arg);

    if (c == NULL)
        return GP_ENOMEM;
    c->cb = cb;
    snprintf(att, sizeof(att), "%u", attempt);
    now_text(now);
    platform_max(s, pmax);
    return run_query(c,
                     "SELECT * FROM sched_attempt_end($1, $2::int, $3, true, 'failed_to_start', $4,"
                     " $5, NULL, $6::bigint, $6::bigint, false, $7::int)",
                     7, p);
}

/* ---- stale attempts ------------------------------------------------------------- */

gp_err
sched_end_stale(sched *s, char (*job)[GP_MAX_ID + 1], const uint32_t *attempt, unsigned n,
                const char *why, sched_end_cb *cb, void *arg)
{
    gp_buf    jobs, atts;
    char      now[24], pmax[16];
    end_call *c = NULL;
    gp_err    rc = pairs(job, attempt, n, &jobs, &atts);

    now_text(now);
    platform_max(s, pmax);
    const char *p[] = {jobs.p, atts.p, now, why, pmax};

    if (rc == GP_EOK && (c = call_new(s, 1, arg)) == NULL)
        rc = GP_ENOMEM;
    if (rc == GP_EOK) {
        c->cb = cb;
        rc = run_tx(c, lock_pairs_sql, 2,
                    "SELECT r.* FROM (" PAIRS ") e CROSS JOIN LATERAL sched_attempt_end(e.job_id,"
                    " e.attempt, NULL, true, 'failed_to_start', 'platform', $4, NULL, $3::bigint,"
                    " $3::bigint, false, $5::int) r",
                    5, NULL, 0, p);
    }
    gp_buf_fini(&jobs);
    gp_buf_fini(&atts);
    return rc;
}

/* ---- a cancel ------------------------------------------------------------------- */

gp_err
sched_end_cancel(sched *s, const char *job, const char *tenant, sched_cancel_cb *cb, void *arg)
{
    char        now[24], sql[1024];
    const char *p[] = {job, tenant, now};
    end_call   *c = call_new(s, 1, arg);

    if (c == NULL)
        return GP_ENOMEM;
    c->cancel_cb = cb;
    now_text(now);
    snprintf(sql, sizeof(sql), "SELECT %s FROM jobs j WHERE j.id = $1 AND j.tenant = $2",
             sched_job_cols);
    return run_tx(c, "SELECT 1 FROM jobs WHERE id = $1 AND tenant = $2 FOR UPDATE", 2,
                  "SELECT * FROM sched_job_cancel($1, $2, $3::bigint)", 3, sql, 2, p);
}

/* ---- a preempted node ----------------------------------------------------------- */

static void
preempted_done(void *arg, gp_err err, const char *detail)
{
    char *what = arg;

    if (err != GP_EOK)      /* that node's end event or lease ends it later */
        GP_WARN("preempted_end_write_failed", "%s code=%s detail=\"%s\"", what,
                gp_err_name(err), detail);
    free(what);
}

void
sched_end_preempted(sched *s, const char *job, uint32_t attempt, const char *node)
{
    char        att[16], now[24];
    const char *p[] = {job, att, node, now};
    char       *what = malloc(3 * GP_MAX_ID + 40);
    end_call   *c = what != NULL ? call_new(s, 0, what) : NULL;

    if (c == NULL) {
        free(what);
        return;
    }
    snprintf(what, 3 * GP_MAX_ID + 40, "job=%s attempt=%u node=%s", job, attempt, node);
    c->cb = preempted_done;
    snprintf(att, sizeof(att), "%u", attempt);
    now_text(now);
    if (run_query(c,
                  "SELECT * FROM sched_attempt_end($1, $2::int, $3, false, 'preempted', NULL, NULL,"
                  " NULL, $4::bigint, $4::bigint, false, 0)",
                  4, p) != GP_EOK)
        preempted_done(what, GP_EUNAVAIL, "not sent");
}

/* ---- the max run time ----------------------------------------------------------- */

gp_err
sched_end_overrun(sched *s, unsigned limit, sched_overrun_cb *cb, void *arg)
{
    char        now[24], lim[16];
    const char *p[] = {now, lim};
    end_call   *c = call_new(s, 0, arg);

    if (c == NULL)
        return GP_ENOMEM;
    c->overrun_cb = cb;
    now_text(now);
    snprintf(lim, sizeof(lim), "%u", limit);
    return run_query(c, "SELECT * FROM sched_maxrun($1::bigint, $2::int)", 2, p);
}

void
sched_end_start(sched *s)
{
    gp_metrics_counters(gp_app_metrics(s->app), "gp_scheduler_attempt_ends_total", "state",
                        end_states, END_STATES,
                        "Nodes' attempt rows ended, by the state they ended in", s->m_ends);
}
