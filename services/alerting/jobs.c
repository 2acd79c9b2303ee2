/* jobs.c -- what the JOBS stream says about attempts, for the alerts.
 *
 * Every job event (durable consumer alerting-jobs; any instance takes
 * each) keeps alert_job_runs: where each attempt ran (placed, started),
 * when it ended and whether it failed by itself -- exited non-zero or
 * failed to start (true), succeeded (false); lost, killed, preempted,
 * cancelled or timed out are not the place's doing (NULL: not counted).
 * From it:
 *
 *   - the jobs and customers an alert concerns (migrate.c's
 *     alert_affected, taken as the alert fires);
 *   - job failure rates: every jobs-ms, per node, site and tenant, the
 *     share of the attempts that ended in the last jobs-window-ms and
 *     failed, where at least jobs-min-ended ended, evaluated against the
 *     rules on node.job_fail_pct, site.job_fail_pct, tenant.job_fail_pct.
 *     An active alert of those rules whose entity no longer reaches the
 *     minimum is cleared.  Counts go in the evidence, not the summary, so
 *     a firing alert is not told again every pass.
 *
 * Writes are idempotent (a redelivered event changes nothing), and two
 * instances evaluating the rates at once only repeat raises and clears,
 * which are idempotent too.  Ended runs older than a day are deleted. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/log.h"
#include "alerting.h"
#include "diag.h"

/* ---- the events ------------------------------------------------------------------ */

static const char run_sql[] =
    "INSERT INTO alert_job_runs (job_id, attempt, tenant, site, node, started_ms)\n"
    "VALUES ($1, $2::int, $3, $4, $5, $6::bigint) ON CONFLICT (job_id, attempt) DO NOTHING";
/* an end; an attempt never seen placed is taken when the end names where */
static const char end_sql[] =
    "WITH i AS (INSERT INTO alert_job_runs AS r (job_id, attempt, tenant, site, node,\n"
    "    started_ms, ended_ms, failed)\n"
    "  SELECT $1, $2::int, $3, $4, $5, $6::bigint, $6::bigint, nullif($7, '')::boolean\n"
    "  WHERE $4 <> '' AND $5 <> '' AND $2::int > 0\n"
    "  ON CONFLICT (job_id, attempt) DO UPDATE SET\n"
    "    ended_ms = coalesce(r.ended_ms, EXCLUDED.ended_ms),\n"
    "    failed = coalesce(r.failed, EXCLUDED.failed)\n"
    "  RETURNING 1)\n"
    "UPDATE alert_job_runs SET ended_ms = coalesce(ended_ms, $6::bigint),\n"
    "  failed = coalesce(failed, nullif($7, '')::boolean)\n"
    "WHERE ($4 = '' OR $5 = '' OR $2::int = 0) AND job_id = $1\n"
    "  AND ($2::int = 0 OR attempt = $2::int) AND ended_ms IS NULL";

static void
written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    (void)res, (void)nres;
    al_input_stored(arg, err, "job_run_write_failed", detail);
}

/* "true": the attempt failed by itself; "false": it succeeded; "": an end
 * that says nothing about where it ran; NULL: not an end. */
static const char *
outcome(const msg_job_event *e)
{
    switch (e->event) {
    case MSG_JOB_EVENT_EVENT_SUCCEEDED:
        return "false";
    case MSG_JOB_EVENT_EVENT_ATTEMPT_FAILED:
        return strstr(e->reason, "exited with status") != NULL ||
                       strstr(e->reason, "failed to start") != NULL
                   ? "true"
                   : "";
    case MSG_JOB_EVENT_EVENT_PREEMPTED:
    case MSG_JOB_EVENT_EVENT_REQUEUED:
    case MSG_JOB_EVENT_EVENT_FAILED:
    case MSG_JOB_EVENT_EVENT_CANCELLED:
    case MSG_JOB_EVENT_EVENT_TIMED_OUT:
        return "";
    default:
        return NULL;
    }
}

static gp_err
on_job(gp_req *req, const void *in, void *out)
{
    alerting            *a = gp_req_state(req);
    const msg_job_event *e = in;
    char                 att[16], at[24];
    const char          *how = outcome(e);
    const char          *p[] = {e->job_id, att, e->tenant, e->site, e->node, at, how};
    bool                 run = e->event == MSG_JOB_EVENT_EVENT_PLACED ||
                               e->event == MSG_JOB_EVENT_EVENT_STARTED;

    (void)out;
    (*a->m_job_events)++;
    if (!run && how == NULL)
        return GP_EOK;
    if (run && (e->attempt == 0 || e->site[0] == '\0' || e->node[0] == '\0'))
        return GP_EOK;                 /* nothing says where */
    snprintf(att, sizeof(att), "%u", e->attempt);
    snprintf(at, sizeof(at), "%llu", (unsigned long long)e->at_ms);
    if (gp_db_query(gp_app_db(a->app), run ? run_sql : end_sql, run ? 6 : 7, p, 0, written,
                    req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

/* ---- the rates --------------------------------------------------------------------- */

/* scope, site, node, tenant, failed, ended; then the active alerts of the
 * rate rules (scope, site, node, labels) for the clears */
static const char rates_sql[] =
    "WITH w AS (SELECT site, node, tenant, failed FROM alert_job_runs\n"
    "  WHERE ended_ms >= alert_now_ms() - $1::bigint AND failed IS NOT NULL)\n"
    "SELECT 'node', site, node, '', count(*) FILTER (WHERE failed), count(*) FROM w\n"
    "  GROUP BY site, node HAVING count(*) >= $2::int\n"
    "UNION ALL SELECT 'site', site, '', '', count(*) FILTER (WHERE failed), count(*) FROM w\n"
    "  GROUP BY site HAVING count(*) >= $2::int\n"
    "UNION ALL SELECT 'tenant', '_', '', tenant, count(*) FILTER (WHERE failed), count(*) FROM w\n"
    "  GROUP BY tenant HAVING count(*) >= $2::int";
static const char active_sql[] =
    "SELECT scope, site, node, labels, alertname FROM alerts WHERE state <> 'resolved'\n"
    "  AND alertname = ANY(string_to_array($1, ','))";
static const char purge_sql[] =
    "DELETE FROM alert_job_runs WHERE ended_ms < alert_now_ms() - 86400000";

static al_signal
signal_of(const char *scope)
{
    return strcmp(scope, "node") == 0   ? AL_SIG_NODE_JOBS
           : strcmp(scope, "site") == 0 ? AL_SIG_SITE_JOBS
                                        : AL_SIG_TENANT_JOBS;
}

/* "15 min", "20 s" */
static void
window(unsigned ms, char *out, size_t n)
{
    if (ms >= 120000)
        snprintf(out, n, "%u min", ms / 60000);
    else
        snprintf(out, n, "%u s", ms / 1000);
}

/* One entity's rate against every rule of its signal; holds false clears. */
static void
rate_one(alerting *a, al_pass *rp, const char *scope, const char *site, const char *node,
         const char *tenant, long failed, long ended, bool known)
{
    al_signal sig = signal_of(scope);
    double    pct = ended > 0 ? 100.0 * (double)failed / (double)ended : 0;
    char      ev[200], summary[256], labels[200], win[24];
    al_diag   d;
    al_vars   v = {.site = site, .region = alerting_region(a, site), .node = node,
                   .tenant = tenant, .cause = "jobs_failing", .reason = ev};

    window(a->cfg->jobs_window_ms, win, sizeof(win));
    if (known)
        snprintf(ev, sizeof(ev), "%ld of %ld attempts that ended in the last %s failed "
                 "(exited non-zero or failed to start)", failed, ended, win);
    else
        snprintf(ev, sizeof(ev), "fewer than %u attempts ended in the last %s",
                 a->cfg->jobs_min_ended, win);
    al_diag_jobs(sig, ev, &d);
    for (unsigned i = 0; i < a->rules.n; i++) {
        const al_rule *r = &a->rules.rule[i];
        al_raise       x = {.rule = r, .region = sig == AL_SIG_TENANT_JOBS ? "_" : v.region,
                            .site = site, .node = node, .summary = summary, .diag = &d};

        if (r->signal != sig)
            continue;
        if (sig == AL_SIG_TENANT_JOBS) {         /* the rule's labels, then tenant=<id> */
            char extra[96];

            snprintf(extra, sizeof(extra), "tenant=%s", tenant);
            al_rule_labels(r, extra, labels, sizeof(labels));
            x.labels = labels;
        }
        x.holds = known && al_rule_holds_num(r, pct);
        al_expand(r->summary, &v, summary, sizeof(summary));
        al_pass_apply(rp, &x);
    }
}

/* "tenant=acme" (after the rule's own labels) -> acme */
static const char *
tenant_of(const char *labels)
{
    const char *t = strstr(labels, "tenant=");

    return t != NULL ? t + 7 : "";
}

static void
rates_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    al_pass  *rp = arg;
    alerting *a = rp->a;

    if (err != GP_EOK || nres != 3) {
        (*a->m_db_errors)++;
        GP_WARN("job_rates_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    } else {
        const PGresult *r = res[0], *act = res[1];

        for (int i = 0; i < PQntuples(r); i++)
            rate_one(a, rp, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                     PQgetvalue(r, i, 3), atol(PQgetvalue(r, i, 4)), atol(PQgetvalue(r, i, 5)),
                     true);
        /* an active alert whose entity has no rate any more clears */
        for (int i = 0; i < PQntuples(act); i++) {
            const char *scope = PQgetvalue(act, i, 0), *site = PQgetvalue(act, i, 1);
            const char *node = PQgetvalue(act, i, 2), *tenant = tenant_of(PQgetvalue(act, i, 3));
            bool        seen = false;

            for (int j = 0; j < PQntuples(r) && !seen; j++)
                seen = strcmp(PQgetvalue(r, j, 0), scope) == 0 &&
                       strcmp(PQgetvalue(r, j, 1), site) == 0 &&
                       strcmp(PQgetvalue(r, j, 2), node) == 0 &&
                       strcmp(PQgetvalue(r, j, 3), strcmp(scope, "tenant") == 0 ? tenant : "") == 0;
            if (!seen)
                rate_one(a, rp, scope, site, node, tenant, 0, 0, false);
        }
    }
    al_pass_end(rp);
}

void
alerting_jobs_run(gp_app *app, void *arg)
{
    alerting   *a = arg;
    al_pass    *rp;
    char        window[16], min[16], names[AL_RULES_MAX * 65];
    const char *p[] = {window, min};
    const char *q[] = {names};
    gp_db_tx   *tx;

    static const al_signal sigs[] = {AL_SIG_NODE_JOBS, AL_SIG_SITE_JOBS, AL_SIG_TENANT_JOBS};

    if ((rp = al_pass_start(a, &a->jobs_busy)) == NULL)
        return;
    al_rule_names(&a->rules, sigs, 3, names, sizeof(names));
    snprintf(window, sizeof(window), "%u", a->cfg->jobs_window_ms);
    snprintf(min, sizeof(min), "%u", a->cfg->jobs_min_ended);
    tx = gp_db_tx_new(gp_app_db(app));
    gp_db_tx_add(tx, rates_sql, 2, p);
    gp_db_tx_add(tx, active_sql, 1, q);
    gp_db_tx_add(tx, purge_sql, 0, NULL);
    if (gp_db_tx_run(tx, 0, rates_read, rp) != GP_EOK)
        al_pass_end(rp);
}

static const gp_durable jobs_durable = {.stream = "JOBS", .name = "alerting-jobs",
                                        .max_deliver = 20, .ack_wait_ms = 30000,
                                        .backoff_ms = 500, .max_inflight = 64};

const gp_route alerting_job_routes[] = {
    {GP_OP_JOB_EVENT, on_job, 0, 10000, NULL, &jobs_durable},
    {NULL},
};
