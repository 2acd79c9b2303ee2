/* attempt.h -- one job attempt as a child process (internal to the agent).
 *
 * A workload with an image runs as an OCI container (container.h): the
 * runtime's kill reaches every process in its cgroup.  Without an image,
 * on an agent that allows host commands (tests), the command runs as
 * /bin/sh -c in its own process group, so signals reach everything it
 * started.  On the simulated GPU backend a "sim:"
 * command (simjob.h) runs in the loop instead: timers, no process (pid 0),
 * the same events, stop/grace/kill and lease rules, and the same counters.  Counters are cumulative: gpu_ms is elapsed
 * time x GPUs held (what is delivered, not how busy the job kept them),
 * energy_mj integrates the measured power of its GPUs; both count on the
 * monotonic clock (gp/clock.h), so a step of the date bills nothing. */
#ifndef GP_AGENT_ATTEMPT_H
#define GP_AGENT_ATTEMPT_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "agent.h"
#include "container.h"
#include "simjob.h"

typedef struct attempt attempt;

/* What an attempt needs of its agent: the calls up into agent.c.  Calls
 * go one way (agent.c -> attempt.c): agent.c hands its table
 * (agent_attempt_ops) to attempt_start, and attempt.c calls through it,
 * never agent.c by name.  Each gets the attempt's agent (t->ag). */
typedef struct attempt_ops {
    /* the child is gone (t->done set) */
    void          (*exited)(agent *a, attempt *t);
    /* it wrote its checkpoint marker (see agent.h for when it counts) */
    void          (*checkpointed)(agent *a, attempt *t);
    /* monotonic ms of the loop, for accounting and the lease */
    uint64_t      (*now_ms)(agent *a);
    /* the last power of each node GPU (W), for accounting */
    const double *(*gpu_power)(agent *a);
    /* the node's GPU backend ("sim:" jobs run on the simulated one only) */
    gpu_backend  *(*gpu)(agent *a);
    /* the node's id, for logs */
    const char   *(*node)(const agent *a);
    /* a container attempt runs now (its image pulled): report it started */
    void          (*started)(agent *a, attempt *t);
    /* the node's container settings; NULL: it runs no containers */
    ctr_node     *(*containers)(agent *a);
    /* true: a command without an image runs on the host (tests only) */
    bool          (*host_commands)(const agent *a);
} attempt_ops;

/* agent.c's table: agent_attempt_exited, agent_attempt_checkpointed,
 * agent_now_ms, agent_gpu_power, agent_gpu, agent_node, agent_attempt_started,
 * agent_containers, agent_host_commands. */
extern const attempt_ops agent_attempt_ops;

struct attempt {
    attempt        *next;
    agent          *ag;
    const attempt_ops *ops;              /* ag's calls (attempt_start's) */
    char            job_id[MSG_RUN_ATTEMPT_JOB_ID_MAXLEN + 1];
    uint32_t        num;
    pid_t           pid;                 /* = its process group (a container: the runtime's `run`) */
    ctr            *ctr;                 /* a container attempt (image), else NULL */
    bool            preparing;           /* a container whose image is being pulled: no pid yet */
    char            reason[256];         /* failed_to_start: why */
    bool            has_step;            /* a container reported a checkpoint (container.h) */
    uint64_t        ckpt_step;
    char            ckpt_id[MSG_ATTEMPT_EVENT_CHECKPOINT_ID_MAXLEN + 1];
    int             gpus[GPU_MAX];
    int             ngpus;
    uint64_t        gpu_ms;
    uint64_t        energy_mj;
    uint64_t        acc_ms;              /* gp_mono_ms counted up to */
    uint64_t        granted_ms;          /* gp_mono_ms of the last grant */
    unsigned        lease_ms;
    int             end_event;           /* MSG_ATTEMPT_EVENT_EVENT_*, -1: exited on its own */
    int             exit_code;
    bool            stopping;
    bool            done;                /* reaped; reported in one more heartbeat */
    bool            ckpt_pending;
    unsigned        ckpts;               /* checkpointed events sent: numbers their message ids */
    struct timespec ckpt_sent;           /* wall clock of the last SIGUSR1 */
    char            ckpt_dir[MSG_RUN_ATTEMPT_CHECKPOINT_DIR_MAXLEN + 1];
    char            ckpt_file[MSG_RUN_ATTEMPT_CHECKPOINT_DIR_MAXLEN + 1 + 16];   /* + "/CHECKPOINT_DONE" */
    ev_child        child;
    ev_timer        kill_timer;
    ev_stat         ckpt_stat;
    double          load;                /* 0..1 on its GPUs (sim: load=, real: 0.92) */
    uint64_t        start_ms;            /* gp_mono_ms at start */
    uint64_t        start_wall_ms;       /* gp_wall_ms at start (a timestamp) */
    /* A "sim:" behaviour run in the loop (sim true, pid 0). */
    bool            sim;
    simjob_spec     spec;
    uint64_t        resume_ms;           /* work done before this attempt */
    uint64_t        end_ms;              /* gp_mono_ms when it ended (progress stops) */
    ev_timer        sim_end;             /* work done, fail_after, or the stop */
    ev_timer        sim_ckpt;            /* ckpt= period */
    ev_timer        sim_sig;             /* a checkpoint signal, answered after a delay */
    /* The lease guard (attempt.c): a process for a command, a timer of the
     * simulator's loop for a sim: job (a paused agent does not stop it). */
    pid_t           guard_pid;
    int             guard_fd;            /* -1: none (sim:, or ended) */
    ev_timer        guard_t;
};

/* Starts the command; INVAL (bad env, GPU) or INTERNAL (fork, exec) with
 * detail.  On OK *out is running and watched, and tells ag through ops
 * (which must outlive it: agent_attempt_ops). */
gp_err attempt_start(agent *ag, const attempt_ops *ops, struct ev_loop *loop,
                     const msg_run_attempt *in, int ngpus_node, unsigned lease_ms, attempt **out,
                     char *detail, size_t dlen);
/* The control plane renewed the lease as of granted_ms (monotonic): the
 * deadline moves to granted_ms + lease, in the guard too. */
void   attempt_granted(attempt *t, uint64_t granted_ms);
/* The monotonic ms at which the lease ends and the guard kills. */
uint64_t attempt_deadline(const attempt *t);
/* SIGTERM to the group, SIGKILL after grace_ms; event is what will be
 * reported when it is gone (the first stop's reason wins). */
void   attempt_stop(attempt *t, int event, unsigned grace_ms);
/* SIGKILL to the group now and stop watching (agent teardown). */
void   attempt_kill_now(attempt *t);
/* SIGUSR1 to the group; see agent.h for when it counts as checkpointed. */
gp_err attempt_checkpoint(attempt *t);
/* Counts up to now_ms; power_w[i] is the last power of node GPU i. */
void   attempt_account(attempt *t, uint64_t now_ms, const double *power_w);
void   attempt_free(attempt *t);
/* Work done as of now (resume_ms + time run), for a sim job; false for a
 * real process (it alone knows). */
bool   attempt_progress(const attempt *t, uint64_t now_ms, uint64_t *out);

#endif
