/* config.c -- gridpool-agent's options: the table gp_app_main loads. */
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
