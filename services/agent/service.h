/* service.h -- the gridpool-agent process: one node's agent on the
 * service chassis (gp_app_main), its config (config.c) and its hooks
 * (start.c).  Not part of the agent library the simulator links. */
#ifndef GP_AGENT_SERVICE_H
#define GP_AGENT_SERVICE_H

#include "agent.h"
#include "container.h"
#include "gp/app.h"

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
    bool          host_commands;
    char          oci_runtime[256];
    char          state_dir[256];
    char          runtime_root[256];
    char          seccomp_profile[256];
    char          skopeo[256];
    char          umoci[256];
    char          insecure_registries[256];
    unsigned      id_base;
    unsigned      default_cpu_millis, default_memory_mb, default_scratch_mb, default_pids;
    unsigned      max_cpu_millis, max_memory_mb, max_scratch_mb;
    unsigned      log_kb;
    unsigned      image_keep;
    unsigned      image_cache_mb;
    char          checkpoint_shared_root[101];
    char          credentials[256];
    char          container_net[64];
    char          container_allow_nets[256];
    char          cni_path[256];
    char          public_address[64];
    unsigned      port_min, port_max;
} agent_cfg;

/* The process' state. */
typedef struct agent_proc {
    gp_app      *app;
    gpu_backend *gpu;                  /* NVML or simulated, from prepare */
    agent_opts   o;                    /* the agent's: ids, boot id, intervals from prepare */
    ctr_node     ctr;                  /* container settings; o.containers points here */
    gp_param     node[3];              /* site and node: its subjects' parameters */
    agent       *a;                    /* NULL once stopped (and with --print-routes) */
    gp_binding  *cmds;                 /* its command routes, bound to its node */
} agent_proc;

extern const gp_cfg_opt agent_cfg_opts[];   /* config.c */

/* start.c: gp_app_main's hooks (state: an agent_proc).  prepare checks
 * site and node (exit 78), opens the GPU backend (exit 1 if none) and
 * fills the agent's options (boot id, the node's own reply inbox).  A node
 * the control plane refused for good stops the process with status 1. */
int    agent_prepare(void *cfg, void *state);
gp_err agent_init(gp_app *app, const void *cfg, void *state);
void   agent_stop(gp_app *app, void *state);
void   agent_proc_free(void *state);

#endif
