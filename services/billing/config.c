/* config.c -- gridpool-billing's options: the table gp_app_main loads. */
#include "billing.h"

const gp_cfg_opt billing_cfg_opts[] = {
    GP_CFG_TABLE(billing_cfg, common, gp_common_cfg_opts),
    GP_CFG_STR("operator-tenant", billing_cfg, operator_tenant, "op",
               "the network operator's tenant: its revenue account takes what is not shared"),
    GP_CFG_STR("fee-tenant", billing_cfg, fee_tenant, "op",
               "the tenant platform fees are booked to"),
    GP_CFG_UINT("fee-bp", billing_cfg, fee_bp, 500, 0, 10000,
                "platform fee, basis points of each GPU charge"),
    GP_CFG_UINT("site-cache-ms", billing_cfg, site_cache_ms, 60000, 0, 3600000,
                "how long a site owner's revenue share is used before it is asked again, and "
                "how often the sites are reloaded in full (their changes arrive as events)"),
    GP_CFG_UINT("book-ms", billing_cfg, book_ms, 2000, 100, 600000,
                "how often the price book is reloaded"),
    GP_CFG_UINT("batch", billing_cfg, batch, 512, 1, 512,
                "records per transaction, at most"),
    GP_CFG_END
};
