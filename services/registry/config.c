/* config.c -- gridpool-registry's options (the table gp_app_main loads)
 * and what is derived from them before anything starts: the failure
 * detector's settings. */
#include <stdio.h>

#include "registry.h"

const gp_cfg_opt registry_cfg_opts[] = {
    GP_CFG_TABLE(registry_cfg, common, gp_common_cfg_opts),
    GP_CFG_UINT("heartbeat-ms", registry_cfg, heartbeat_ms, 5000, 100, 600000, "heartbeat interval handed to agents"),
    GP_CFG_UINT("detect-floor-ms", registry_cfg, detect_floor_ms, 0, 0, 3600000, "a node is never suspect sooner after its last heartbeat (0: 2 x heartbeat-ms + 1 s)"),
    GP_CFG_UINT("detect-ceiling-ms", registry_cfg, detect_ceiling_ms, 0, 0, 3600000, "...nor later, however jittery its history (0: 6 x heartbeat-ms)"),
    GP_CFG_UINT("detect-k", registry_cfg, detect_k, 4, 1, 16, "deviations of a node's heartbeat interval above its mean before it is suspect"),
    GP_CFG_UINT("lost-ms", registry_cfg, lost_ms, 0, 0, 3600000, "no contact (heartbeat or lease renewal) this long, and suspect: lost (0: 2 x heartbeat-ms + 500 ms)"),
    GP_CFG_UINT("lease-ms", registry_cfg, lease_ms, 9000, 1000, 3600000, "attempt lease handed to agents (the scheduler's lease-ms)"),
    GP_CFG_UINT("quarantine-xids", registry_cfg, q_xids, 3, 1, 1000, "bad-GPU XIDs (gp/xid.h) within quarantine-window-ms that quarantine a node (XID 79 or a lost GPU: at once)"),
    GP_CFG_UINT("quarantine-window-ms", registry_cfg, q_window_ms, 600000, 1000, 86400000, "the window of quarantine-xids"),
    GP_CFG_UINT("quarantine-dbe", registry_cfg, q_dbe, 1, 1, 1000000, "new uncorrectable (double-bit) ECC errors in one heartbeat that quarantine a node"),
    GP_CFG_UINT("quarantine-flaps", registry_cfg, q_flaps, 3, 1, 1000, "returns from lost within quarantine-flap-window-ms that quarantine a flapping node"),
    GP_CFG_UINT("quarantine-flap-window-ms", registry_cfg, q_flap_window_ms, 600000, 1000, 86400000, "the window of quarantine-flaps"),
    GP_CFG_UINT("sweep-ms", registry_cfg, sweep_ms, 1000, 50, 60000, "how often stale nodes are looked for"),
    GP_CFG_UINT("history-days", registry_cfg, history_days, 90, 1, 36500, "node state history (node_transitions) kept this many days"),
    GP_CFG_UINT("history-trim-ms", registry_cfg, history_ms, 600000, 100, 86400000, "how often older history is deleted (a batch of 20,000 rows each time)"),
    GP_CFG_UINT("hb-backlog", registry_cfg, hb_backlog, 20000, 100, 1000000, "Redis commands in flight past which lease renewals' contact is shed"),
    GP_CFG_UINT("hb-max-wait-ms", registry_cfg, hb_max_wait_ms, 1500, 10, 60000, "how long the oldest Redis command in flight may have waited before lease renewals' contact is shed (well under the Redis command timeout)"),
    GP_CFG_UINT("hb-window", registry_cfg, hb_window, 1000, 1, 1000000, "heartbeat scripts in flight to Redis at most; beats past it wait, one per node (the newest)"),
    GP_CFG_UINT("hb-pending-max", registry_cfg, hb_pending_max, 200000, 1, 10000000, "nodes whose beat may wait for the heartbeat window; a beat of one more node is shed"),
    GP_CFG_END
};

/* The detector's settings: defaults scaled from the heartbeat interval
 * (gp/detect.h), each replaced by its option when set; NULL or why they
 * cannot work. */
static const char *
detect_setup(registry *r, const registry_cfg *cfg)
{
    gp_detect_cfg *d = &r->detect;
    const char    *why;

    gp_detect_cfg_default(d, cfg->heartbeat_ms);
    d->floor_ms = cfg->detect_floor_ms ? cfg->detect_floor_ms : d->floor_ms;
    d->ceiling_ms = cfg->detect_ceiling_ms ? cfg->detect_ceiling_ms : d->ceiling_ms;
    d->k = cfg->detect_k;
    d->lost_ms = cfg->lost_ms ? cfg->lost_ms : d->lost_ms;
    if ((why = gp_detect_cfg_check(d)) != NULL)
        return why;
    snprintf(r->detect_args, sizeof(r->detect_args), "%u %u %u %u %u", d->interval_ms,
             d->floor_ms, d->ceiling_ms, d->k, d->lost_ms);
    snprintf(r->sweep_frozen_args, sizeof(r->sweep_frozen_args), "%s 1", r->detect_args);
    snprintf(r->q_window, sizeof(r->q_window), "%u", cfg->q_window_ms);
    snprintf(r->q_flap_window, sizeof(r->q_flap_window), "%u", cfg->q_flap_window_ms);
    return NULL;
}

int
registry_prepare(void *cfg, void *state)
{
    const char *why = detect_setup(state, cfg);

    if (why == NULL)
        return GP_CFG_CONTINUE;
    fprintf(stderr, "gridpool-registry: failure detector: %s\n", why);
    return 2;
}
