/* start.c -- gridpool-billing's state on the app: its rating settings and
 * metrics, the site cache and the posting side, built at start; the price
 * book and the latency tiers read once serving starts; freed at exit
 * (gp_app_main's hooks). */
#include <libpq-fe.h>
#include <stdlib.h>

#include "billing.h"

static void
add_metrics(billing *b)
{
    gp_metrics *mx = gp_app_metrics(b->app);

    b->m_posted = gp_metrics_counter(mx, "gp_billing_records_posted_total", NULL,
                                     "Usage records rated and posted");
    b->m_duplicates = gp_metrics_counter(mx, "gp_billing_duplicates_total", NULL,
                                         "Usage records taken before (no-op)");
    b->m_rejected = gp_metrics_counter(mx, "gp_billing_rejected_total", NULL,
                                       "Usage records refused (kept in rejected_records)");
    b->m_batches = gp_metrics_counter(mx, "gp_billing_batches_total", NULL,
                                      "Transactions sent");
    b->m_batch_failures = gp_metrics_counter(mx, "gp_billing_batch_failures_total", NULL,
                                             "Batches that failed and went record by record");
    b->m_transfers = gp_metrics_counter(mx, "gp_billing_transfers_total", NULL,
                                        "Ledger transfers posted");
    b->m_credits = gp_metrics_counter(mx, "gp_billing_fault_credits_total", NULL,
                                      "failed_cost transfers: work after the last checkpoint "
                                      "of an attempt lost to a platform fault, not charged");
}

gp_err
billing_init(gp_app *app, const void *cfg, void *state)
{
    billing           *b = state;
    const billing_cfg *c = cfg;
    gp_err             rc;

    b->app = app;
    b->cfg = c;
    b->rc = (bill_cfg){.operator_tenant = c->operator_tenant, .fee_tenant = c->fee_tenant,
                       .fee_bp = (int32_t)c->fee_bp, .tier_bp = {12000, 10000, 9000, 8000}};
    add_metrics(b);
    rc = billing_sites_start(b);
    if (rc == GP_EOK)
        billing_post_start(b);
    return rc;
}

/* The latency tiers' modifiers from their table (the defaults until read). */
static void
tiers_read(void *arg, gp_err err, struct pg_result *const *res, int nres, const char *detail)
{
    billing *b = arg;

    (void)detail;
    if (err != GP_EOK || nres < 1)
        return;
    for (int i = 0; i < PQntuples(res[0]); i++) {
        int t = atoi(PQgetvalue(res[0], i, 0));

        if (t >= 0 && t < BILL_TIERS)
            b->rc.tier_bp[t] = atoi(PQgetvalue(res[0], i, 1));
    }
}

void
billing_start(gp_app *app, void *state)
{
    billing_book_run(app, state);
    gp_db_query(gp_app_db(app), "SELECT tier, modifier_bp FROM latency_tiers", 0, NULL, 0,
                tiers_read, state);
}

void
billing_free(void *state)
{
    billing_sites_free(state);
}
