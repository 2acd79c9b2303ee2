/* container.h -- one attempt as an OCI container: the image from the
 * node's cache (image.h), a bundle whose config.json ocispec.c writes, and
 * the OCI runtime (runc or crun) that runs it, signals it and deletes it.
 * The agent writes no cgroup, namespace or image-layer code.
 *
 * Life: ctr_start pulls and writes the bundle, then runs `RUNTIME run` as
 * a child of the agent (its pid is what attempt.c watches; its exit status
 * is the container's).  ctr_signal is `RUNTIME kill --all` (every process
 * in the container's cgroup: no setsid or double fork escapes it), and the
 * container's own pid namespace dies with its init.  ctr_exited tells a
 * container that ran from one that never started, then deletes it.
 *
 * Its output goes to a pipe the loop reads into a ring of two files
 * (<state>/logs/<job>/<attempt>/output and output.1, log_kb in all). */
#ifndef GP_AGENT_CONTAINER_H
#define GP_AGENT_CONTAINER_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gp/err.h"
#include "ctrnet.h"
#include "image.h"
#include "msg_gen.h"

#define CTR_SLOTS 64                /* id ranges: attempts at once on a node */
#define CTR_IDS   65536u            /* ids in each range */

/* The node's container settings (gridpool-agent's options), shared by its
 * attempts; NULL in the simulator. */
typedef struct ctr_node {
    img_cfg     img;
    char        runtime[256];       /* absolute path of runc or crun */
    const char *runtime_root;       /* its --root: state of our containers only */
    char       *seccomp_json;       /* the profile, an OCI linux.seccomp object */
    uint32_t    id_base;            /* host ids: id_base + slot * CTR_IDS */
    uint64_t    slots;              /* bitmap of ranges in use */
    uint32_t    cpu_millis, memory_mb, scratch_mb, pids;         /* defaults */
    uint32_t    max_cpu_millis, max_memory_mb, max_scratch_mb;   /* what one may ask */
    uint32_t    log_kb;
    const char *ckpt_shared_root;   /* file:// checkpoint URIs must be under it; "" none */
    ctrnet_cfg  net;                /* net.cidr "": loopback only */
    char        cni_dir[300];       /* <state>/cni */
    /* an attempt's named ports: host ports from [port_lo, port_hi] on the
     * node's address (public_addr, or the first address of an interface
     * that is up), each used by one attempt at a time */
    const char *public_addr;
    char        addr[64];
    unsigned    port_lo, port_hi, port_next;
    uint8_t     port_used[65536 / 8];
} ctr_node;

typedef struct ctr ctr;

typedef struct ctr_cbs {
    /* the runtime runs it: pid is the `run` child's (watch it) */
    void (*running)(void *arg, pid_t pid);
    /* it never ran: why starts with "image " when the image is at fault */
    void (*failed)(void *arg, const char *why);
    /* it reported a completed checkpoint (the report protocol, below) */
    void (*reported)(void *arg, uint64_t step, const char *id);
} ctr_cbs;

/* The checkpoint report protocol (the contract: AttemptEvent's
 * checkpoint_step): once a checkpoint is complete where it lives, the job
 * writes one line "step=N id=TEXT" (id optional, at most 127 bytes of
 * [A-Za-z0-9._:/-]) to a new file and renames it to
 * $GP_REPORT_DIR/checkpoint.  The agent reads it (a regular file, at most
 * 256 bytes, never followed through a link) and publishes `checkpointed`
 * with the step and id; the scheduler keeps the last one on the job and
 * the next attempt, on any node, gets it in GP_RESUME_STEP and
 * GP_RESUME_CHECKPOINT.  A step lower than one already reported is
 * ignored. */
#define CTR_REPORT_MAX 256
/* Parses a report; false when it is not "step=N[ id=TEXT]". */
bool   ctr_report_parse(const char *s, uint64_t *step, char *id, size_t idn);

/* Loads the seccomp profile, resolves the runtime, makes the folders;
 * false with why. */
bool   ctr_node_init(ctr_node *n, const char *runtime, const char *seccomp_path, char *why,
                     size_t wn);
void   ctr_node_fini(ctr_node *n);

/* Checks what can be checked now (resources against the node's limits,
 * the image reference) and starts the pull: INVAL with why for the
 * former; later the callbacks.  minors: the device minor of each GPU of
 * in->gpus (the node's numbering: gpu_info.minor). */
gp_err ctr_start(ctr_node *n, struct ev_loop *loop, const msg_run_attempt *in, const int *minors,
                 const ctr_cbs *cbs, void *arg, ctr **out, char *why, size_t wn);
/* `RUNTIME kill --all ID SIG`; before it runs, nothing (see ctr_free). */
void   ctr_signal(ctr *c, int sig);
/* The `run` child was reaped: *started false (and why) if the container
 * never ran.  Deletes it (`RUNTIME delete --force`) and its bundle. */
void   ctr_exited(ctr *c, bool *started, char *why, size_t wn);
/* Teardown: kills it and waits for the runtime to say so (bounded). */
void   ctr_kill_sync(ctr *c);
/* argv of `RUNTIME --root R kill --all ID KILL`, for the lease guard's exec. */
char *const *ctr_kill_argv(const ctr *c);
/* Its endpoints (a named port -> the node's address and the host port):
 * how many were written into out (at most max). */
int    ctr_endpoints(const ctr *c, msg_endpoint *out, int max);
/* The digest it runs, "" until pulled. */
const char *ctr_digest(const ctr *c);
/* The container's bundle folder (config.json), its log folder. */
const char *ctr_bundle(const ctr *c);
/* A piece of an attempt's output from the node's ring (running or not):
 * NOTFOUND when the node kept none.  out->data is malloc'd (the caller's
 * message owns it). */
gp_err ctr_logs_read(const ctr_node *n, const msg_logs_request *in, uint32_t attempt,
                     msg_logs *out, char *why, size_t wn);
/* Frees; a pull under way is cancelled.  NULL ok. */
void   ctr_free(ctr *c);

#endif
