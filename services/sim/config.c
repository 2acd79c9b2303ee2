/* config.c -- gridpool-sim's options (the table gp_app_main loads) and
 * what they give before the chassis starts: the fault script, the
 * workload and the truth file, the fleet built from --sites and --seed
 * (printed, and written with --inventory-out); --dry-run ends there. */
#include <stdio.h>
#include <stdlib.h>

#include "gp/clock.h"
#include "sim.h"
#include "workload.h"

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

/* The files the run reads and writes: 0, or 78 after saying why. */
static int
open_files(const sim_cfg *c, sim *s)
{
    char err[256];

    if (c->faults[0] != '\0' && (s->script = faults_load(c->faults, err, sizeof(err))) == NULL) {
        fprintf(stderr, "gridpool-sim: %s: %s\n", c->faults, err);
        return 78;
    }
    if (c->workload[0] != '\0') {
        if ((s->wl = calloc(1, sizeof(*s->wl))) == NULL) {
            fprintf(stderr, "gridpool-sim: out of memory\n");
            return 1;
        }
        workload_defaults(s->wl);
        if (workload_load(c->workload, s->wl, err, sizeof(err)) != GP_EOK) {
            fprintf(stderr, "gridpool-sim: %s: %s\n", c->workload, err);
            return 78;
        }
    }
    if (c->no_fleet && c->workload[0] == '\0') {
        fprintf(stderr, "gridpool-sim: --no-fleet runs the workload generator alone: give --workload\n");
        return 78;
    }
    if (c->truth[0] != '\0' && !c->dry_run && truth_open(s, c->truth) != 0) {
        fprintf(stderr, "gridpool-sim: cannot write %s\n", c->truth);
        return 78;
    }
    return 0;
}

/* The fleet's shape, printed: 0, or 1 after saying why. */
static int
build_fleet(const sim_cfg *c, sim *s)
{
    if (fleet_build(&s->f, (int)c->sites, c->seed) != 0) {
        fprintf(stderr, "gridpool-sim: out of memory building the fleet\n");
        return 1;
    }
    if (!c->hub_pools)                 /* build_pools puts the hubs' pools last */
        while (s->f.npools > 0 && s->f.pools[s->f.npools - 1].scope == MSG_POOL_SCOPE_SITE)
            s->f.npools--;
    printf("sim: fleet seed %u: %d sites, %d nodes, %d GPUs, %d pools, %d products\n", c->seed,
           s->f.nsites, s->f.nnodes, s->f.ngpus, s->f.npools, fleet_nproducts(&s->f));
    fflush(stdout);
    if (c->inventory_out[0] != '\0' && fleet_write_inventory(&s->f, c->inventory_out) != 0) {
        fprintf(stderr, "gridpool-sim: cannot write %s\n", c->inventory_out);
        return 1;
    }
    return 0;
}

int
sim_prepare(void *cfg, void *state)
{
    const sim_cfg *c = cfg;
    sim           *s = state;
    int            code;

    s->cfg = c;
    s->t_start = gp_mono_s();
    s->heartbeat_ms = c->heartbeat_ms;
    s->spread_s = c->spread_ms / 1000.0;
    if ((code = open_files(c, s)) != 0 || (code = build_fleet(c, s)) != 0)
        return code;
    return c->dry_run ? 0 : GP_CFG_CONTINUE;
}
