/* start.c -- gridpool-agent's state on the chassis (gp_app_main's hooks):
 * the agent, its command routes bound to its own site and node, its
 * health in its own subject tree (gp.node.<site>.<node>.health, so a NATS
 * identity limited to gp.node.<site>.<node>.> is all it needs); it needs
 * no Redis or PostgreSQL. */
#include <stdio.h>

#include "gp/limits.h"
#include "gp/log.h"
#include "service.h"

static gp_err
on_run(gp_req *req, const void *in, void *out)
{
    char   detail[GP_ERRBUF_LEN] = "";
    gp_err rc = agent_cmd_run(gp_req_data(req), in, out, detail, sizeof(detail));

    return rc == GP_EOK ? rc : gp_req_fail(req, rc, "%s", detail);
}

static gp_err
on_signal(gp_req *req, const void *in, void *out)
{
    char   detail[GP_ERRBUF_LEN] = "";
    gp_err rc = agent_cmd_signal(gp_req_data(req), in, out, detail, sizeof(detail));

    return rc == GP_EOK ? rc : gp_req_fail(req, rc, "%s", detail);
}

/* The node's command routes, bound to its own site and node. */
static const gp_route agent_routes[] = {
    {GP_OP_NODE_RUN, on_run, 0, 0, NULL, NULL},
    {GP_OP_NODE_SIGNAL, on_signal, 0, 0, NULL, NULL},
    {NULL},
};

/* The control plane refused this node for good (DENIED): the agent has
 * stopped; the process exits non-zero. */
static void
on_refused(void *arg, agent *a, gp_err why, const char *detail)
{
    agent_proc *p = arg;

    (void)a;
    GP_ERROR("agent_exit", "reason=refused code=%s detail=\"%s\"", gp_err_name(why), detail);
    gp_app_fail(p->app, why);
}

/* NATS down: what the agent sends is lost (its leases run out on its own
 * clock); back: it renews at once. */
static void
on_bus(void *arg, bool up)
{
    agent_proc *p = arg;

    if (p->a != NULL)
        agent_set_connected(p->a, up);
}

gp_err
agent_init(gp_app *app, const void *cfg, void *state)
{
    const agent_cfg *c = cfg;
    agent_proc      *p = state;

    p->app = app;
    snprintf(p->o.version, sizeof(p->o.version), "%s", gp_app_version(app));
    p->o.on_stopped = on_refused;
    p->o.cb_arg = p;
    if (!c->common.print_routes &&
        (p->a = agent_new(gp_app_loop(app), gp_app_bus(app), &p->o, p->gpu)) == NULL)
        return GP_ENOMEM;
    gp_app_on_bus(app, on_bus, p);
    gp_app_set_health(app, GP_OP_NODE_HEALTH, p->node);
    return gp_app_bind(app, agent_routes, p->node, p->a, &p->cmds);
}

/* A stopped agent takes its attempts down. */
void
agent_stop(gp_app *app, void *state)
{
    agent_proc *p = state;

    (void)app;
    agent_free(p->a);
    p->a = NULL;
}

void
agent_proc_free(void *state)
{
    gpu_free(((agent_proc *)state)->gpu);
}
