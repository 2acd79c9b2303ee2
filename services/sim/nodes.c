/* nodes.c -- the simulated nodes: each one the real agent code (agent.c)
 * on its simulated GPUs, on the simulator's one loop and bus, with its
 * command and health routes bound to its own site and node while it is
 * up.  Faults (faults.c) bring nodes down and up through here; nothing
 * here calls back up. */
#include <stdio.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "sim.h"

/* ---- a node's agent ---------------------------------------------------------- */

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
    snprintf(o.version, sizeof(o.version), "sim-%s", gp_app_version(s->app));
    o.heartbeat_ms = s->heartbeat_ms;
    o.start_delay_s = delay_s;
    o.seed = n->seed;
    o.on_registered = on_registered;
    o.on_stopped = on_stopped;
    o.on_attempt_end = s->truth != NULL ? truth_on_end : NULL;
    o.cb_arg = s;
    o.host_commands = true;           /* the simulator's rig runs host commands (tests) */
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
    snprintf(h->version, sizeof(h->version), "sim-%s", gp_app_version(gp_req_app(req)));
    h->nats = MSG_HEALTH_NATS_UP;
    h->redis = h->pg = MSG_HEALTH_REDIS_UNUSED;
    return GP_EOK;
}

static gp_err
on_node_register_again(gp_req *req, const void *in, void *out)
{
    sim_node *n = gp_req_data(req);

    (void)out;
    if (agent_is_reachable(n->ag))
        agent_cmd_register_again(n->ag, in);
    return GP_EOK;
}

static const gp_route node_routes[] = {
    {GP_OP_NODE_RUN, on_node_run, 0, 0, NULL, NULL},
    {GP_OP_NODE_SIGNAL, on_node_signal, 0, 0, NULL, NULL},
    {GP_OP_NODE_HEALTH, on_node_health, 0, 0, NULL, NULL},
    {GP_OP_NODE_REGISTER_AGAIN, on_node_register_again, 0, 0, NULL, NULL},
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

/* ---- the fleet's nodes --------------------------------------------------------- */

/* The nodes' routes are bound one node at a time; declared at start so
 * their metrics exist and --print-routes lists them. */
gp_err
sim_nodes_declare(gp_app *app)
{
    return gp_app_declare(app, node_routes);
}

/* Every node's GPUs, and its agent up after a share of spread-ms drawn
 * from the fleet's seed (the same seed, the same order of arrival). */
void
sim_nodes_start(sim *s)
{
    uint64_t rng = s->f.seed ^ 0x7370726561640000ull;

    s->t_agents = gp_mono_s();
    for (int i = 0; i < s->f.nnodes; i++) {
        sim_node *n = &s->f.nodes[i];

        n->gpu = gpu_sim_new(n->model, n->ngpus, n->seed);
        sim_node_up(s, i, gp_rng_unit(&rng) * s->spread_s);
    }
}

void
sim_nodes_down(sim *s)
{
    for (int i = 0; i < s->f.nnodes; i++)
        sim_node_down(s, i);
}

void
sim_nodes_free(sim *s)
{
    for (int i = 0; i < s->f.nnodes; i++) {
        gpu_free(s->f.nodes[i].gpu);
        s->f.nodes[i].gpu = NULL;
    }
}
