/* config.c -- gridpool-metering's options: the table gp_app_main loads. */
#include "metering.h"

const gp_cfg_opt metering_cfg_opts[] = {
    GP_CFG_TABLE(metering_cfg, common, gp_common_cfg_opts),
    GP_CFG_UINT("window-ms", metering_cfg, window_ms, 60000, 1000, 3600000,
                "length of a usage record's window (records per attempt and node: one a window)"),
    GP_CFG_UINT("grace-ms", metering_cfg, grace_ms, 2000, 0, 600000,
                "a window with no later reading is closed this long after its end"),
    GP_CFG_UINT("claim-ms", metering_cfg, claim_ms, 10000, 1000, 600000,
                "a record being published is left to its publisher this long"),
    GP_CFG_UINT("silent-ms", metering_cfg, silent_ms, 30000, 1000, 3600000,
                "an attempt with no reading this long is closed at its last one once the "
                "scheduler says it ended"),
    GP_CFG_UINT("sweep-ms", metering_cfg, sweep_ms, 1000, 100, 60000,
                "how often closed windows, silent attempts and the outbox are looked at"),
    GP_CFG_UINT("publish-max", metering_cfg, publish_max, 512, 1, 100000,
                "records being published at once"),
    GP_CFG_UINT("facts-timeout-ms", metering_cfg, facts_timeout_ms, 2000, 100, 60000,
                "how long the scheduler may take to say what an attempt is"),
    GP_CFG_END
};
