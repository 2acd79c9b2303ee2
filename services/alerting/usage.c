/* usage.c -- gaps in metering: usage records that never reached billing.
 *
 * Metering numbers each site's usage records 1, 2, 3... with no gap (the
 * number is taken in the script that writes the record), and publishes
 * them into the stream USAGE, which billing consumes.  A number missing
 * from the stream is usage that will never be billed: a record lost in
 * metering's outbox, or held in its review queue (an attempt the scheduler
 * does not know).  alerting reads USAGE too (durable consumer
 * alerting-usage; any instance takes each record) and keeps, per site,
 * the numbers seen (migrate.c's alert_usage_seen: every number up to
 * upto, and the early ones above it).
 *
 * Records may come out of order for a while: a publish that failed is
 * retried when its claim runs out, and a final record waits in the outbox
 * until the scheduler has ended its attempt (minutes, after a thaw).  So
 * every usage-gap-ms a hole counts only once the first record above it
 * has been seen for usage-grace-ms; its size (the numbers missing under
 * the highest seen) is judged by the rules on site.usage_gap.  A hole
 * that fills clears the alert.  Two instances checking at once only
 * repeat raises and clears, which are idempotent. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/log.h"
#include "alerting.h"
#include "diag.h"

static const char seen_sql[] = "SELECT alert_usage_seen($1, $2::bigint)";

static void
seen(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    (void)res, (void)nres;
    al_input_stored(arg, err, "usage_seen_failed", detail);
}

static gp_err
on_record(gp_req *req, const void *in, void *out)
{
    alerting               *a = gp_req_state(req);
    const msg_usage_record *r = in;
    char                    seq[24];
    const char             *p[] = {r->site, seq};

    (void)out;
    (*a->m_usage_records)++;
    if (r->site[0] == '\0' || r->site_seq == 0)
        return gp_req_fail(req, GP_EINVAL, "site and site_seq are required");
    snprintf(seq, sizeof(seq), "%llu", (unsigned long long)r->site_seq);
    if (gp_db_query(gp_app_db(a->app), seen_sql, 2, p, 0, seen, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

/* ---- the check --------------------------------------------------------------------- */

/* per site with a hole known for the grace: the first number missing, how
 * many are missing, the highest seen, since when the hole is known (s).
 * No LIMIT: an active alert whose site is not among these rows clears. */
static const char holes_sql[] =
    "SELECT s.site, s.upto + 1, max(h.seq) - s.upto - count(*), max(h.seq),\n"
    "  (alert_now_ms() - min(h.seen_ms)) / 1000\n"
    "FROM alert_usage_sites s JOIN alert_usage_ahead h ON h.site = s.site\n"
    "GROUP BY s.site, s.upto HAVING min(h.seen_ms) <= alert_now_ms() - $1::bigint\n"
    "ORDER BY 1";
/* the active alerts of the gap rules, for the clears */
static const char active_sql[] =
    "SELECT DISTINCT site FROM alerts WHERE state <> 'resolved'\n"
    "  AND alertname = ANY(string_to_array($1, ','))";

/* One site's missing count against every rule on site.usage_gap. */
static void
one(alerting *a, al_pass *c, const char *site, long missing, const char *evidence)
{
    char    summary[256];
    al_diag d;
    al_vars v = {.site = site, .region = alerting_region(a, site), .reason = evidence};

    al_diag_usage_gap(evidence, &d);
    v.cause = d.cause;
    for (unsigned i = 0; i < a->rules.n; i++) {
        const al_rule *r = &a->rules.rule[i];
        al_raise       x = {.rule = r, .region = v.region, .site = site, .node = "",
                            .summary = summary, .diag = &d};

        if (r->signal != AL_SIG_SITE_USAGE_GAP)
            continue;
        x.holds = al_rule_holds_num(r, (double)missing);
        al_expand(r->summary, &v, summary, sizeof(summary));
        al_pass_apply(c, &x);
    }
}

static void
checked(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    al_pass *c = arg;

    if (err != GP_EOK || nres != 2) {
        (*c->a->m_db_errors)++;
        GP_WARN("usage_check_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    } else {
        const PGresult *h = res[0], *act = res[1];

        for (int i = 0; i < PQntuples(h); i++) {
            char ev[256];

            snprintf(ev, sizeof(ev), "%s usage record(s) missing from the USAGE stream, the "
                     "first number %s (the highest seen %s, for %s s): never billed",
                     PQgetvalue(h, i, 2), PQgetvalue(h, i, 1), PQgetvalue(h, i, 3),
                     PQgetvalue(h, i, 4));
            one(c->a, c, PQgetvalue(h, i, 0), atol(PQgetvalue(h, i, 2)), ev);
        }
        /* an active alert whose site has no hole any more clears */
        for (int i = 0; i < PQntuples(act); i++) {
            const char *site = PQgetvalue(act, i, 0);
            bool        open = false;

            for (int j = 0; j < PQntuples(h) && !open; j++)
                open = strcmp(PQgetvalue(h, j, 0), site) == 0;
            if (!open)
                one(c->a, c, site, 0, "every missing record arrived");
        }
    }
    al_pass_end(c);
}

void
alerting_usage_run(gp_app *app, void *arg)
{
    alerting   *a = arg;
    al_pass    *c;
    char        grace[16], names[AL_RULES_MAX * 65];
    const char *p[] = {grace};
    const char *q[] = {names};
    al_signal   sig = AL_SIG_SITE_USAGE_GAP;
    gp_db_tx   *tx;

    if ((c = al_pass_start(a, &a->usage_busy)) == NULL)
        return;
    al_rule_names(&a->rules, &sig, 1, names, sizeof(names));
    snprintf(grace, sizeof(grace), "%u", a->cfg->usage_grace_ms);
    tx = gp_db_tx_new(gp_app_db(app));
    gp_db_tx_add(tx, holes_sql, 1, p);
    gp_db_tx_add(tx, active_sql, 1, q);
    if (gp_db_tx_run(tx, 0, checked, c) != GP_EOK)
        al_pass_end(c);
}

/* Metering's stream USAGE, declared here too with the same subjects
 * (alerting_streams, main.c), so this durable consumer has it whichever
 * starts first. */
static const gp_durable usage_durable = {.stream = "USAGE", .name = "alerting-usage",
                                         .max_deliver = 20, .ack_wait_ms = 30000,
                                         .backoff_ms = 500, .max_inflight = 256};

const gp_route alerting_usage_routes[] = {
    {GP_OP_USAGE_RECORD, on_record, 0, 10000, NULL, &usage_durable},
    {NULL},
};
