/* config.c -- gridpool-sim's options: the table gp_app_main loads. */
#include "sim.h"

const gp_cfg_opt sim_cfg_opts[] = {
    GP_CFG_TABLE(sim_cfg, common, gp_common_cfg_opts),
    GP_CFG_UINT("sites", sim_cfg, sites, 10, 1, 40000,
                "sites to simulate (1,000 sites = about 3,000 nodes; place_bench runs 33,400 for 100,000)"),
    GP_CFG_UINT("seed", sim_cfg, seed, 1, 0, 4294967295LL, "seed: the same seed gives the same fleet"),
    GP_CFG_STR("faults", sim_cfg, faults, "", "fault script (see services/sim/faults.c)"),
    GP_CFG_STR("inventory-out", sim_cfg, inventory_out, "", "write the fleet's inventory as JSON here"),
    GP_CFG_UINT("heartbeat-ms", sim_cfg, heartbeat_ms, 0, 0, 600000,
                "heartbeat interval of every node; 0 = what the registry says"),
    GP_CFG_UINT("spread-ms", sim_cfg, spread_ms, 2000, 0, 600000,
                "first registrations are spread over this long"),
    GP_CFG_BOOL("admin", sim_cfg, admin, 1, "create tenants, sites, pools, products via gp.admin.*"),
    /* The registry's pool list counts each pool's GPUs through the pool_gpus
     * view, per pool: at 100,000 nodes the 334 hub pools take it ~2 minutes
     * (over any request deadline), so a fleet that size (place_bench) is
     * built without them. */
    GP_CFG_BOOL("hub-pools", sim_cfg, hub_pools, 1,
                "give each hub site its own pool (and products); 0: only the global and "
                "regional pools"),
    /* place_bench creates the inventory first, starts the schedulers on it
     * (a small first load), then runs the agents with --admin 0 */
    GP_CFG_BOOL("admin-only", sim_cfg, admin_only, 0,
                "create the inventory (tenants, sites, pools, products) and exit: no agents"),
    GP_CFG_UINT("admin-window", sim_cfg, admin_window, 64, 1, 1024, "admin requests in flight"),
    GP_CFG_UINT("admin-wait-ms", sim_cfg, admin_wait_ms, 30000, 0, 600000,
                "how long to wait for the registry to answer before starting without it"),
    GP_CFG_BOOL("dry-run", sim_cfg, dry_run, 0, "build the fleet, write --inventory-out, exit"),
    GP_CFG_STR("truth", sim_cfg, truth, "",
               "write the ground truth (GPU time, energy) of every attempt here, JSON lines"),
    GP_CFG_STR("workload", sim_cfg, workload, "",
               "submit the jobs of this workload file through gp.api (services/sim/workload.h)"),
    GP_CFG_BOOL("no-fleet", sim_cfg, no_fleet, 0,
                "run no agents (the workload generator alone); stop once the workload is done"),
    GP_CFG_END
};
