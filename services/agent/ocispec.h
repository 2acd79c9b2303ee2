/* ocispec.h -- the OCI runtime config (config.json) of one container
 * attempt, written from what the attempt may have and nothing else.
 *
 * Pure: no I/O, any thread.  The runtime (runc or crun) enforces it: a
 * user namespace mapping the container's ids to a range of the node's
 * that no one else uses, no capabilities, no new privileges, the seccomp
 * profile given, a read-only image root with tmpfs scratch of a bounded
 * size, cgroup limits on CPU, memory and pids, a device cgroup that denies
 * everything but the null-like devices and the attempt's own GPUs, and
 * new pid, ipc, uts, mount, cgroup and network namespaces.
 * ARCHITECTURE.md ("A container attempt") says why each is there. */
#ifndef GP_AGENT_OCISPEC_H
#define GP_AGENT_OCISPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "gp/buf.h"
#include "gp/err.h"

#define OCI_MAX_DEVS 24

/* A character device the attempt may open: the GPU's own node or one of
 * the driver's control nodes.  bind: also make the node (the host has it;
 * on the simulated backend only the cgroup rule is written). */
typedef struct oci_dev {
    char    path[64];
    int64_t major, minor;
    bool    bind;
} oci_dev;

typedef struct oci_in {
    const char        *rootfs;         /* the image's unpacked root, shared read-only */
    const char        *hostname;
    const char *const *args;           /* argv, nargs >= 1 */
    int                nargs;
    const char *const *env;            /* NAME=value each */
    int                nenv;
    const char        *cwd;            /* "" = "/" */
    uint32_t           uid, gid;       /* in the container */
    uint32_t           host_id;        /* container id 0 = this node id ... */
    uint32_t           id_count;       /* ... for this many ids */
    uint64_t           memory_bytes;
    uint32_t           cpu_millis;
    uint32_t           pids;
    uint32_t           nofile;         /* open files (at most the agent's own hard limit) */
    uint64_t           scratch_bytes;  /* /scratch; /tmp gets the same bound */
    const oci_dev     *devs;
    int                ndevs;
    const char        *ckpt_dir;       /* host folder bound at /checkpoint; NULL: none */
    const char        *report_dir;     /* host folder bound at /run/gridpool; NULL: none */
    const char        *netns;          /* its network namespace (made by ctrnet.c); NULL: a new one, loopback only */
    const char        *cgroups_path;   /* "/gridpool/<id>" */
    const char        *seccomp_json;   /* an OCI linux.seccomp object, written as is */
    const char        *gpus;           /* "0,1": the node's GPU indices (an annotation) */
} oci_in;

/* Appends config.json to out.  INVAL (with why) when the input cannot be
 * a safe config: no args, no id range, no seccomp profile. */
gp_err oci_config(const oci_in *in, gp_buf *out, char *why, size_t n);

#endif
