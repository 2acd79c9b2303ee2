/* main.c -- gridpool-agent: one node's agent on the service chassis.
 *
 * The chassis gives it logs, metrics and health over HTTP, signals and
 * the dispatcher; the agent's command routes are bound to its own site
 * and node.  It needs no Redis or
 * PostgreSQL.  Its health route lives in its own subject tree
 * (gp.node.<site>.<node>.health), so a NATS identity limited to
 * gp.node.<site>.<node>.> is all it needs. */
#include <stdio.h>
#include <string.h>

#include "agent.h"
#include "gp/app.h"
#include "gp/id.h"
#include "gp/limits.h"
#include "gp/log.h"

#define AGENT_VERSION "0.1.0"

typedef struct agent_cfg {
    gp_common_cfg common;
    char          site[MSG_NODE_REGISTER_SITE_MAXLEN + 1];
    char          node[MSG_NODE_REGISTER_NODE_MAXLEN + 1];
    char          gpu_backend[8];
    unsigned      sim_gpus;
    char          sim_model[32];
    unsigned      sim_seed;
    unsigned      heartbeat_ms;
    unsigned      stop_grace_ms;
    char          boot_id[MSG_NODE_REGISTER_BOOT_ID_MAXLEN + 1];
} agent_cfg;

static const gp_cfg_opt agent_opts_tab[] = {
    GP_CFG_TABLE(agent_cfg, common, gp_common_cfg_opts),
    GP_CFG_STR("site", agent_cfg, site, "", "site id of this node (required)"),
    GP_CFG_STR("node", agent_cfg, node, "", "node id (required)"),
    GP_CFG_STR("gpu-backend", agent_cfg, gpu_backend, "auto",
               "auto (NVML if present, else simulated), nvml, sim"),
    GP_CFG_UINT("sim-gpus", agent_cfg, sim_gpus, 2, 0, GPU_MAX, "GPUs of the simulated backend"),
    GP_CFG_STR("sim-model", agent_cfg, sim_model, "L4",
               "model of the simulated GPUs: L4, L40S, RTX 4090, A100-80G, H100"),
    GP_CFG_UINT("sim-seed", agent_cfg, sim_seed, 1, 0, 4294967295LL,
                "seed of the simulated GPUs"),
    GP_CFG_UINT("heartbeat-ms", agent_cfg, heartbeat_ms, 0, 0, 600000,
                "heartbeat interval; 0 = what the control plane says (default 5000)"),
    GP_CFG_UINT("stop-grace-ms", agent_cfg, stop_grace_ms, 5000, 100, 600000,
                "SIGTERM to SIGKILL when stopping an attempt"),
    GP_CFG_STR("boot-id", agent_cfg, boot_id, "",
               "the boot id registered (empty: the kernel's): a new one tells the control "
               "plane the node rebooted (a container or a test sets its own)"),
    GP_CFG_END
};

static gpu_backend *
open_backend(const agent_cfg *c)
{
    gpu_backend *b = NULL;
    char         err[256] = "";

    if (strcmp(c->gpu_backend, "sim") != 0) {
        if (gpu_nvml_open(&b, err, sizeof(err)) == GP_EOK)
            return b;
        if (strcmp(c->gpu_backend, "nvml") == 0) {
            GP_ERROR("nvml_unavailable", "detail=\"%s\"", err);
            return NULL;
        }
        GP_INFO("nvml_unavailable", "detail=\"%s\" action=simulated_gpus", err);
    }
    b = gpu_sim_new(c->sim_model, (int)c->sim_gpus, c->sim_seed);
    if (b == NULL)
        GP_ERROR("bad_sim_model", "model=\"%s\"", c->sim_model);
    return b;
}

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

/* The control plane refused this node for good (DENIED): the agent has
 * stopped; the process exits non-zero. */
typedef struct agent_main {
    gp_app *app;
    agent  *a;
    bool    refused;
} agent_main;

static void
on_refused(void *arg, agent *a, gp_err why, const char *detail)
{
    agent_main *m = arg;

    (void)a;
    GP_ERROR("agent_exit", "reason=refused code=%s detail=\"%s\"", gp_err_name(why), detail);
    m->refused = true;
    gp_app_stop(m->app);
}

static void
on_stop(gp_app *app, void *arg)
{
    (void)app;
    agent_free(*(agent **)arg);        /* a stopped agent takes its attempts down */
    *(agent **)arg = NULL;
}

/* The node's command routes, bound to its own site and node. */
static const gp_route agent_routes[] = {
    {GP_OP_NODE_RUN, on_run, 0, 0, NULL, NULL},
    {GP_OP_NODE_SIGNAL, on_signal, 0, 0, NULL, NULL},
    {NULL},
};

/* NATS down: what the agent sends is lost (its leases run out on its own
 * clock); back: it renews at once. */
static void
on_bus(void *arg, bool up)
{
    agent **pa = arg;

    if (*pa != NULL)
        agent_set_connected(*pa, up);
}

/* The kernel's boot id: a node that registers with a new one rebooted
 * (the registry tells a site's power cut from an agent restart by it). */
static void
boot_id(char *out, size_t n)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    out[0] = '\0';
    if (f == NULL)
        return;                        /* agent_new makes one up */
    if (fgets(out, (int)n, f) == NULL)
        out[0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

static int
run(agent_cfg *c, gpu_backend *gpu)
{
    const gp_param node[] = {{"site", c->site}, {"node", c->node}, {NULL, NULL}};
    agent_main     m = {0};
    agent_opts     o = {.heartbeat_ms = c->heartbeat_ms, .stop_grace_ms = c->stop_grace_ms,
                        .on_stopped = on_refused, .cb_arg = &m};
    gp_app        *app = NULL;
    gp_binding    *cmds = NULL;
    agent         *a = NULL;
    gp_err         rc = GP_EOK;

    snprintf(o.site, sizeof(o.site), "%s", c->site);
    snprintf(o.node, sizeof(o.node), "%s", c->node);
    snprintf(o.version, sizeof(o.version), "%s", AGENT_VERSION);
    if (c->boot_id[0] != '\0')
        snprintf(o.boot_id, sizeof(o.boot_id), "%s", c->boot_id);
    else
        boot_id(o.boot_id, sizeof(o.boot_id));
    /* Replies to register/lease come into the node's own subtree: its NATS
     * identity needs no rights outside gp.node.<site>.<node>.> */
    if (c->common.nats_inbox_prefix[0] == '\0')
        rc = agent_inbox_prefix(c->site, c->node, c->common.nats_inbox_prefix,
                                sizeof(c->common.nats_inbox_prefix));
    if (rc == GP_EOK)
        rc = gp_app_new("agent", AGENT_VERSION, &c->common, 0, NULL, &app);
    m.app = app;
    if (rc == GP_EOK && !c->common.print_routes &&
        (a = agent_new(gp_app_loop(app), gp_app_bus(app), &o, gpu)) == NULL)
        rc = GP_ENOMEM;
    if (rc == GP_EOK) {
        gp_app_on_stop(app, on_stop, &a);
        gp_app_on_bus(app, on_bus, &a);
        /* health in the node's own subject tree: its NATS identity is enough */
        gp_app_set_health(app, GP_OP_NODE_HEALTH, node);
        rc = gp_app_bind(app, agent_routes, node, a, &cmds);
    }
    if (rc == GP_EOK)
        rc = gp_app_serve(app, a, NULL);
    if (rc == GP_EOK)
        rc = gp_app_run(app);
    agent_free(a);
    gp_app_free(app);
    return rc == GP_EOK && !m.refused ? 0 : 1;
}

int
main(int argc, char **argv)
{
    agent_cfg    cfg;
    gpu_backend *gpu;
    int          code;

    gp_cfg_load("gridpool-agent", agent_opts_tab, &cfg, argc, argv, NULL, &code);
    if (code != GP_CFG_CONTINUE)
        return code;
    if (!gp_id_ok(cfg.site) || !gp_id_ok(cfg.node)) {
        fprintf(stderr, "gridpool-agent: --site and --node are required (no '.', '*', '>', spaces)\n");
        return 78;
    }
    gp_log_setup("agent", cfg.common.log_level, -1);
    if ((gpu = open_backend(&cfg)) == NULL)
        return 1;
    code = run(&cfg, gpu);
    gpu_free(gpu);
    gp_lib_close();
    return code;
}
