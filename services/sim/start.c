/* start.c -- gridpool-sim's life (gp_app_main's hooks): before the
 * chassis, the fault script, the workload and the truth file, and the
 * fleet built from --sites and --seed (printed, and written with
 * --inventory-out; --dry-run ends there); the nodes' routes declared at
 * init; once serving, the admin phase (admin.c), then the agents
 * (nodes.c) with the fault script (faults.c) and the workload
 * (workload.c), or only the workload (--no-fleet: the simulator stops once
 * it is answered), or nothing more (--admin-only: it stops); at stop every
 * node goes down and the truth file is closed. */
#include <stdio.h>
#include <stdlib.h>

#include "gp/clock.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "sim.h"
#include "workload.h"

/* ---- before the chassis ---------------------------------------------------------- */

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
    sim_cfg       *c = cfg;
    sim           *s = state;
    int            code;

    s->cfg = c;
    s->t_start = gp_mono_s();
    s->heartbeat_ms = c->heartbeat_ms;
    s->spread_s = c->spread_ms / 1000.0;
    if ((code = open_files(c, s)) != 0 || (code = build_fleet(c, s)) != 0)
        return code;
    /* One connection carries every node's requests: a node's lease
     * renewals wait up to a lease each, about three of them out while no
     * scheduler answers (a registry-only test), and the default cap (4,096)
     * then refused the last registrations of a 1,000-site fleet (TOOBIG)
     * for good. */
    c->common.bus_max_pending = GP_MAX_PENDING_REQ + 8 * (size_t)s->f.nnodes;
    return c->dry_run ? 0 : GP_CFG_CONTINUE;
}

/* ---- on the chassis ---------------------------------------------------------------- */

gp_err
sim_init(gp_app *app, const void *cfg, void *state)
{
    sim   *s = state;
    gp_err rc;

    (void)cfg;
    s->app = app;
    s->loop = gp_app_loop(app);
    s->bus = gp_app_bus(app);
    rc = sim_admin_new(s);
    return rc == GP_EOK ? sim_nodes_declare(app) : rc;
}

static void
start_agents(sim *s)
{
    sim_script *script = s->script;

    sim_nodes_start(s);
    if (script != NULL)
        faults_start(s, script);
    GP_INFO("sim_agents_started", "nodes=%d spread_s=%.1f faults=%d", s->f.nnodes, s->spread_s,
            script != NULL);
}

/* The workload is answered; alone (--no-fleet) the simulator stops. */
static void
workload_done(void *arg, wl_run *r)
{
    sim *s = arg;

    (void)r;
    if (s != NULL)
        gp_app_stop(s->app);
}

/* The registry has the inventory (or is not there): what runs next. */
static void
admin_done(sim *s)
{
    if (s->cfg->admin_only) {
        gp_app_stop(s->app);
        return;
    }
    if (!s->cfg->no_fleet)
        start_agents(s);
    if (s->wl != NULL)
        s->wl_run = workload_start(s->app, s->wl, &s->f, workload_done,
                                   s->cfg->no_fleet ? s : NULL);
}

void
sim_start(gp_app *app, void *state)
{
    sim *s = state;

    if (gp_app_cfg(app)->print_routes)
        return;
    sim_admin_start(s, s->cfg->admin && !s->cfg->no_fleet, s->cfg->admin_window,
                    s->cfg->admin_wait_ms, admin_done);
}

void
sim_stop(gp_app *app, void *state)
{
    sim *s = state;

    (void)app;
    faults_free(s);
    s->stopping = true;                /* what still runs ends as "sim_stop" in the truth */
    sim_nodes_down(s);
    truth_close(s);
}

/* After the app is gone: the bus is closed, no workload or admin callback
 * is left. */
void
sim_free(void *state)
{
    sim *s = state;

    workload_free(s->wl_run);
    s->wl_run = NULL;
    sim_nodes_free(s);
    faults_free(s);                    /* a script whose faults never started */
    truth_close(s);                    /* a run that ended before its stop */
    sim_admin_free(s);
    free(s->wl);
    s->wl = NULL;
    fleet_free(&s->f);
}
