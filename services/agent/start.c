/* start.c -- gridpool-agent's process on the chassis (gp_app_main's
 * hooks): before it, the node's ids checked, its GPU backend open, the
 * agent's options (boot id, reply inbox); on it, the agent, its command
 * routes bound to its own site and node, its health in its own subject
 * tree (gp.node.<site>.<node>.health, so a NATS identity limited to
 * gp.node.<site>.<node>.> is all it needs); it needs no Redis or
 * PostgreSQL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp/id.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "service.h"

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

/* The node's container settings.  Without a runtime or a seccomp profile
 * the agent still runs, and refuses every image with the reason. */
static void
containers(const agent_cfg *c, agent_proc *p)
{
    ctr_node *n = &p->ctr;
    long      cores = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t  mem_mb = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) >> 20;
    char      why[400];

    *n = (ctr_node){.img = {.state_dir = c->state_dir, .skopeo = c->skopeo, .umoci = c->umoci,
                            .insecure = c->insecure_registries, .keep = c->image_keep,
                            .cache_kb = (uint64_t)c->image_cache_mb * 1024},
                    .runtime_root = c->runtime_root, .id_base = c->id_base,
                    .cpu_millis = c->default_cpu_millis, .memory_mb = c->default_memory_mb,
                    .scratch_mb = c->default_scratch_mb, .pids = c->default_pids,
                    .max_cpu_millis = c->max_cpu_millis ? c->max_cpu_millis
                                                        : (uint32_t)(cores > 0 ? cores : 1) * 1000u,
                    .max_memory_mb = c->max_memory_mb ? c->max_memory_mb : (uint32_t)mem_mb,
                    .max_scratch_mb = c->max_scratch_mb ? c->max_scratch_mb : (uint32_t)(mem_mb / 2),
                    .log_kb = c->log_kb, .ckpt_shared_root = c->checkpoint_shared_root,
                    .net = {.cidr = c->container_net, .allow = c->container_allow_nets,
                            .cni_path = c->cni_path},
                    .public_addr = c->public_address, .port_lo = c->port_min,
                    .port_hi = c->port_max};
    if (!ctr_node_init(n, c->oci_runtime, c->seccomp_profile, why, sizeof(why))) {
        GP_WARN("containers_unavailable", "why=\"%s\": workloads with an image are refused", why);
        p->o.containers = NULL;
        return;
    }
    p->o.containers = n;
    GP_INFO("containers_ready", "runtime=%s state_dir=%s max_cpu_millis=%u max_memory_mb=%u",
            n->runtime, c->state_dir, n->max_cpu_millis, n->max_memory_mb);
}

/* The node's NATS identity from a file only root reads (the package's unit
 * hands it over with LoadCredential=): never in the agent's environment,
 * so never in anything it starts.  false: unreadable (exit 78). */
static bool
credentials(agent_cfg *c)
{
    char        path[512], err[256];
    const char *dir = getenv("CREDENTIALS_DIRECTORY");

    if (c->credentials[0] != '\0')
        snprintf(path, sizeof(path), "%s", c->credentials);
    else if (dir != NULL && dir[0] != '\0')
        snprintf(path, sizeof(path), "%s/nats", dir);
    else
        return true;
    if (c->credentials[0] == '\0' && access(path, R_OK) != 0)
        return true;                      /* LoadCredential= of another name, or none */
    if (gp_cfg_read_file(agent_cfg_opts, c, path, err, sizeof(err)) != GP_EOK) {
        fprintf(stderr, "gridpool-agent: credentials %s: %s\n", path, err);
        return false;
    }
    return true;
}

int
agent_prepare(void *cfg, void *state)
{
    agent_cfg  *c = cfg;
    agent_proc *p = state;

    if (!credentials(c))
        return 78;

    if (!gp_id_ok(c->site) || !gp_id_ok(c->node)) {
        fprintf(stderr, "gridpool-agent: --site and --node are required (no '.', '*', '>', spaces)\n");
        return 78;
    }
    if ((p->gpu = open_backend(c)) == NULL)
        return 1;
    p->o = (agent_opts){.heartbeat_ms = c->heartbeat_ms, .stop_grace_ms = c->stop_grace_ms};
    snprintf(p->o.site, sizeof(p->o.site), "%s", c->site);
    snprintf(p->o.node, sizeof(p->o.node), "%s", c->node);
    if (c->boot_id[0] != '\0')
        snprintf(p->o.boot_id, sizeof(p->o.boot_id), "%s", c->boot_id);
    else
        boot_id(p->o.boot_id, sizeof(p->o.boot_id));
    p->o.host_commands = c->host_commands;
    containers(c, p);
    p->node[0] = (gp_param){"site", c->site};
    p->node[1] = (gp_param){"node", c->node};
    /* Replies to register/lease come into the node's own subtree: its NATS
     * identity needs no rights outside gp.node.<site>.<node>.> */
    if (c->common.nats_inbox_prefix[0] == '\0' &&
        agent_inbox_prefix(c->site, c->node, c->common.nats_inbox_prefix,
                           sizeof(c->common.nats_inbox_prefix)) != GP_EOK)
        return 1;
    return GP_CFG_CONTINUE;
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

static gp_err
on_logs(gp_req *req, const void *in, void *out)
{
    char   detail[GP_ERRBUF_LEN] = "";
    gp_err rc = agent_cmd_logs(gp_req_data(req), in, out, detail, sizeof(detail));

    return rc == GP_EOK ? rc : gp_req_fail(req, rc, "%s", detail);
}

static gp_err
on_register_again(gp_req *req, const void *in, void *out)
{
    (void)out;
    agent_cmd_register_again(gp_req_data(req), in);
    return GP_EOK;
}

/* The node's command routes, bound to its own site and node. */
static const gp_route agent_routes[] = {
    {GP_OP_NODE_RUN, on_run, 0, 0, NULL, NULL},
    {GP_OP_NODE_SIGNAL, on_signal, 0, 0, NULL, NULL},
    {GP_OP_NODE_LOGS, on_logs, 0, 0, NULL, NULL},
    {GP_OP_NODE_REGISTER_AGAIN, on_register_again, 0, 0, NULL, NULL},
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
    ctr_node_fini(&((agent_proc *)state)->ctr);
}
