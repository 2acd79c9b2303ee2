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
    GP_CFG_BOOL("host-commands", agent_cfg, host_commands, 0,
                "run a command without an image on the host as the agent's user (the agent's "
                "own tests only: never on a node that runs tenants' work)"),
    GP_CFG_STR("oci-runtime", agent_cfg, oci_runtime, "runc",
               "OCI runtime that runs container attempts: runc or crun (a name in PATH or a path)"),
    GP_CFG_STR("state-dir", agent_cfg, state_dir, "/var/lib/gridpool-agent",
               "image cache, bundles and attempt logs"),
    GP_CFG_STR("runtime-root", agent_cfg, runtime_root, "/run/gridpool-agent/runtime",
               "the OCI runtime's --root: the state of this agent's containers only"),
    GP_CFG_STR("seccomp-profile", agent_cfg, seccomp_profile, "/usr/share/gridpool/seccomp.json",
               "seccomp profile of every container (an OCI linux.seccomp object; make builds "
               "build/seccomp.json from the containers-common default)"),
    GP_CFG_STR("skopeo", agent_cfg, skopeo, "skopeo", "skopeo, which pulls images"),
    GP_CFG_STR("umoci", agent_cfg, umoci, "umoci", "umoci, which unpacks them"),
    GP_CFG_STR("insecure-registries", agent_cfg, insecure_registries, "",
               "comma list of host[:port] pulled over plain HTTP (a site's own mirror)"),
    GP_CFG_UINT("id-base", agent_cfg, id_base, 1073741824, 65536, 4000000000LL,
                "first node uid/gid of the containers' ranges (64 ranges of 65536 ids)"),
    GP_CFG_UINT("default-cpu-millis", agent_cfg, default_cpu_millis, 2000, 1, 1024000,
                "CPU of an attempt that asks for none (1000 = one core)"),
    GP_CFG_UINT("default-memory-mb", agent_cfg, default_memory_mb, 4096, 16, 4194304,
                "memory limit of an attempt that asks for none"),
    GP_CFG_UINT("default-scratch-mb", agent_cfg, default_scratch_mb, 1024, 1, 4194304,
                "size of /scratch (and of /tmp) of an attempt that asks for none"),
    GP_CFG_UINT("default-pids", agent_cfg, default_pids, 4096, 16, 4194304,
                "process limit of an attempt that asks for none"),
    GP_CFG_UINT("max-cpu-millis", agent_cfg, max_cpu_millis, 0, 0, 1024000,
                "most CPU one attempt may ask (0: the node's cores)"),
    GP_CFG_UINT("max-memory-mb", agent_cfg, max_memory_mb, 0, 0, 4194304,
                "most memory one attempt may ask (0: the node's memory)"),
    GP_CFG_UINT("max-scratch-mb", agent_cfg, max_scratch_mb, 0, 0, 4194304,
                "largest /scratch one attempt may ask (0: half the node's memory)"),
    GP_CFG_UINT("log-kb", agent_cfg, log_kb, 8192, 64, 1048576,
                "output kept per attempt (the last this many KiB)"),
    GP_CFG_UINT("image-keep", agent_cfg, image_keep, 8, 0, 10000,
                "unpacked image digests kept beyond those in use"),
    GP_CFG_UINT("image-cache-mb", agent_cfg, image_cache_mb, 51200, 0, 16777216,
                "the image cache's size bound, MiB: the oldest images no attempt runs go "
                "beyond it (0: no bound; image-keep bounds their number)"),
    GP_CFG_STR("checkpoint-shared-root", agent_cfg, checkpoint_shared_root, "",
               "where this node mounts the shared checkpoint store (the scheduler's "
               "checkpoint-shared-root): a job's \"shared:\" folder under it is its /checkpoint; "
               "empty: none"),
    GP_CFG_STR("credentials", agent_cfg, credentials, "",
               "a KEY=VALUE file with the node's NATS identity (GP_NATS_USER, GP_NATS_PASSWORD), "
               "read after the config; empty: $CREDENTIALS_DIRECTORY/nats when systemd's "
               "LoadCredential= gave one (the package's unit does)"),
    GP_CFG_STR("container-net", agent_cfg, container_net, "10.89.0.0/16",
               "the containers' addresses (a routed veth each, masqueraded to the internet; "
               "never to the node, other containers or private nets); empty: loopback only"),
    GP_CFG_STR("container-allow-nets", agent_cfg, container_allow_nets, "",
               "comma list of CIDRs containers may reach although private (a site's own mirror)"),
    GP_CFG_STR("cni-path", agent_cfg, cni_path, "/usr/lib/cni",
               "the CNI plugins (Debian's containernetworking-plugins): ptp, host-local, portmap"),
    GP_CFG_STR("public-address", agent_cfg, public_address, "",
               "the node's address in an attempt's endpoints (where its named ports are reached); "
               "empty: the first IPv4 address of an interface that is up"),
    GP_CFG_UINT("port-min", agent_cfg, port_min, 40000, 1024, 65535,
                "lowest host port for an attempt's named ports (keep the node's services out of "
                "port-min..port-max)"),
    GP_CFG_UINT("port-max", agent_cfg, port_max, 40999, 1024, 65535,
                "highest host port for an attempt's named ports"),
    GP_CFG_END
};
