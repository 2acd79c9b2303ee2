/* replace.c -- lost nodes waiting for their attempts to be replaced.
 *
 * A lost node becomes a row of recovery_nodes (every instance writes it;
 * the transition's time makes the write idempotent); its return marks the
 * row, and a row still pending is then 'returned': its attempts kept
 * running, nothing is replaced.  The task 'replace' claims due rows
 * (SKIP LOCKED, a claim that expires, so instances share the work and a
 * killed one's claims come back), spends a token of the node's site and
 * region buckets (and of the fleet-wide thaw bucket after a freeze), and
 * asks the scheduler to replace the node's attempts.  The scheduler
 * answers wait_ms while the node's last lease may still run (the fence):
 * the row is due again then.  Nothing is replaced while frozen. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/call.h"
#include "gp/clock.h"
#include "gp/kv.h"
#include "gp/log.h"
#include "recovery.h"

#define RETRY_MIN_MS   500
#define RETRY_MAX_MS   30000
#define DEFER_MS       1000       /* a row over its rate waits this long */

static void
row_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    (void)res;
    (void)nres;
    if (err != GP_EOK)
        GP_WARN("recovery_write_failed", "what=%s code=%s detail=\"%s\"", (const char *)arg,
                gp_err_name(err), detail);
}

/* Same transition from several instances: written once (lost_ms is its
 * time); a newer loss of the node starts its row afresh. */
void
recovery_node_lost(recovery *r, const char *site, const char *node, uint64_t at_ms,
                   const char *reason)
{
    char        at[24], now[24];
    const char *p[5] = {node, site, at, reason, now};

    snprintf(at, sizeof(at), "%llu", (unsigned long long)at_ms);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    if (gp_db_query(gp_app_db(r->app),
                    "INSERT INTO recovery_nodes (node, site, lost_ms, state, reason, updated_ms)"
                    " VALUES ($1, $2, $3::bigint, 'pending', $4, $5::bigint)"
                    " ON CONFLICT (node) DO UPDATE SET site = EXCLUDED.site,"
                    "  lost_ms = EXCLUDED.lost_ms, back_ms = NULL, state = 'pending', next_ms = 0,"
                    "  tries = 0, replaced = 0, reason = EXCLUDED.reason,"
                    "  updated_ms = EXCLUDED.updated_ms, claimed_by = NULL, claim_until = NULL"
                    " WHERE recovery_nodes.lost_ms < EXCLUDED.lost_ms",
                    5, p, 0, row_written, (void *)"lost") != GP_EOK)
        GP_WARN("recovery_write_failed", "what=lost node=%s code=UNAVAIL", node);
}

void
recovery_node_back(recovery *r, const char *node, uint64_t at_ms)
{
    char        at[24];
    const char *p[2] = {node, at};

    snprintf(at, sizeof(at), "%llu", (unsigned long long)at_ms);
    if (gp_db_query(gp_app_db(r->app),
                    "UPDATE recovery_nodes SET back_ms = $2::bigint, updated_ms = $2::bigint,"
                    " state = CASE WHEN state = 'pending' THEN 'returned' ELSE state END"
                    " WHERE node = $1 AND back_ms IS NULL AND lost_ms <= $2::bigint",
                    2, p, 0, row_written, (void *)"back") != GP_EOK)
        GP_WARN("recovery_write_failed", "what=back node=%s code=UNAVAIL", node);
}

static void
lost_loaded(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    recovery *r = arg;

    (void)nres;
    if (err != GP_EOK) {
        GP_WARN("recovery_load_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    for (int i = 0; i < PQntuples(res[0]); i++)
        recovery_mark_lost(r, PQgetvalue(res[0], i, 1), PQgetvalue(res[0], i, 0));
    GP_INFO("recovery_loaded", "lost_nodes=%d", PQntuples(res[0]));
}

void
recovery_load_lost(recovery *r)
{
    gp_db_query(gp_app_db(r->app), "SELECT node, site FROM recovery_nodes WHERE back_ms IS NULL",
                0, NULL, 0, lost_loaded, r);
}

/* ---- the replace task ---------------------------------------------------------------- */

typedef struct rcall {
    recovery *r;
    char      node[GP_MAX_ID + 1], site[GP_MAX_ID + 1];
    unsigned  tries;
    uint64_t  allowed_ms;      /* wall clock when the rate limits let it go */
} rcall;

/* The row's outcome: sql_set uses $2 (v); the claim is dropped. */
static void
set_row(recovery *r, const char *node, const char *sql_set, uint64_t v)
{
    char        val[24], now[24], sql[400];
    const char *p[3] = {node, val, now};

    snprintf(val, sizeof(val), "%llu", (unsigned long long)v);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    snprintf(sql, sizeof(sql),
             "UPDATE recovery_nodes SET %s, claimed_by = NULL, claim_until = NULL,"
             " updated_ms = $3::bigint WHERE node = $1 AND state = 'pending'", sql_set);
    gp_db_query(gp_app_db(r->app), sql, 3, p, 0, row_written, (void *)"replace");
}

static unsigned
retry_ms(unsigned tries)
{
    unsigned ms = RETRY_MIN_MS;

    while (tries-- > 0 && ms < RETRY_MAX_MS)
        ms *= 2;
    return ms > RETRY_MAX_MS ? RETRY_MAX_MS : ms;
}

static void
replaced(void *arg, gp_err err, const void *reply, const char *detail)
{
    rcall              *c = arg;
    recovery           *r = c->r;
    const msg_replaced *out = reply;
    uint64_t            now = gp_wall_ms();

    r->inflight--;
    if (err != GP_EOK) {
        (*r->m_replace_errors)++;
        GP_WARN("replace_failed", "site=%s node=%s code=%s tries=%u detail=\"%s\"", c->site,
                c->node, gp_err_name(err), c->tries + 1, detail);
        set_row(r, c->node, "next_ms = $2::bigint, tries = tries + 1", now + retry_ms(c->tries));
    } else if (out->wait_ms > 0) {
        (*r->m_waits)++;
        set_row(r, c->node, "next_ms = $2::bigint", now + out->wait_ms + 50);
    } else {
        (*r->m_replaced)++;
        /* allowed_ms: when the tokens were taken, which is what the rates
         * bound; the reply comes later by the scheduler's latency */
        GP_WARN("node_replaced", "site=%s node=%s attempts=%u allowed_ms=%llu", c->site, c->node,
                out->attempts, (unsigned long long)c->allowed_ms);
        set_row(r, c->node, "state = 'replaced', replaced = $2::int", out->attempts);
    }
    free(c);
}

/* A token from each bucket the node's replacement spends; none taken when
 * one is empty. */
static bool
allowed(recovery *r, const char *site)
{
    uint64_t now = gp_mono_ms();
    rsite   *s = recovery_site(r, site);
    rbucket *rb = recovery_region_bucket(r, s);
    bool     thawing = now < r->thaw_until;
    rbucket  save_s = s != NULL ? s->bucket : (rbucket){0};

    if (s != NULL && rbucket_take(&s->bucket, r->cfg->site_rate, now) < 0)
        return false;
    if (rb != NULL && rbucket_take(rb, r->cfg->region_rate, now) < 0) {
        s->bucket = save_s;                    /* give the site's token back */
        return false;
    }
    if (thawing && rbucket_take(&r->thaw_bucket, r->cfg->thaw_rate, now) < 0) {
        if (s != NULL)
            s->bucket = save_s;
        return false;
    }
    return true;
}

static void
claimed(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    recovery *r = arg;
    uint64_t  now = gp_wall_ms();

    (void)nres;
    r->replace_busy = false;
    if (err != GP_EOK) {
        GP_WARN("replace_claim_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    for (int i = 0; i < PQntuples(res[0]); i++) {
        const char         *node = PQgetvalue(res[0], i, 0), *site = PQgetvalue(res[0], i, 1);
        msg_replace_request q = {0};
        char                subj[GP_MAX_SUBJECT];
        rcall              *c;
        gp_err              rc;

        if (r->frozen || !allowed(r, site)) {
            (*r->m_deferred)++;
            set_row(r, node, "next_ms = $2::bigint", now + DEFER_MS);
            continue;
        }
        if ((c = calloc(1, sizeof(*c))) == NULL)
            continue;                            /* the claim expires: tried again */
        c->r = r;
        c->allowed_ms = gp_wall_ms();
        snprintf(c->node, sizeof(c->node), "%s", node);
        snprintf(c->site, sizeof(c->site), "%s", site);
        c->tries = (unsigned)strtoul(PQgetvalue(res[0], i, 2), NULL, 10);
        snprintf(q.site, sizeof(q.site), "%s", site);
        snprintf(q.node, sizeof(q.node), "%s", node);
        snprintf(q.reason, sizeof(q.reason), "%s", PQgetvalue(res[0], i, 3));
        GP_SET_HAS(&q, MSG_REPLACE_REQUEST__REASON);
        r->inflight++;
        if ((rc = gp_op_subject(GP_OP_INT_SCHED_REPLACE, subj, sizeof(subj), NULL)) == GP_EOK)
            rc = gp_call(gp_app_bus(r->app), subj, &msg_replace_request_desc, &q,
                         &msg_replaced_desc, gp_app_cfg(r->app)->request_timeout_ms, replaced, c);
        if (rc != GP_EOK)
            replaced(c, rc, NULL, "not sent");
    }
}

static void
pending_counted(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    recovery *r = arg;

    (void)nres;
    (void)detail;
    if (err == GP_EOK && PQntuples(res[0]) == 1)
        *r->m_pending = strtod(PQgetvalue(res[0], 0, 0), NULL);
}

void
recovery_replace_run(gp_app *app, void *arg)
{
    recovery   *r = arg;
    char        now[24], lim[16];
    const char *p[3] = {gp_app_instance(app), now, lim};

    /* the gauge once a second, not every pass (replace-ms is 250) */
    if (gp_mono_ms() >= r->pending_next_ms) {
        r->pending_next_ms = gp_mono_ms() + 1000;
        gp_db_query(gp_app_db(app), "SELECT count(*) FROM recovery_nodes WHERE state = 'pending'",
                    0, NULL, 0, pending_counted, r);
    }
    /* while frozen the registry marks nobody lost: the key lives 3 s past
     * the last refresh, so a dead recovery service freezes nothing */
    if (r->frozen)
        gp_kv_cmdf(gp_app_kv(app), NULL, NULL, "SET gp:recovery:frozen %s PX 3000",
                   gp_app_instance(app));
    if (r->frozen || r->replace_busy || r->inflight > 0)
        return;
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    snprintf(lim, sizeof(lim), "%u", r->cfg->replace_batch);
    r->replace_busy = true;
    if (gp_db_query(gp_app_db(app),
                    "UPDATE recovery_nodes SET claimed_by = $1,"
                    " claim_until = now() + interval '10 seconds'"
                    " WHERE node IN (SELECT node FROM recovery_nodes WHERE state = 'pending'"
                    "  AND next_ms <= $2::bigint AND (claim_until IS NULL OR claim_until < now())"
                    "  ORDER BY lost_ms, node LIMIT $3::int FOR UPDATE SKIP LOCKED)"
                    " RETURNING node, site, tries, reason",
                    3, p, 0, claimed, r) != GP_EOK)
        r->replace_busy = false;
}

void
recovery_replace_start(recovery *r)
{
    gp_metrics *m = gp_app_metrics(r->app);

    r->m_replaced = gp_metrics_counter(m, "gp_recovery_nodes_replaced_total", NULL,
                                       "Lost nodes whose attempts the scheduler replaced");
    r->m_waits = gp_metrics_counter(m, "gp_recovery_fence_waits_total", NULL,
                                    "Replace requests the fence held (a lease may still run)");
    r->m_deferred = gp_metrics_counter(m, "gp_recovery_deferred_total", NULL,
                                       "Replacements put off by a rate limit or the freeze");
    r->m_replace_errors = gp_metrics_counter(m, "gp_recovery_replace_errors_total", NULL,
                                             "Replace requests that failed (retried with backoff)");
    r->m_pending = gp_metrics_gauge(m, "gp_recovery_pending", NULL,
                                    "Lost nodes whose attempts are not replaced yet");
}
