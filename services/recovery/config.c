/* config.c -- gridpool-recovery's options: the table gp_app_main loads. */
#include "recovery.h"

const gp_cfg_opt recovery_cfg_opts[] = {
    GP_CFG_TABLE(recovery_cfg, common, gp_common_cfg_opts),
    GP_CFG_UINT("replace-ms", recovery_cfg, replace_ms, 250, 20, 60000,
                "how often lost nodes due for replacement are looked for"),
    GP_CFG_UINT("replace-batch", recovery_cfg, replace_batch, 32, 1, 1000,
                "lost nodes claimed per pass"),
    GP_CFG_UINT("site-rate", recovery_cfg, site_rate, 120, 1, 1000000,
                "node replacements per site and minute, at most"),
    GP_CFG_UINT("region-rate", recovery_cfg, region_rate, 1200, 1, 1000000,
                "node replacements per region and minute, at most"),
    GP_CFG_UINT("sites-ms", recovery_cfg, sites_ms, 60000, 1000, 3600000,
                "how often the site inventory (regions, nodes per site) is reloaded in full; "
                "its changes arrive as events"),
    GP_CFG_UINT("site-window-ms", recovery_cfg, site_window_ms, 30000, 1000, 3600000,
                "nodes of a site lost within this window make one site event"),
    GP_CFG_UINT("site-share-pct", recovery_cfg, site_share_pct, 50, 1, 100,
                "share of a site's nodes lost that makes it unreachable"),
    GP_CFG_UINT("isolation-pct", recovery_cfg, isolation_pct, 30, 1, 100,
                "share of all sites unreachable at once that freezes rescheduling"),
    GP_CFG_UINT("isolation-window-ms", recovery_cfg, isolation_window_ms, 60000, 1000, 3600000,
                "sites unreachable within this window count as at once"),
    GP_CFG_UINT("isolation-min-sites", recovery_cfg, isolation_min_sites, 3, 1, 1000000,
                "...and at least this many sites (in a small fleet one site is a large share)"),
    GP_CFG_UINT("thaw-ms", recovery_cfg, thaw_ms, 120000, 0, 3600000,
                "after a freeze, replacements stay rate-limited this long"),
    GP_CFG_UINT("thaw-rate", recovery_cfg, thaw_rate, 300, 1, 1000000,
                "node replacements a minute, fleet-wide, while thawing"),
    GP_CFG_STR("leafz-urls", recovery_cfg, leafz_urls, "",
               "the hub servers' monitoring URLs (http://host:8222, comma-separated): their "
               "/leafz says which sites' leaf links are up; empty: no leaf evidence"),
    GP_CFG_UINT("leafz-ms", recovery_cfg, leafz_ms, 2000, 200, 600000,
                "how often /leafz is read"),
    GP_CFG_UINT("leaf-dead-ms", recovery_cfg, leaf_dead_ms, 15000, 0, 600000,
                "how long the hub may take to see a dead leaf link (its ping interval x "
                "max pings out): a site whose nodes went silent with its link still up this "
                "long lost its nodes, not its network"),
    GP_CFG_END
};
