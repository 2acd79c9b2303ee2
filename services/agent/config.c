/* config.c -- gridpool-agent's options (the table gp_app_main loads) and
 * what they give before the chassis starts: the node's ids checked, its
 * GPU backend open, the agent's options (boot id, reply inbox). */
#include <stdio.h>
#include <string.h>

#include "gp/id.h"
#include "gp/log.h"
#include "service.h"

const gp_cfg_opt agent_cfg_opts[] = {
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

int
agent_prepare(void *cfg, void *state)
{
    agent_cfg  *c = cfg;
    agent_proc *p = state;

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
