/* main.c -- gridpool-billing: config table, routes, tasks, run.  What it
 * does: billing.h; the domain is in post.c, sites.c and rate.c. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>

#include "gp/app.h"
#include "billing.h"

#define BILLING_VERSION "0.1.0"

const gp_cfg_opt billing_cfg_opts[] = {
    GP_CFG_TABLE(billing_cfg, common, gp_common_cfg_opts),
    GP_CFG_STR("operator-tenant", billing_cfg, operator_tenant, "op",
               "the network operator's tenant: its revenue account takes what is not shared"),
    GP_CFG_STR("fee-tenant", billing_cfg, fee_tenant, "op",
               "the tenant platform fees are booked to"),
    GP_CFG_UINT("fee-bp", billing_cfg, fee_bp, 500, 0, 10000,
                "platform fee, basis points of each GPU charge"),
    GP_CFG_UINT("site-cache-ms", billing_cfg, site_cache_ms, 60000, 0, 3600000,
                "how long a site's prices and owner are used before they are asked again"),
    GP_CFG_UINT("book-ms", billing_cfg, book_ms, 2000, 100, 600000,
                "how often the price book is reloaded"),
    GP_CFG_UINT("batch", billing_cfg, batch, 512, 1, 512,
                "records per transaction, at most"),
    GP_CFG_END
};

static void
tiers_read(void *arg, gp_err err, struct pg_result *const *res, int nres, const char *detail);

int
main(int argc, char **argv)
{
    billing_cfg cfg;
    billing     b = {0};
    gp_app     *app = NULL;
    gp_metrics *mx;
    int         code;
    gp_err      rc;

    gp_cfg_load("gridpool-billing", billing_cfg_opts, &cfg, argc, argv, NULL, &code);
    if (code != GP_CFG_CONTINUE)
        return code;
    rc = gp_app_new("billing", BILLING_VERSION, &cfg.common, GP_NEED_PG | GP_NEED_JS,
                    billing_migrations, &app);
    if (rc == GP_EOK) {
        b.app = app;
        b.cfg = &cfg;
        b.rc = (bill_cfg){.operator_tenant = cfg.operator_tenant, .fee_tenant = cfg.fee_tenant,
                          .fee_bp = (int32_t)cfg.fee_bp,
                          .tier_bp = {12000, 10000, 9000, 8000}};
        mx = gp_app_metrics(app);
        b.m_posted = gp_metrics_counter(mx, "gp_billing_records_posted_total", NULL,
                                        "Usage records rated and posted");
        b.m_duplicates = gp_metrics_counter(mx, "gp_billing_duplicates_total", NULL,
                                            "Usage records taken before (no-op)");
        b.m_rejected = gp_metrics_counter(mx, "gp_billing_rejected_total", NULL,
                                          "Usage records refused (kept in rejected_records)");
        b.m_batches = gp_metrics_counter(mx, "gp_billing_batches_total", NULL,
                                         "Transactions sent");
        b.m_batch_failures = gp_metrics_counter(mx, "gp_billing_batch_failures_total", NULL,
                                                "Batches that failed and went record by record");
        b.m_transfers = gp_metrics_counter(mx, "gp_billing_transfers_total", NULL,
                                           "Ledger transfers posted");
        b.m_credits = gp_metrics_counter(mx, "gp_billing_fault_credits_total", NULL,
                                         "failed_cost transfers: work after the last checkpoint "
                                         "of an attempt lost to a platform fault, not charged");
        rc = billing_sites_start(&b);
    }
    if (rc == GP_EOK) {
        billing_post_start(&b);
        if (gp_app_every(app, "book", cfg.book_ms / 1000.0, billing_book_run, &b) == NULL)
            rc = GP_ENOMEM;
    }
    if (rc == GP_EOK)
        rc = gp_app_streams(app, billing_streams);
    if (rc == GP_EOK)
        rc = gp_app_serve(app, &b, billing_routes, billing_api_routes, NULL);
    if (rc == GP_EOK) {
        billing_book_run(app, &b);
        gp_db_query(gp_app_db(app), "SELECT tier, modifier_bp FROM latency_tiers", 0, NULL, 0,
                    tiers_read, &b);
        rc = gp_app_run(app);
    }
    gp_app_free(app);
    billing_sites_free(&b);
    gp_lib_close();
    return rc == GP_EOK ? 0 : 1;
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
