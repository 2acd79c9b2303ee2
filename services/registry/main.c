/* main.c -- gridpool-registry: config table, routes, run. */
#include <stdlib.h>

#include "gp/app.h"
#include "registry.h"

#define REGISTRY_VERSION "0.1.0"

const gp_cfg_opt registry_cfg_opts[] = {
    GP_CFG_TABLE(registry_cfg, common, gp_common_cfg_opts),
    GP_CFG_UINT("heartbeat-ms", registry_cfg, heartbeat_ms, 5000, 100, 600000, "heartbeat interval handed to agents"),
    GP_CFG_UINT("stale-beats", registry_cfg, stale_beats, 3, 1, 100, "missed heartbeats before a node is stale"),
    GP_CFG_UINT("lease-ms", registry_cfg, lease_ms, 60000, 1000, 3600000, "attempt lease handed to agents"),
    GP_CFG_UINT("sweep-ms", registry_cfg, sweep_ms, 1000, 50, 60000, "how often stale nodes are looked for"),
    GP_CFG_UINT("hb-backlog", registry_cfg, hb_backlog, 20000, 100, 1000000, "Redis commands in flight past which heartbeats are shed"),
    GP_CFG_END
};

int
main(int argc, char **argv)
{
    registry_cfg cfg;
    registry     reg = {0};
    gp_app      *app = NULL;
    int          code;
    gp_err       rc;

    gp_cfg_load("gridpool-registry", registry_cfg_opts, &cfg, argc, argv, NULL, &code);
    if (code != GP_CFG_CONTINUE)
        return code;
    rc = gp_app_new("registry", REGISTRY_VERSION, &cfg.common, GP_NEED_REDIS | GP_NEED_PG,
                    registry_migrations, &app);
    if (rc == GP_EOK) {
        reg.app = app;
        reg.cfg = &cfg;
        registry_states_start(&reg);
        registry_live_start(&reg);
        gp_app_on_stop(app, registry_states_stop, &reg);   /* the state queue is written first */
        gp_app_every(app, "sweep", cfg.sweep_ms / 1000.0, registry_live_cron, &reg);
        rc = gp_app_serve(app, &reg, registry_admin_routes, registry_node_routes, NULL);
    }
    if (rc == GP_EOK)
        rc = gp_app_run(app);
    gp_app_free(app);
    registry_nodes_free(&reg);
    gp_lib_close();
    return rc == GP_EOK ? 0 : 1;
}
