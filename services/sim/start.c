/* start.c -- gridpool-sim's life on the chassis (gp_app_main's hooks):
 * the nodes' routes declared at init; once serving, the admin phase
 * (admin.c), then the agents (nodes.c) with the fault script (faults.c)
 * and the workload (workload.c), or only the workload (--no-fleet: the
 * simulator stops once it is answered), or nothing more (--admin-only:
 * it stops); at stop every node goes down and the truth file is closed. */
#include <stdlib.h>

#include "gp/log.h"
#include "sim.h"
#include "workload.h"

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
