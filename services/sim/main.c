/* main.c -- gridpool-sim as gp_app_main runs it: builds a fleet from a
 * seed, creates its tenants, sites, pools and products through the
 * registry admin API (admin.c), then runs one agent per node (nodes.c,
 * simulated GPUs) in this one process, on one loop and one bus, and
 * injects faults from a script or from gp.int.sim.fault (faults.c).
 * --truth FILE writes the ground truth of every attempt (truth.c);
 * --workload FILE submits a seeded stream of jobs through gp.api
 * (workload.c), next to the fleet or alone (--no-fleet: the fleet's shape
 * is still built from --sites and --seed, for origins and models, but no
 * agent runs; the process stops when every submission is answered).
 * Options: config.c; the phases: start.c. */
#include "gp/app.h"
#include "sim.h"

#define SIM_VERSION "0.1.0"

static const gp_route *const sim_routes[] = {sim_fault_routes, NULL};

static const gp_service sim_service = {
    .name = "sim",
    .version = SIM_VERSION,
    GP_SVC_CFG(sim_cfg, common, sim_cfg_opts),
    .state_size = sizeof(sim),
    .needs = 0,
    .routes = sim_routes,
    .prepare = sim_prepare,
    .init = sim_init,
    .start = sim_start,
    .stop = sim_stop,
    .free = sim_free,
};

int
main(int argc, char **argv)
{
    return gp_app_main(&sim_service, argc, argv);
}
