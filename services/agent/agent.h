/* agent.h -- the node agent core: registration, heartbeats, leases and
 * attempts of one node, on one libev loop and one shared gp_bus.
 *
 * It is a library so that gridpool-agent (one node per process) and
 * gridpool-sim (thousands of nodes in one process, one bus; each node's
 * command routes bound on the chassis with its own site and node) run the
 * same code.  Loop thread only.
 * The loop must be libev's default loop: attempts are child processes
 * watched with ev_child.
 *
 * Lease rule: an attempt keeps running while it was granted (keep list of
 * a register/lease reply, or its RunAttempt) less than lease_ms ago, on
 * the monotonic clock (gp/clock.h), so a step of the date never expires a
 * lease nor changes a usage counter; past
 * that, cut off from the control plane, the agent kills it and reports
 * lease_expired.  Attempt events that happen while cut off are queued and
 * published after the next successful reply.
 *
 * Checkpoints: after an AttemptSignal checkpoint the process gets SIGUSR1;
 * the agent reports `checkpointed` when the process writes a file named
 * CHECKPOINT_DONE (newer than the signal) in its checkpoint dir, or, for
 * an attempt without a checkpoint dir, as soon as SIGUSR1 is delivered.
 *
 * Register and lease are typed calls (gp/call.h) on the bus' request
 * inbox: a standalone agent opens its bus with the inbox prefix
 * gp.node.<site>.<node>._reply so its NATS identity needs no rights
 * outside its subtree.  Timeout and retry of a renewal are lease/6 each.
 *
 * The control plane's answers that change the agent's course:
 *   - a lease answered NOTFOUND (the registry does not know the node):
 *     the agent registers again at once (log agent_reregister);
 *   - a registration answered DENIED (the node was deleted by an operator,
 *     or the body does not match the subject: permanent): the agent stops
 *     for good -- no more heartbeats or requests, its attempts are killed,
 *     commands are refused -- logs agent_stopped and calls on_stopped. */
#ifndef GP_AGENT_H
#define GP_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/bus.h"
#include "gp/err.h"
#include "gpu.h"
#include "msg_gen.h"

struct ev_loop;

typedef struct agent agent;

/* Called once per successful registration (first and re-registrations). */
typedef void agent_event_cb(void *arg, agent *a, bool first);
/* Called once when the control plane refused the node for good (why is
 * the error, DENIED; detail its message).  It is the last thing the agent
 * does in that turn of the loop: the callback may agent_free(a). */
typedef void agent_stopped_cb(void *arg, agent *a, gp_err why, const char *detail);

/* One attempt's life as the node saw it, for the simulator's ground truth
 * (services/sim/truth.c): handed over once per attempt, when it ends or
 * when the agent is freed with it still running (event -1).  Its pointers
 * are valid during the call only. */
typedef struct agent_attempt_end {
    const char *job_id;
    uint32_t    attempt;
    int         ngpus;
    const int  *gpus;
    double      load;               /* 0..1 on each of its GPUs */
    bool        sim;                /* a "sim:" behaviour */
    uint64_t    start_mono_ms, end_mono_ms;
    uint64_t    start_wall_ms;
    int         event;              /* MSG_ATTEMPT_EVENT_EVENT_*; -1: the node went down with it */
    int         exit_code;
    bool        has_progress;
    uint64_t    progress_ms;
    uint64_t    agent_gpu_ms, agent_energy_mj;   /* what the agent counted and reports */
} agent_attempt_end;
typedef void agent_attempt_end_cb(void *arg, agent *a, const agent_attempt_end *e);

typedef struct agent_opts {
    char     site[MSG_NODE_REGISTER_SITE_MAXLEN + 1];
    char     node[MSG_NODE_REGISTER_NODE_MAXLEN + 1];
    char     hostname[MSG_NODE_REGISTER_HOSTNAME_MAXLEN + 1];  /* "" = gethostname */
    char     version[MSG_NODE_REGISTER_AGENT_VERSION_MAXLEN + 1];
    char     boot_id[MSG_NODE_REGISTER_BOOT_ID_MAXLEN + 1];    /* "" = random per agent_new */
    unsigned heartbeat_ms;          /* 0 = what the control plane says (default 5000) */
    unsigned lease_ms;              /* until the first reply says otherwise; 0 = 30000 */
    unsigned request_timeout_ms;    /* register/lease; 0 = 5000 */
    unsigned stop_grace_ms;         /* SIGTERM -> SIGKILL; 0 = 5000 */
    double   start_delay_s;         /* first registration after this (fleet spread) */
    uint64_t seed;                  /* jitter, boot id */
    agent_event_cb   *on_registered;
    agent_stopped_cb *on_stopped;     /* NULL ok */
    agent_attempt_end_cb *on_attempt_end;   /* NULL ok */
    /* workloads with an image run as containers with these settings
     * (container.h); NULL: refused (the simulator) */
    struct ctr_node  *containers;
    /* a command without an image runs on the host as /bin/sh -c: the
     * simulator and the tests of the agent's own mechanics only, never a
     * real node (gridpool-agent's host-commands option) */
    bool              host_commands;
    void             *cb_arg;
} agent_opts;

/* Starts the agent (timers; the first registration after start_delay_s).
 * The backend stays owned by the caller and must outlive the agent. */
agent *agent_new(struct ev_loop *loop, gp_bus *bus, const agent_opts *o, gpu_backend *gpu);
/* Kills every attempt (SIGKILL to its process group; a crashed node takes
 * its jobs with it) and frees.  NULL ok. */
void   agent_free(agent *a);

/* Commands, typed (gridpool-agent routes them through the chassis).
 * Return OK with the ack filled, or an error with detail (UNAVAIL once the
 * agent stopped). */
gp_err agent_cmd_run(agent *a, const msg_run_attempt *in, msg_attempt_ack *out, char *detail,
                     size_t dlen);
/* gp.node.<site>.<node>.cmd.register: the registry does not hold the node
 * (its beat came for a forgotten node): register again. */
void   agent_cmd_register_again(agent *a, const msg_register_again *in);
gp_err agent_cmd_signal(agent *a, const msg_attempt_signal *in, msg_attempt_ack *out,
                        char *detail, size_t dlen);
/* A piece of a container attempt's output (attempt 0: the one this node
 * runs or ran last of the job); NOTFOUND when the node kept none. */
gp_err agent_cmd_logs(agent *a, const msg_logs_request *in, msg_logs *out, char *detail,
                      size_t dlen);

/* Fault hooks for the simulator. */
/* false: the node's uplink is cut: it sends nothing, and commands and
 * replies that reach it are dropped. */
void   agent_set_connected(agent *a, bool connected);
/* false while the uplink is cut or the node hangs: what reaches it is lost. */
bool   agent_is_reachable(const agent *a);
/* true: the node hangs (every timer stops; nothing sent or answered);
 * false: it continues where it stopped. */
void   agent_pause(agent *a, bool paused);
/* Every message the node sends leaves delay_ms + rand(0..jitter_ms) later. */
void   agent_set_delay(agent *a, unsigned delay_ms, unsigned jitter_ms);

const char  *agent_site(const agent *a);
const char  *agent_node(const agent *a);
gpu_backend *agent_gpu(agent *a);
bool         agent_is_registered(const agent *a);
bool         agent_is_stopped(const agent *a);

/* The reply inbox prefix of a standalone agent's bus (gp_bus_opts
 * inbox_prefix): gp.node.<site>.<node>._reply. */
gp_err       agent_inbox_prefix(const char *site, const char *node, char *out, size_t n);
int          agent_attempts_running(const agent *a);

#endif
