/* reconcile.c -- Redis reservations against PostgreSQL's live attempts.
 *
 * PostgreSQL's attempts in reserved/starting/running are the truth; Redis
 * holds the reservations that enforce it (reserve.h).  Every
 * reconcile-ms one instance reads the live attempts and hands them to
 * sched_reserve_reconcile: a reservation no live attempt backs and older
 * than reconcile-grace-ms (a crashed instance's booking, a release that
 * failed) is removed; a GPU a live attempt has and Redis lacks (after a
 * FLUSHALL or a restart without persistence: epoch.c books them again
 * before the shard grants anything, this is the second look) is booked
 * again.  The grace
 * must exceed the time from a booking to its attempt row's commit plus one
 * pass (reserve.h).
 *
 * Before that, an attempt still 'reserved' (placed, never acknowledged by
 * its node) longer than dispatch-timeout-ms + reconcile-grace-ms after its
 * placement was never dispatched: the instance that placed it stopped
 * between its commit and its RunAttempt (kill -9: sched_fleet_test), or
 * it was sent and no answer came.  A live instance ends such an attempt
 * itself (acked -> 'starting', refused -> 'failed_to_start', no answer ->
 * retired, dispatch.c), so after a kill -9 nobody else would ever end it:
 * its job stayed 'starting' for good and its GPUs booked.  Whether it was
 * sent is unknown, so it is retired on each of its nodes (fence.c: its
 * renewals kill it, its GPUs stay booked) and once every node's fence is
 * open -- a later pass, the mark is kept in Redis -- it ends (end.h) as
 * failed_to_start, a platform fault (its rows that ran killed), its GPUs
 * are released, and its job goes back to pending (attempt_failed,
 * requeued), not charged.
 *
 * The truth is read before Redis is changed, so an attempt that ends in
 * between (its row ended, its release done) is booked again by the
 * rebuild.  After a pass that rebuilt anything, the attempts it read as
 * live and that have ended since are released again (the fenced release
 * of that job and attempt): an end that committed before this re-check
 * is seen by it, and one after it does its own release after the
 * rebuild.  Without the re-check such a booking stayed until a later pass
 * removed it past the grace, and instances that met it (BUSY) kept the
 * GPUs taken meanwhile.
 *
 * Redis's clock is read just before the truth, and an unbacked
 * reservation is an orphan only if it was booked at least
 * reconcile-grace-ms before that moment: a booking made after the read
 * cannot be in the truth.  Judged by its age when the orphan script ran,
 * it was removed whenever the pass (256 shards walked one by one) outlasted
 * the grace on a loaded host, and the node's next lease renewal killed the
 * attempt just placed there (an instance restarted on its node, killed a
 * second after its placement).
 *
 * One instance a pass: reconcile is idempotent (every change re-checked by
 * a script) so two passes at once are only wasted work; a Redis lock
 * (SET NX with a TTL of one period, like the registry's reseed lock) keeps
 * it to one, and a holder that dies frees it by the TTL. */
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/dbarray.h"
#include "booking.h"
#include "end.h"
#include "gp/log.h"
#include "scheduler.h"

#define RECONCILE_LOCK_KEY "gp:sched:reconcile:lock"

enum { RUN_DONE, RUN_SKIPPED, RUN_FAILED };
static const char *const run_results[] = {"done", "skipped", "failed"};

static void
set_gauge(double *g, double v)
{
    if (g != NULL)
        *g = v;
}

static void
rechecked(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched *s = arg;
    int    n = err == GP_EOK && nres == 1 ? PQntuples(res[0]) : 0;

    s->reconcile_busy = false;
    if (err != GP_EOK) {     /* the orphans go by the grace, as before */
        GP_WARN("reconcile_recheck_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    for (int i = 0; i < n; i++) {
        char node[1][GP_MAX_ID + 1];

        snprintf(node[0], sizeof(node[0]), "%s", PQgetvalue(res[0], i, 3));
        sched_release(s, PQgetvalue(res[0], i, 2), PQgetvalue(res[0], i, 0),
                      (uint32_t)strtoul(PQgetvalue(res[0], i, 1), NULL, 10), node, 1);
    }
    if (n > 0)
        GP_INFO("reconcile_recheck", "released=%d", n);
}

/* The attempts read as live that have ended since (see the top). */
static void
recheck(sched *s)
{
    const char *p[] = {s->recon_jobs.p, s->recon_attempts.p};

    if (s->recon_jobs.p == NULL ||
        gp_db_query(gp_app_db(s->app),
                    "SELECT a.job_id, a.attempt, a.site, a.node FROM attempts a\n"
                    "JOIN unnest($1::text[], $2::int[]) AS l(job, att)\n"
                    "  ON a.job_id = l.job AND a.attempt = l.att\n"
                    "WHERE a.state NOT IN ('reserved','starting','running')",
                    2, p, 0, rechecked, s) != GP_EOK)
        s->reconcile_busy = false;
}

static void
reconciled(void *arg, const sched_res_reconciled *r)
{
    sched *s = arg;

    if (r->rebuilt > 0)
        recheck(s);
    else
        s->reconcile_busy = false;
    sched_count(s->m_reconcile_runs[r->err == GP_EOK ? RUN_DONE : RUN_FAILED]);
    set_gauge(s->m_reconcile_last[0], r->removed);
    set_gauge(s->m_reconcile_last[1], r->rebuilt);
    set_gauge(s->m_reconcile_last[2], r->conflicts);
    if (r->err != GP_EOK || r->removed + r->rebuilt + r->conflicts > 0)
        GP_INFO("reconcile_done", "code=%s removed=%u kept_fresh=%u rebuilt=%u conflicts=%u "
                "failed=%u", gp_err_name(r->err), r->removed, r->kept_fresh, r->rebuilt,
                r->conflicts, r->failed);
    if (r->conflicts > 0)
        GP_WARN("reconcile_conflict", "node=%s gpu=%d holder=%s:%u truth=%s:%u",
                r->first_conflict.node, r->first_conflict.gpu, r->first_conflict.job,
                r->first_conflict.attempt, r->conflict_job, r->conflict_attempt);
}

/* "0,1,3" -> bits 0, 1, 3 */
static uint64_t
gpu_mask(const char *list)
{
    uint64_t m = 0;

    for (const char *p = list; *p != '\0';) {
        long g = strtol(p, (char **)&p, 10);

        if (g >= 0 && g <= SCHED_RES_MAX_GPU)
            m |= 1ull << g;
        p += *p == ',';
        if (*p != '\0' && (*p < '0' || *p > '9'))
            break;
    }
    return m;
}

/* The (job, attempt) pairs of the live read, for recheck(); on a failure
 * to build them the re-check is skipped (recon_jobs.p NULL). */
static void
remember_live(sched *s, const PGresult *res, int n)
{
    gp_err rc;

    gp_buf_fini(&s->recon_jobs);
    gp_buf_fini(&s->recon_attempts);
    gp_buf_init(&s->recon_jobs, (size_t)n * (2 * GP_MAX_ID + 8) + 64);   /* quoted, escaped */
    gp_buf_init(&s->recon_attempts, (size_t)n * 16 + 64);
    rc = gp_pgarr_begin(&s->recon_jobs);
    if (rc == GP_EOK)
        rc = gp_pgarr_begin(&s->recon_attempts);
    for (int i = 0; i < n && rc == GP_EOK; i++) {
        rc = gp_pgarr_add(&s->recon_jobs, PQgetvalue(res, i, 0));
        if (rc == GP_EOK)
            rc = gp_pgarr_add(&s->recon_attempts, PQgetvalue(res, i, 1));
    }
    if (rc == GP_EOK)
        rc = gp_pgarr_end(&s->recon_jobs);
    if (rc == GP_EOK)
        rc = gp_pgarr_end(&s->recon_attempts);
    if (rc != GP_EOK) {
        gp_buf_fini(&s->recon_jobs);
        gp_buf_init(&s->recon_jobs, 0);
    }
}

static void
live_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched          *s = arg;
    int             n = err == GP_EOK && nres == 1 ? PQntuples(res[0]) : 0;
    sched_res_live *live = n > 0 ? calloc((size_t)n, sizeof(*live)) : NULL;
    gp_err          rc;

    if (err != GP_EOK || (n > 0 && live == NULL)) {
        s->reconcile_busy = false;
        sched_count(s->m_reconcile_runs[RUN_FAILED]);
        GP_WARN("reconcile_failed", "code=%s detail=\"%s\"",
                gp_err_name(err != GP_EOK ? err : GP_ENOMEM), detail);
        free(live);
        return;
    }
    remember_live(s, res[0], n);
    for (int i = 0; i < n; i++)     /* the strings are the result's: reconcile copies them */
        live[i] = (sched_res_live){.job = PQgetvalue(res[0], i, 0),
                                   .attempt = (uint32_t)strtoul(PQgetvalue(res[0], i, 1), NULL, 10),
                                   .site = PQgetvalue(res[0], i, 2),
                                   .node = PQgetvalue(res[0], i, 3),
                                   .gpus = gpu_mask(PQgetvalue(res[0], i, 4))};
    rc = sched_reserve_reconcile(s->res, live, (size_t)n, s->recon_truth_ms,
                                 s->cfg->reconcile_grace_ms, reconciled, s);
    free(live);
    if (rc != GP_EOK) {
        s->reconcile_busy = false;
        sched_count(s->m_reconcile_runs[RUN_FAILED]);
        GP_WARN("reconcile_failed", "code=%s detail=\"not started\"", gp_err_name(rc));
    }
}

#define NEVER_DISPATCHED "never dispatched: the scheduler instance that placed it stopped"

/* every live row of the stale attempts: each is retired on its node */
static const char stale_rows_sql[] =
    "SELECT a.job_id, a.attempt, a.site, a.node FROM attempts a\n"
    "JOIN (SELECT DISTINCT job_id, attempt FROM attempts WHERE state = 'reserved'\n"
    "      AND created_ms < $1::bigint - $2::bigint ORDER BY job_id, attempt LIMIT 64) st  -- the rest next pass\n"
    "  ON a.job_id = st.job_id AND a.attempt = st.attempt\n"
    "WHERE a.state IN ('reserved','starting','running')\n"
    "ORDER BY a.job_id, a.attempt";
static void read_live(sched *s);

static void
stale_ended(void *arg, gp_err err, const char *detail)
{
    sched *s = arg;

    if (err != GP_EOK)       /* the next pass tries again */
        GP_WARN("reconcile_stale_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    read_live(s);
}

/* One pass's stale rows and how their retire calls answered. */
typedef struct stale_row {
    struct stale_pass *sp;
    char               job[GP_MAX_ID + 1];
    uint32_t           attempt;
    bool               open;          /* its reservation on the node removed: fence open */
} stale_row;

typedef struct stale_pass {
    sched    *s;
    int       n, pending;
    stale_row row[];
} stale_pass;

/* The attempts whose every row's fence is open end in one transaction
 * (end.h: a platform fault, their GPUs released). */
static void
stale_end(stale_pass *sp)
{
    sched   *s = sp->s;
    char   (*job)[GP_MAX_ID + 1] = calloc((size_t)sp->n, sizeof(*job));
    uint32_t *att = calloc((size_t)sp->n, sizeof(*att));
    unsigned  ready = 0;

    for (int i = 0, j; job != NULL && att != NULL && i < sp->n; i = j) {
        bool open = true;

        for (j = i; j < sp->n && strcmp(sp->row[j].job, sp->row[i].job) == 0 &&
                    sp->row[j].attempt == sp->row[i].attempt; j++)
            open = open && sp->row[j].open;
        if (!open)
            continue;
        GP_WARN("attempt_never_dispatched", "job=%s attempt=%u action=ended", sp->row[i].job,
                sp->row[i].attempt);
        snprintf(job[ready], sizeof(job[0]), "%s", sp->row[i].job);
        att[ready++] = sp->row[i].attempt;
    }
    free(sp);
    if (ready == 0 || sched_end_stale(s, job, att, ready, NEVER_DISPATCHED, stale_ended, s) != GP_EOK)
        read_live(s);
    free(job);
    free(att);
}

static void
stale_retired(void *arg, gp_err err, uint32_t wait_ms)
{
    stale_row  *r = arg;
    stale_pass *sp = r->sp;

    r->open = err == GP_EOK && wait_ms == 0;
    if (--sp->pending == 0)
        stale_end(sp);
}

static void
stale_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched      *s = arg;
    int         n = err == GP_EOK && nres == 1 ? PQntuples(res[0]) : 0;
    stale_pass *sp;

    if (err != GP_EOK)
        GP_WARN("reconcile_stale_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    if (n == 0 || (sp = calloc(1, sizeof(*sp) + (size_t)n * sizeof(stale_row))) == NULL) {
        read_live(s);
        return;
    }
    sp->s = s;
    sp->n = n;
    sp->pending = n + 1;          /* +1: held while sending */
    for (int i = 0; i < n; i++) {
        stale_row *r = &sp->row[i];

        *r = (stale_row){.sp = sp, .attempt = (uint32_t)strtoul(PQgetvalue(res[0], i, 1), NULL, 10)};
        snprintf(r->job, sizeof(r->job), "%s", PQgetvalue(res[0], i, 0));
        if (sched_fence_retire(s, PQgetvalue(res[0], i, 2), PQgetvalue(res[0], i, 3), r->job,
                               r->attempt, stale_retired, r) != GP_EOK)
            sp->pending--;        /* not open: the next pass tries again */
    }
    if (--sp->pending == 0)
        stale_end(sp);
}

static void
locked(void *arg, const redisReply *rep, gp_err err)
{
    sched      *s = arg;
    char        now[24], age[24];
    const char *p[] = {now, age};

    if (err != GP_EOK || rep->type != REDIS_REPLY_STATUS) {   /* nil: another instance has it */
        s->reconcile_busy = false;
        sched_count(s->m_reconcile_runs[err == GP_EOK ? RUN_SKIPPED : RUN_FAILED]);
        return;
    }
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    snprintf(age, sizeof(age), "%llu",
             (unsigned long long)s->cfg->dispatch_timeout_ms + s->cfg->reconcile_grace_ms);
    if (gp_db_query(gp_app_db(s->app), stale_rows_sql, 2, p, 0, stale_read, s) != GP_EOK)
        read_live(s);
}

/* The live attempts, read once Redis's clock is (see the top). */
static void
clock_read(void *arg, gp_err err, uint64_t ms)
{
    sched *s = arg;

    s->recon_truth_ms = ms;
    if (err != GP_EOK ||
        gp_db_query(gp_app_db(s->app),
                    "SELECT a.job_id, a.attempt, a.site, a.node, array_to_string(a.gpus, ',')\n"
                    "FROM attempts a WHERE a.state IN ('reserved','starting','running')\n"
                    "  AND cardinality(a.gpus) > 0",
                    0, NULL, 0, live_read, s) != GP_EOK) {
        s->reconcile_busy = false;
        sched_count(s->m_reconcile_runs[RUN_FAILED]);
        if (err != GP_EOK)
            GP_WARN("reconcile_failed", "code=%s detail=\"Redis's clock\"", gp_err_name(err));
    }
}

static void
read_live(sched *s)
{
    if (sched_reserve_clock(s->res, clock_read, s) != GP_EOK) {
        s->reconcile_busy = false;
        sched_count(s->m_reconcile_runs[RUN_FAILED]);
    }
}

void
sched_reconcile_run(gp_app *app, void *arg)
{
    sched *s = arg;
    char   ttl[16];

    sched_evacuate_sweep(s);
    if (s->reconcile_busy)
        return;
    /* held a little less than a period, so the next pass may take it */
    snprintf(ttl, sizeof(ttl), "%u", s->cfg->reconcile_ms * 9 / 10);
    if (gp_kv_cmdf(gp_app_kv(app), locked, s, "SET " RECONCILE_LOCK_KEY " %s NX PX %s",
                   gp_app_instance(app), ttl) == GP_EOK)
        s->reconcile_busy = true;
}

void
sched_reconcile_start(sched *s)
{
    gp_metrics *m = gp_app_metrics(s->app);
    static const char *const last[] = {"removed", "rebuilt", "conflicts"};

    gp_metrics_counters(m, "gp_scheduler_reconcile_runs_total", "result", run_results, 3,
                        "Reconcile passes by result", s->m_reconcile_runs);
    gp_metrics_gauges(m, "gp_scheduler_reconcile_last", "what", last, 3,
                      "Reservations changed by the last reconcile", s->m_reconcile_last);
}
