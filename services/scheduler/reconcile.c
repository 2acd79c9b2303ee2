/* reconcile.c -- Redis reservations against PostgreSQL's live attempts.
 *
 * PostgreSQL's attempts in reserved/starting/running are the truth; Redis
 * holds the reservations that enforce it (reserve.h).  Every
 * reconcile-ms one instance reads the live attempts and hands them to
 * sched_reserve_reconcile: a reservation no live attempt backs and older
 * than reconcile-grace-ms (a crashed instance's booking, a release that
 * failed) is removed; a GPU a live attempt has and Redis lacks (after a
 * FLUSHALL or a restart without persistence) is booked again.  The grace
 * must exceed the time from a booking to its attempt row's commit plus one
 * pass (reserve.h).
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
reconciled(void *arg, const sched_res_reconciled *r)
{
    sched *s = arg;

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
    for (int i = 0; i < n; i++)     /* the strings are the result's: reconcile copies them */
        live[i] = (sched_res_live){.job = PQgetvalue(res[0], i, 0),
                                   .attempt = (uint32_t)strtoul(PQgetvalue(res[0], i, 1), NULL, 10),
                                   .site = PQgetvalue(res[0], i, 2),
                                   .node = PQgetvalue(res[0], i, 3),
                                   .gpus = gpu_mask(PQgetvalue(res[0], i, 4))};
    rc = sched_reserve_reconcile(s->res, live, (size_t)n, s->cfg->reconcile_grace_ms, reconciled,
                                 s);
    free(live);
    if (rc != GP_EOK) {
        s->reconcile_busy = false;
        sched_count(s->m_reconcile_runs[RUN_FAILED]);
        GP_WARN("reconcile_failed", "code=%s detail=\"not started\"", gp_err_name(rc));
    }
}

static void
locked(void *arg, const redisReply *rep, gp_err err)
{
    sched *s = arg;

    if (err != GP_EOK || rep->type != REDIS_REPLY_STATUS) {   /* nil: another instance has it */
        s->reconcile_busy = false;
        sched_count(s->m_reconcile_runs[err == GP_EOK ? RUN_SKIPPED : RUN_FAILED]);
        return;
    }
    if (gp_db_query(gp_app_db(s->app),
                    "SELECT a.job_id, a.attempt, a.site, a.node, array_to_string(a.gpus, ',')\n"
                    "FROM attempts a WHERE a.state IN ('reserved','starting','running')\n"
                    "  AND cardinality(a.gpus) > 0",
                    0, NULL, 0, live_read, s) != GP_EOK) {
        s->reconcile_busy = false;
        sched_count(s->m_reconcile_runs[RUN_FAILED]);
    }
}

void
sched_reconcile_run(gp_app *app, void *arg)
{
    sched *s = arg;
    char   ttl[16];

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
