/* main.c -- gridpool-sim: builds a fleet from a seed, creates its tenants,
 * sites, pools and products through the registry admin API, then runs one
 * agent per node (simulated GPUs) in this one process, on one loop and one
 * bus, and injects faults from a script or from gp.int.sim.fault.
 * --truth FILE writes the ground truth of every attempt (truth.c);
 * --workload FILE submits a seeded stream of jobs through gp.api
 * (workload.c), next to the fleet or alone (--no-fleet: the fleet's shape
 * is still built from --sites and --seed, for origins and models, but no
 * agent runs; the process stops when every submission is answered). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "sim.h"
#include "workload.h"

#define SIM_VERSION "0.1.0"

typedef struct sim_cfg {
    gp_common_cfg common;
    unsigned      sites;
    unsigned      seed;
    char          faults[512];
    char          inventory_out[512];
    unsigned      heartbeat_ms;
    unsigned      spread_ms;
    bool          admin;
    unsigned      admin_window;
    unsigned      admin_wait_ms;
    bool          dry_run;
    char          truth[512];
    char          workload[512];
    bool          no_fleet;
    bool          hub_pools;
    bool          admin_only;
} sim_cfg;

static const gp_cfg_opt sim_opts[] = {
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

/* ---- nodes ------------------------------------------------------------------- */


static void
on_registered(void *arg, agent *a, bool first)
{
    sim      *s = arg;
    int       i = fleet_find_node(&s->f, agent_node(a));

    (void)first;
    if (i < 0 || s->f.nodes[i].ever_registered)
        return;
    s->f.nodes[i].ever_registered = true;
    if (++s->nregistered == s->f.nnodes && !s->summary_done) {
        s->summary_done = true;
        printf("sim: registered %d nodes at %d sites in %.2f s\n", s->f.nnodes, s->f.nsites,
               gp_mono_s() - s->t_agents);
        fflush(stdout);
    }
}

/* The registry refused the node for good (deleted by an operator): the
 * agent stopped; the node goes down (routes unbound, agent freed) until a
 * fault script or an operator powers it on again. */
static void
on_stopped(void *arg, agent *a, gp_err why, const char *detail)
{
    sim *s = arg;
    int  i = fleet_find_node(&s->f, agent_node(a));

    GP_WARN("sim_node_refused", "node=%s code=%s detail=\"%s\" action=down", agent_node(a),
            gp_err_name(why), detail);
    if (i >= 0 && s->f.nodes[i].ag == a)
        sim_node_down(s, i);          /* frees a: the agent's last act was this call */
}

void
sim_node_up(sim *s, int i, double delay_s)
{
    sim_node  *n = &s->f.nodes[i];
    agent_opts o;

    if (n->ag != NULL)
        return;
    memset(&o, 0, sizeof(o));
    snprintf(o.site, sizeof(o.site), "%s", s->f.sites[n->site].id);
    snprintf(o.node, sizeof(o.node), "%s", n->id);
    snprintf(o.hostname, sizeof(o.hostname), "%s", n->id);
    snprintf(o.version, sizeof(o.version), "sim-%s", SIM_VERSION);
    o.heartbeat_ms = s->heartbeat_ms;
    o.start_delay_s = delay_s;
    o.seed = n->seed;
    o.on_registered = on_registered;
    o.on_stopped = on_stopped;
    o.on_attempt_end = s->truth != NULL ? truth_on_end : NULL;
    o.cb_arg = s;
    n->ag = agent_new(s->loop, s->bus, &o, n->gpu);
    if (n->ag == NULL) {
        GP_ERROR("sim_node_failed", "node=%s", n->id);
        return;
    }
    agent_set_delay(n->ag, n->delay_ms, n->jitter_ms);
    sim_node_link(s, i, true);
}

void
sim_node_down(sim *s, int i)
{
    sim_node_link(s, i, false);
    agent_free(s->f.nodes[i].ag);
    s->f.nodes[i].ag = NULL;
}

/* ---- each node's command routes --------------------------------------------- */

/* What reaches a node that hangs is lost: the requester waits for its own
 * deadline, as with a real agent that stopped.  Under reply_lost the node
 * does it and its answer is lost on the way back. */
static gp_err
on_node_run(gp_req *req, const void *in, void *out)
{
    sim_node *n = gp_req_data(req);
    char      detail[GP_ERRBUF_LEN] = "";
    gp_err    rc;

    if (!agent_is_reachable(n->ag))
        return gp_req_drop(req);
    rc = agent_cmd_run(n->ag, in, out, detail, sizeof(detail));
    if (n->replies_lost)
        return gp_req_drop(req);
    return rc == GP_EOK ? rc : gp_req_fail(req, rc, "%s", detail);
}

static gp_err
on_node_signal(gp_req *req, const void *in, void *out)
{
    sim_node *n = gp_req_data(req);
    char      detail[GP_ERRBUF_LEN] = "";
    gp_err    rc;

    if (!agent_is_reachable(n->ag))
        return gp_req_drop(req);
    rc = agent_cmd_signal(n->ag, in, out, detail, sizeof(detail));
    if (n->replies_lost)
        return gp_req_drop(req);
    return rc == GP_EOK ? rc : gp_req_fail(req, rc, "%s", detail);
}

static gp_err
on_node_health(gp_req *req, const void *in, void *out)
{
    agent      *a = ((sim_node *)gp_req_data(req))->ag;
    msg_health *h = out;

    (void)in;
    if (!agent_is_reachable(a))
        return gp_req_drop(req);
    snprintf(h->service, sizeof(h->service), "agent");
    snprintf(h->instance, sizeof(h->instance), "%s", agent_node(a));
    snprintf(h->version, sizeof(h->version), "sim-%s", SIM_VERSION);
    h->nats = MSG_HEALTH_NATS_UP;
    h->redis = h->pg = MSG_HEALTH_REDIS_UNUSED;
    return GP_EOK;
}

static const gp_route node_routes[] = {
    {GP_OP_NODE_RUN, on_node_run, 0, 0, NULL, NULL},
    {GP_OP_NODE_SIGNAL, on_node_signal, 0, 0, NULL, NULL},
    {GP_OP_NODE_HEALTH, on_node_health, 0, 0, NULL, NULL},
    {NULL},
};

/* A node that is down has no subscription, so a request to it gets "no
 * responders" at once, as with a dead agent. */
void
sim_node_link(sim *s, int i, bool up)
{
    sim_node *n = &s->f.nodes[i];

    if (up && n->ag != NULL && n->cmds == NULL) {
        const gp_param p[] = {{"site", s->f.sites[n->site].id}, {"node", n->id}, {NULL, NULL}};

        if (gp_app_bind(s->app, node_routes, p, n, &n->cmds) != GP_EOK)
            GP_ERROR("sim_node_bind_failed", "node=%s", n->id);
    } else if (!up && n->cmds != NULL) {
        gp_app_unbind(n->cmds);
        n->cmds = NULL;
    }
}

static void
start_agents(sim *s, sim_script *script)
{
    uint64_t rng = s->f.seed ^ 0x7370726561640000ull;

    s->t_agents = gp_mono_s();
    for (int i = 0; i < s->f.nnodes; i++) {
        sim_node *n = &s->f.nodes[i];

        n->gpu = gpu_sim_new(n->model, n->ngpus, n->seed);
        sim_node_up(s, i, gp_rng_unit(&rng) * s->spread_s);
    }
    if (script != NULL)
        faults_start(s, script);
    GP_INFO("sim_agents_started", "nodes=%d spread_s=%.1f faults=%d", s->f.nnodes, s->spread_s,
            script != NULL);
}

/* ---- admin phase: the registry learns the fleet ------------------------------ */

enum { PH_TENANTS, PH_SITES, PH_POOLS, PH_PRODUCTS, PH_DONE };
static const gp_op *const phase_op[] = {GP_OP_ADMIN_TENANT_CREATE, GP_OP_ADMIN_SITE_CREATE,
                                        GP_OP_ADMIN_POOL_CREATE, GP_OP_ADMIN_PRODUCT_CREATE};

typedef struct admin {
    sim        *s;
    sim_script *script;
    const workload *wl;
    wl_run    **wl_run;
    bool        no_fleet;
    bool        admin_only;
    int         phase, next, total, inflight;
    unsigned    window;
    double      deadline;
    bool        absent;
    int         created, existed, failed;
} admin;

typedef struct call {
    ev_timer retry;
    admin   *ad;
    int      phase, idx;
} call;

static void pump(admin *ad);
static void issue(call *c);

/* The workload is answered; alone (--no-fleet) the simulator stops. */
static void
workload_done(void *arg, wl_run *r)
{
    sim *s = arg;

    (void)r;
    if (s != NULL)
        gp_app_stop(s->app);
}

static int
phase_total(const admin *ad)
{
    switch (ad->phase) {
    case PH_TENANTS: return fleet_ntenants();
    case PH_SITES: return ad->s->f.nsites;
    case PH_POOLS: return ad->s->f.npools;
    case PH_PRODUCTS: return fleet_nproducts(&ad->s->f);
    }
    return 0;
}

static void
retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    issue(GP_CONTAINER_OF(w, call, retry));
}

static void
call_done(void *arg, gp_err err, const void *reply, const char *detail)
{
    call  *c = arg;
    admin *ad = c->ad;

    (void)reply;
    if ((err == GP_ENOROUTE || err == GP_ETIMEOUT || err == GP_EUNAVAIL) && !ad->absent &&
        gp_mono_s() < ad->deadline) {
        ev_timer_init(&c->retry, retry_cb, 0.5, 0);     /* the registry is not up yet */
        ev_timer_start(ad->s->loop, &c->retry);
        return;
    }
    if (err == GP_ENOROUTE && !ad->absent) {
        ad->absent = true;
        GP_WARN("sim_no_registry", "subject=%s action=start_without_inventory",
                phase_op[c->phase]->address);
    }
    if (err == GP_EOK)
        ad->created++;
    else if (err == GP_EEXISTS)
        ad->existed++;                 /* a re-run: it is there already */
    else if (err != GP_ENOROUTE) {
        ad->failed++;
        GP_WARN("sim_admin_failed", "subject=%s index=%d code=%s detail=\"%s\"",
                phase_op[c->phase]->address, c->idx, gp_err_name(err), detail ? detail : "");
    }
    ad->inflight--;
    free(c);
    pump(ad);
}

static void
issue(call *c)
{
    admin          *ad = c->ad;
    const fleet    *f = &ad->s->f;
    union { msg_tenant t; msg_site s; msg_pool p; msg_product q; } m;
    msg_power_price steps[4];
    const gp_op    *op = phase_op[c->phase];
    gp_err          rc;

    switch (c->phase) {
    case PH_TENANTS: fleet_tenant(c->idx, &m.t); break;
    case PH_SITES: fleet_site(f, c->idx, &m.s, steps); break;
    case PH_POOLS: fleet_pool(f, c->idx, &m.p); break;
    default: fleet_product(f, c->idx, &m.q); break;
    }
    rc = gp_call(ad->s->bus, op->address, op->in, &m, op->out, 10000, call_done, c);
    if (rc != GP_EOK)
        call_done(c, rc, NULL, "not sent");
}

static void
pump(admin *ad)
{
    while (ad->phase < PH_DONE) {
        /* Tenants one by one: partners name the operator as their parent. */
        int window = ad->phase == PH_TENANTS ? 1 : (int)ad->window;

        while (!ad->absent && ad->inflight < window && ad->next < ad->total) {
            call *c = calloc(1, sizeof(*c));

            if (c == NULL)
                break;
            c->ad = ad;
            c->phase = ad->phase;
            c->idx = ad->next++;
            ad->inflight++;
            issue(c);
        }
        if (ad->inflight > 0)
            return;
        ad->phase++;
        ad->next = 0;
        ad->total = phase_total(ad);
    }
    printf("sim: inventory in registry: %d created, %d existed, %d failed%s in %.2f s\n",
           ad->created, ad->existed, ad->failed, ad->absent ? " (no registry)" : "",
           gp_mono_s() - ad->s->t_start);
    fflush(stdout);
    if (ad->admin_only) {
        gp_app_stop(ad->s->app);
        return;
    }
    if (!ad->no_fleet)
        start_agents(ad->s, ad->script);
    if (ad->wl != NULL)
        *ad->wl_run = workload_start(ad->s->app, ad->wl, &ad->s->f, workload_done,
                                     ad->no_fleet ? ad->s : NULL);
}

/* ---- the control subject ------------------------------------------------------- */

static gp_err
on_fault(gp_req *req, const void *in, void *out)
{
    msg_sim_fault_ack *ack = out;
    char               detail[GP_ERRBUF_LEN] = "";
    gp_err             rc = fault_apply(gp_req_state(req), in, &ack->applied, detail,
                                        sizeof(detail));

    GP_SET_HAS(ack, MSG_SIM_FAULT_ACK__APPLIED);
    return rc == GP_EOK ? rc : gp_req_fail(req, rc, "%s", detail);
}

static const gp_route sim_routes[] = {
    {GP_OP_SIM_FAULT, on_fault, 0, 0, NULL, NULL},
    {NULL},
};

static void
on_stop(gp_app *app, void *arg)
{
    sim *s = arg;

    (void)app;
    faults_free(s);
    s->stopping = true;                /* what still runs ends as "sim_stop" in the truth */
    for (int i = 0; i < s->f.nnodes; i++)
        sim_node_down(s, i);
    truth_close(s);
}

static int
run(sim_cfg *c, sim *s, sim_script *script, const workload *wl)
{
    wl_run *wr = NULL;
    admin  ad = {.s = s, .script = script, .window = c->admin_window, .wl = wl, .wl_run = &wr,
                 .no_fleet = c->no_fleet, .admin_only = c->admin_only};
    gp_err rc = gp_app_new("sim", SIM_VERSION, &c->common, 0, NULL, &s->app);

    if (rc == GP_EOK) {
        s->loop = gp_app_loop(s->app);
        s->bus = gp_app_bus(s->app);
        gp_app_on_stop(s->app, on_stop, s);
        rc = gp_app_declare(s->app, node_routes);
        rc = rc ? rc : gp_app_serve(s->app, s, sim_routes, NULL);
    }
    if (rc == GP_EOK) {
        ad.deadline = gp_mono_s() + c->admin_wait_ms / 1000.0;
        ad.phase = c->admin && !c->no_fleet ? PH_TENANTS : PH_DONE;
        ad.total = phase_total(&ad);
        if (!c->common.print_routes)
            pump(&ad);
        rc = gp_app_run(s->app);
    }
    on_stop(s->app, s);
    gp_app_free(s->app);               /* the bus is closed: no workload callback is left */
    workload_free(wr);
    for (int i = 0; i < s->f.nnodes; i++)
        gpu_free(s->f.nodes[i].gpu);
    return rc == GP_EOK ? 0 : 1;
}

int
main(int argc, char **argv)
{
    sim_cfg     cfg;
    sim         s;
    sim_script *script = NULL;
    workload    wl;
    char        err[256];
    int         code;

    gp_cfg_load("gridpool-sim", sim_opts, &cfg, argc, argv, NULL, &code);
    if (code != GP_CFG_CONTINUE)
        return code;
    gp_log_setup("sim", cfg.common.log_level, -1);
    memset(&s, 0, sizeof(s));
    s.t_start = gp_mono_s();
    s.heartbeat_ms = cfg.heartbeat_ms;
    s.spread_s = cfg.spread_ms / 1000.0;
    if (cfg.faults[0] != '\0' && (script = faults_load(cfg.faults, err, sizeof(err))) == NULL) {
        fprintf(stderr, "gridpool-sim: %s: %s\n", cfg.faults, err);
        return 78;
    }
    workload_defaults(&wl);
    if (cfg.workload[0] != '\0' && workload_load(cfg.workload, &wl, err, sizeof(err)) != GP_EOK) {
        fprintf(stderr, "gridpool-sim: %s: %s\n", cfg.workload, err);
        return 78;
    }
    if (cfg.no_fleet && cfg.workload[0] == '\0') {
        fprintf(stderr, "gridpool-sim: --no-fleet runs the workload generator alone: give --workload\n");
        return 78;
    }
    if (cfg.truth[0] != '\0' && !cfg.dry_run && truth_open(&s, cfg.truth) != 0) {
        fprintf(stderr, "gridpool-sim: cannot write %s\n", cfg.truth);
        return 78;
    }
    if (fleet_build(&s.f, (int)cfg.sites, cfg.seed) != 0) {
        fprintf(stderr, "gridpool-sim: out of memory building the fleet\n");
        return 1;
    }
    if (!cfg.hub_pools)                /* build_pools puts the hubs' pools last */
        while (s.f.npools > 0 && s.f.pools[s.f.npools - 1].scope == MSG_POOL_SCOPE_SITE)
            s.f.npools--;
    printf("sim: fleet seed %u: %d sites, %d nodes, %d GPUs, %d pools, %d products\n", cfg.seed,
           s.f.nsites, s.f.nnodes, s.f.ngpus, s.f.npools, fleet_nproducts(&s.f));
    fflush(stdout);
    if (cfg.inventory_out[0] != '\0' && fleet_write_inventory(&s.f, cfg.inventory_out) != 0) {
        fprintf(stderr, "gridpool-sim: cannot write %s\n", cfg.inventory_out);
        code = 1;
    } else {
        code = cfg.dry_run ? 0 : run(&cfg, &s, script, cfg.workload[0] ? &wl : NULL);
    }
    if (cfg.dry_run || code != 0) {
        s.script = script;
        faults_free(&s);
    }
    fleet_free(&s.f);
    gp_lib_close();
    return code;
}
