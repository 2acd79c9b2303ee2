/* attempt.c -- child processes of the agent: start, signal, count, reap;
 * and, on the simulated backend, "sim:" behaviours run in the loop
 * (simjob.h: grammar; below: their life). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attempt.h"
#include "gp/clock.h"
#include "gp/limits.h"
#include "gp/log.h"

#ifdef __linux__
# include <linux/close_range.h>     /* CLOSE_RANGE_CLOEXEC (Linux 5.11+; else the loop below) */
#endif

extern char **environ;

#define CKPT_MARKER "CHECKPOINT_DONE"

_Static_assert(MSG_RUN_ATTEMPT_GPUS_MAXITEMS <= GPU_MAX, "an attempt's GPUs fit attempt.gpus");

typedef struct envb {
    char **v;
    int    n, cap;
} envb;

static bool
env_has(const envb *e, const char *kv)
{
    size_t k = strcspn(kv, "=");

    for (int i = 0; i < e->n; i++)
        if (strncmp(e->v[i], kv, k) == 0 && e->v[i][k] == '=')
            return true;
    return false;
}

/* Adds a copy of kv unless its name is set already (earlier entries win). */
static bool
env_add(envb *e, const char *kv)
{
    if (env_has(e, kv))
        return true;
    if (e->n + 2 > e->cap) {
        int    cap = e->cap ? e->cap * 2 : 64;
        char **v = realloc(e->v, (size_t)cap * sizeof(*v));

        if (v == NULL)
            return false;
        e->v = v;
        e->cap = cap;
    }
    if ((e->v[e->n] = strdup(kv)) == NULL)
        return false;
    e->v[++e->n] = NULL;
    return true;
}

static void
env_free(envb *e)
{
    for (int i = 0; i < e->n; i++)
        free(e->v[i]);
    free(e->v);
}

/* The child's environment: ours first (so the request cannot fake the
 * fencing token), then the request's, then the agent's own. */
static gp_err
env_build(envb *e, const msg_run_attempt *in, char *detail, size_t dlen)
{
    char   kv[MSG_RUN_ATTEMPT_ENV_ITEM_MAXLEN + MSG_RUN_ATTEMPT_CHECKPOINT_DIR_MAXLEN + 64];
    size_t n = 0;
    bool   ok = true;

    snprintf(kv, sizeof(kv), "GP_JOB_ID=%s", in->job_id);
    ok = ok && env_add(e, kv);
    snprintf(kv, sizeof(kv), "GP_ATTEMPT=%u", in->attempt);
    ok = ok && env_add(e, kv);
    snprintf(kv, sizeof(kv), "GP_CHECKPOINT_DIR=%s", in->checkpoint_dir);
    ok = ok && env_add(e, kv);
    if (GP_HAS(in, MSG_RUN_ATTEMPT__RESUME_MS) || in->resume_ms > 0) {
        snprintf(kv, sizeof(kv), "GP_RESUME_MS=%llu", (unsigned long long)in->resume_ms);
        ok = ok && env_add(e, kv);
    }
    n = (size_t)snprintf(kv, sizeof(kv), "CUDA_VISIBLE_DEVICES=");
    for (uint32_t i = 0; i < in->gpus.n && n < sizeof(kv) - 16; i++)
        n += (size_t)snprintf(kv + n, sizeof(kv) - n, "%s%d", i ? "," : "",
                              ((const int32_t *)in->gpus.v)[i]);
    ok = ok && env_add(e, kv);
    for (uint32_t i = 0; i < in->env.n && ok; i++) {
        const char *s = (const char *)in->env.v + (size_t)i * (MSG_RUN_ATTEMPT_ENV_ITEM_MAXLEN + 1);

        if (strchr(s, '=') == NULL || s[0] == '=') {
            snprintf(detail, dlen, "env[%u] is not NAME=value", i);
            return GP_EINVAL;
        }
        ok = env_add(e, s);
    }
    for (char **p = environ; p != NULL && *p != NULL && ok; p++)
        ok = env_add(e, *p);
    return ok ? GP_EOK : GP_ENOMEM;
}

static int
mkdir_p(const char *dir)
{
    char path[MSG_RUN_ATTEMPT_CHECKPOINT_DIR_MAXLEN + 1];

    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0775) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, 0775) != 0 && errno != EEXIST ? -1 : 0;
}

/* In the child, between fork and exec: async-signal-safe calls only (the
 * agent has cnats threads). */
static void
child_exec(const char *cmd, char **envp, int errfd)
{
    char    *argv[] = {(char *)"sh", (char *)"-c", (char *)cmd, NULL};
    sigset_t none;
    int      e;

    setpgid(0, 0);
    for (int s = 1; s < 32; s++)        /* the agent's dispositions are not the job's */
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
#ifdef CLOSE_RANGE_CLOEXEC
    if (close_range(3, UINT_MAX, CLOSE_RANGE_CLOEXEC) != 0)
#endif
        for (int fd = 3; fd < 4096; fd++)
            if (fd != errfd)
                fcntl(fd, F_SETFD, FD_CLOEXEC);
    execve("/bin/sh", argv, envp);
    e = errno;
    (void)!write(errfd, &e, sizeof(e));
    _exit(127);
}

/* fork + exec; returns the pid, or -1 with errno. */
static pid_t
spawn(const char *cmd, char **envp)
{
    int   p[2], e = 0;
    pid_t pid;

    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    pid = fork();
    if (pid == 0)
        child_exec(cmd, envp, p[1]);
    close(p[1]);
    if (pid > 0) {
        setpgid(pid, pid);             /* both sides: no race with our first kill(-pid) */
        /* EOF at exec (CLOEXEC) or the child's errno: a short, bounded wait. */
        if (read(p[0], &e, sizeof(e)) == (ssize_t)sizeof(e)) {
            waitpid(pid, NULL, 0);
            pid = -1;
            errno = e;
        }
    }
    close(p[0]);
    return pid;
}

/* ---- the lease guard -------------------------------------------------------
 *
 * The agent ends an attempt whose lease ran out from its loop (lease_fire).
 * A hung agent -- its loop stuck, its process stopped -- ends nothing, and
 * its jobs would run on past their lease while the control plane, its
 * fence open, runs their replacements: two attempts of a job at once.  So
 * the lease is also held outside the loop.  Each command has a guard: a
 * child forked beside it that knows only the deadline, on CLOCK_MONOTONIC
 * (the clock of gp_mono_ms, system-wide), and kills the job's process
 * group with SIGKILL when it passes.  The agent moves the deadline on each
 * renewal over a socket pair (one 8-byte datagram: the new deadline; 0:
 * the attempt is over, the guard leaves).  If the agent dies, the guard
 * keeps the last deadline: the job still ends with its lease.  A sim: job
 * has a timer of the simulator's loop in its place, which a paused agent
 * (the simulator's hung node) does not stop. */

static uint64_t
guard_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* In the guard, a fork of the agent (which has cnats threads): async-signal-
 * safe calls only, and no exec. */
static void
guard_main(int fd, pid_t pgid, uint64_t deadline, char *const *kill_argv)
{
    static char *const env[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    struct pollfd p = {.fd = fd, .events = POLLIN};
    sigset_t      none;

    for (int s = 1; s < 32; s++)        /* not the agent's handlers (libev's pipe) */
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int i = 3; i < 4096; i++)      /* the agent's sockets are not the guard's */
        if (i != fd)
            close(i);
    while (deadline != 0) {
        uint64_t now = guard_now_ms(), v;
        ssize_t  k;

        if (now >= deadline) {
            /* a container: the runtime kills its whole cgroup (the `run`
             * child would only take the container's init with it) */
            if (kill_argv != NULL)
                execve(kill_argv[0], kill_argv, env);
            kill(-pgid, SIGKILL);
            break;
        }
        if (poll(&p, 1, deadline - now > 60000 ? 60000 : (int)(deadline - now)) <= 0)
            continue;
        k = recv(p.fd, &v, sizeof(v), 0);
        if (k == (ssize_t)sizeof(v))
            deadline = v;
        else if (k == 0 || (k < 0 && errno != EINTR))
            p.fd = -1;                 /* the agent is gone: the last deadline holds */
    }
    _exit(0);
}

/* 0 if the guard runs; -1 with errno. */
static int
guard_start(attempt *t)
{
    int   sv[2];
    pid_t pid;

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    pid = fork();
    if (pid == 0)
        guard_main(sv[1], t->pid, attempt_deadline(t), t->ctr ? ctr_kill_argv(t->ctr) : NULL);
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return -1;
    }
    t->guard_pid = pid;
    t->guard_fd = sv[0];
    return 0;
}

/* Tells the guard its new deadline (0: leave).  A datagram that cannot be
 * sent leaves the older, earlier deadline: the job ends sooner, never later. */
static void
guard_tell(attempt *t, uint64_t deadline)
{
    if (t->guard_fd < 0)
        return;
    /* EPIPE: the guard left already, its deadline passed (it killed) */
    if (send(t->guard_fd, &deadline, sizeof(deadline), MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
        errno != EPIPE)
        GP_WARN("attempt_guard_unreachable", "job=%s attempt=%u guard=%d errno=%d", t->job_id,
                t->num, (int)t->guard_pid, errno);
}

/* The attempt is over: its guard leaves (the loop reaps it). */
static void
guard_end(attempt *t)
{
    ev_timer_stop(ev_default_loop(0), &t->guard_t);
    if (t->guard_fd < 0)
        return;
    guard_tell(t, 0);
    close(t->guard_fd);
    t->guard_fd = -1;
}

static void
guard_arm(attempt *t)
{
    struct ev_loop *loop = ev_default_loop(0);
    uint64_t        now = t->ops->now_ms(t->ag), dl = attempt_deadline(t);

    ev_timer_stop(loop, &t->guard_t);
    ev_timer_set(&t->guard_t, dl > now ? (dl - now) / 1000.0 : 0, 0);
    ev_timer_start(loop, &t->guard_t);
}

uint64_t
attempt_deadline(const attempt *t)
{
    return t->granted_ms + t->lease_ms;
}

void
attempt_granted(attempt *t, uint64_t granted_ms)
{
    if (t->done || granted_ms <= t->granted_ms)
        return;
    t->granted_ms = granted_ms;
    if (t->sim)
        guard_arm(t);
    else
        guard_tell(t, attempt_deadline(t));
}

static void sim_finish(attempt *t, int exit_code);

/* The sim: job's guard: its lease ran out, whatever the agent does. */
static void
guard_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    attempt *t = GP_CONTAINER_OF(w, attempt, guard_t);

    (void)loop;
    (void)revents;
    if (t->done)
        return;
    if (t->ops->now_ms(t->ag) < attempt_deadline(t)) {     /* early by a tick */
        guard_arm(t);
        return;
    }
    GP_WARN("attempt_guard_killed", "node=%s job=%s attempt=%u since_grant_s=%.1f",
            t->ops->node(t->ag), t->job_id, t->num,
            (t->ops->now_ms(t->ag) - t->granted_ms) / 1000.0);
    if (t->end_event < 0)
        t->end_event = MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED;
    sim_finish(t, 128 + SIGKILL);
}

/* ---- a container attempt ----------------------------------------------------
 *
 * Between RunAttempt and the runtime's `run` the image is pulled
 * (preparing: no pid, nothing counted, no guard).  Then it is a process
 * like a host command, but signalled through the runtime (ctr_signal) and
 * guarded by an exec of the runtime's kill. */

static void child_cb(struct ev_loop *loop, ev_child *w, int revents);

/* It never ran: ended as failed_to_start with why. */
static void
ctr_prep_end(attempt *t, const char *why)
{
    uint64_t now = t->ops->now_ms(t->ag);

    if (t->done)
        return;
    t->preparing = false;
    ev_timer_stop(ev_default_loop(0), &t->kill_timer);
    snprintf(t->reason, sizeof(t->reason), "%s", why);
    /* a pull under way is cancelled (from ctr's own callback it is over:
     * ctr returns at once after calling it) */
    ctr_free(t->ctr);
    t->ctr = NULL;
    if (t->end_event < 0)
        t->end_event = MSG_ATTEMPT_EVENT_EVENT_FAILED_TO_START;
    t->exit_code = 127;
    t->acc_ms = now;
    t->end_ms = now;
    t->done = true;
    t->ops->exited(t->ag, t);
}

static void
ctr_failed_cb(void *arg, const char *why)
{
    ctr_prep_end(arg, why);
}

static int guard_start(attempt *t);

static void
ctr_running_cb(void *arg, pid_t pid)
{
    attempt        *t = arg;
    struct ev_loop *loop = ev_default_loop(0);

    t->pid = pid;
    t->preparing = false;
    t->acc_ms = t->start_ms = t->ops->now_ms(t->ag);    /* the pull is not billed */
    t->start_wall_ms = gp_wall_ms();
    ev_child_init(&t->child, child_cb, t->pid, 0);
    ev_child_start(loop, &t->child);
    if (guard_start(t) != 0) {
        /* without its guard a hung agent could not end it in time */
        GP_WARN("attempt_guard_not_started", "job=%s attempt=%u errno=%d", t->job_id, t->num,
                errno);
        snprintf(t->reason, sizeof(t->reason), "cannot start the lease guard");
        t->end_event = MSG_ATTEMPT_EVENT_EVENT_FAILED_TO_START;
        ctr_signal(t->ctr, SIGKILL);
        return;
    }
    t->ops->started(t->ag, t);
}

/* The job reported a completed checkpoint (container.h: the protocol). */
static void
ctr_reported_cb(void *arg, uint64_t step, const char *id)
{
    attempt *t = arg;

    if (t->done)
        return;
    t->has_step = true;
    t->ckpt_step = step;
    snprintf(t->ckpt_id, sizeof(t->ckpt_id), "%s", id);
    t->ckpt_pending = false;
    t->ops->checkpointed(t->ag, t);
}

static const ctr_cbs attempt_ctr_cbs = {.running = ctr_running_cb, .failed = ctr_failed_cb,
                                        .reported = ctr_reported_cb};

/* Starts the pull; OK: t->ctr set, t preparing. */
static gp_err
ctr_begin(agent *ag, const attempt_ops *ops, struct ev_loop *loop, attempt *t,
          const msg_run_attempt *in, char *detail, size_t dlen)
{
    ctr_node    *n = ops->containers(ag);
    gpu_backend *g = ops->gpu(ag);
    int          minors[GPU_MAX];

    if (n == NULL) {
        snprintf(detail, dlen, "image: this node runs no containers (the simulated fleet runs "
                               "sim: commands)");
        return GP_EINVAL;
    }
    for (uint32_t i = 0; i < in->gpus.n && i < GPU_MAX; i++) {
        gpu_info gi = {0};
        int      idx = ((const int32_t *)in->gpus.v)[i];

        minors[i] = g->ops->info(g, idx, &gi) == GP_EOK ? gi.minor : idx;
    }
    t->preparing = true;
    return ctr_start(n, loop, in, minors, &attempt_ctr_cbs, t, &t->ctr, detail, dlen);
}

static void
child_cb(struct ev_loop *loop, ev_child *w, int revents)
{
    attempt *t = GP_CONTAINER_OF(w, attempt, child);
    int      st = w->rstatus;

    (void)revents;
    uint64_t now = t->ops->now_ms(t->ag), dl = attempt_deadline(t);

    ev_child_stop(loop, w);
    ev_timer_stop(loop, &t->kill_timer);
    ev_stat_stop(loop, &t->ckpt_stat);
    kill(-t->pid, SIGKILL);            /* what the shell left behind goes with it */
    guard_end(t);
    t->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (t->ctr != NULL) {
        bool started;

        ctr_exited(t->ctr, &started, t->reason, sizeof(t->reason));
        if (!started && t->end_event < 0)
            t->end_event = MSG_ATTEMPT_EVENT_EVENT_FAILED_TO_START;
    }
    /* Reaped after its deadline (the loop hung; the guard killed it): it
     * ran until the deadline at most, and that is all that counts. */
    if (now >= dl) {
        if (t->end_event < 0)
            t->end_event = MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED;
        now = dl;
    }
    attempt_account(t, now, t->ops->gpu_power(t->ag));
    t->end_ms = now;
    t->done = true;
    t->ops->exited(t->ag, t);
}

static void
kill_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    attempt *t = GP_CONTAINER_OF(w, attempt, kill_timer);

    (void)loop;
    (void)revents;
    if (t->preparing) {                /* stopped while its image was pulled */
        ctr_prep_end(t, "stopped before it started");
        return;
    }
    GP_WARN("attempt_sigkill", "job=%s attempt=%u pid=%d", t->job_id, t->num, (int)t->pid);
    if (t->sim)
        sim_finish(t, 128 + SIGKILL);
    else if (t->ctr != NULL)
        ctr_signal(t->ctr, SIGKILL);
    else
        kill(-t->pid, SIGKILL);
}

/* ---- sim: behaviours in the loop ------------------------------------------ */

bool
attempt_progress(const attempt *t, uint64_t now_ms, uint64_t *out)
{
    uint64_t until = t->done ? t->end_ms : now_ms, p;

    if (!t->sim)
        return false;
    p = t->resume_ms + (until > t->start_ms ? until - t->start_ms : 0);
    if (t->spec.has_run && p > t->spec.run_ms)
        p = t->spec.run_ms;
    *out = p;
    return true;
}

/* The behaviour ends: what child_cb does for a process. */
static void
sim_finish(attempt *t, int exit_code)
{
    struct ev_loop *loop = ev_default_loop(0);
    uint64_t        now = t->ops->now_ms(t->ag);

    if (t->done)
        return;
    ev_timer_stop(loop, &t->sim_end);
    ev_timer_stop(loop, &t->sim_ckpt);
    ev_timer_stop(loop, &t->sim_sig);
    ev_timer_stop(loop, &t->kill_timer);
    guard_end(t);
    t->exit_code = exit_code;
    t->ckpt_pending = false;
    attempt_account(t, now, t->ops->gpu_power(t->ag));
    t->end_ms = now;
    t->done = true;
    t->ops->exited(t->ag, t);
}

/* When the run ends on its own (run= done, or fail_after=), on the
 * monotonic clock; false: it runs until stopped. */
static bool
sim_end_at(const attempt *t, uint64_t *at, int *code)
{
    bool     have = false;

    if (t->spec.has_run) {
        uint64_t left = t->spec.run_ms > t->resume_ms ? t->spec.run_ms - t->resume_ms : 0;

        *at = t->start_ms + left;
        *code = t->spec.exit_code;
        have = true;
    }
    if (t->spec.has_fail && (!have || t->start_ms + t->spec.fail_ms < *at)) {
        *at = t->start_ms + t->spec.fail_ms;
        *code = 1;
        have = true;
    }
    return have;
}

static void
sim_end_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    attempt *t = GP_CONTAINER_OF(w, attempt, sim_end);
    uint64_t at = 0, now = t->ops->now_ms(t->ag);
    int      code = 0;

    (void)revents;
    if (t->stopping && !t->spec.hang) {              /* SIGTERM: a job that obeys it */
        sim_finish(t, 128 + SIGTERM);
        return;
    }
    if (!sim_end_at(t, &at, &code))
        return;
    if (now < at) {                                  /* a timer early by a tick: wait the rest */
        ev_timer_set(w, (at - now) / 1000.0, 0);
        ev_timer_start(loop, w);
        return;
    }
    sim_finish(t, code);
}

static void
sim_ckpt_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    attempt *t = GP_CONTAINER_OF(w, attempt, sim_ckpt);

    (void)loop;
    (void)revents;
    if (!t->done && !t->stopping)
        t->ops->checkpointed(t->ag, t);
}

static void
sim_sig_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    attempt *t = GP_CONTAINER_OF(w, attempt, sim_sig);

    (void)loop;
    (void)revents;
    if (t->done)
        return;
    t->ckpt_pending = false;
    t->ops->checkpointed(t->ag, t);
}

static bool
sim_backend(agent *ag, const attempt_ops *ops)
{
    gpu_backend *g = ops->gpu(ag);

    return g != NULL && strcmp(g->ops->name, "sim") == 0;
}

/* Checks and parses a "sim:" command; OK: t->spec is set. */
static gp_err
sim_prepare(agent *ag, const attempt_ops *ops, attempt *t, const msg_run_attempt *in,
            char *detail, size_t dlen)
{
    gp_err rc;

    if (!sim_backend(ag, ops)) {
        snprintf(detail, dlen, "command: \"" SIMJOB_PREFIX "\" behaviours run on the simulated "
                 "GPU backend only; this node runs real commands");
        return GP_EINVAL;
    }
    if ((rc = simjob_parse(in->command, &t->spec, detail, dlen)) != GP_EOK)
        return rc;
    if (t->spec.start_fail) {
        snprintf(detail, dlen, "command: the sim: job refuses to start (start_fail)");
        return GP_EINTERNAL;          /* what a command that cannot exec gives */
    }
    t->sim = true;
    t->resume_ms = in->resume_ms;
    t->load = t->spec.load_pct / 100.0;
    return GP_EOK;
}

static void
sim_start(attempt *t, struct ev_loop *loop)
{
    uint64_t at = 0;
    int      code = 0;

    ev_timer_init(&t->sim_end, sim_end_cb, 0, 0);
    ev_timer_init(&t->sim_ckpt, sim_ckpt_cb, 0, 0);
    ev_timer_init(&t->sim_sig, sim_sig_cb, SIMJOB_CKPT_DELAY_MS / 1000.0, 0);
    if (sim_end_at(t, &at, &code)) {
        ev_timer_set(&t->sim_end, at > t->start_ms ? (at - t->start_ms) / 1000.0 : 0, 0);
        ev_timer_start(loop, &t->sim_end);
    }
    if (t->spec.ckpt_ms > 0) {
        ev_timer_set(&t->sim_ckpt, t->spec.ckpt_ms / 1000.0, t->spec.ckpt_ms / 1000.0);
        ev_timer_start(loop, &t->sim_ckpt);
    }
    guard_arm(t);
}

static bool
ts_after(const struct timespec *a, const struct timespec *b, long slack_ns)
{
    long long d = (long long)(a->tv_sec - b->tv_sec) * 1000000000LL + (a->tv_nsec - b->tv_nsec);

    return d >= -slack_ns;
}

static void
stat_cb(struct ev_loop *loop, ev_stat *w, int revents)
{
    attempt *t = GP_CONTAINER_OF(w, attempt, ckpt_stat);

    (void)revents;
    /* File timestamps are coarse (a tick behind the clock): 50 ms slack. */
    if (w->attr.st_nlink == 0 || !ts_after(&w->attr.st_mtim, &t->ckpt_sent, 50000000L))
        return;
    ev_stat_stop(loop, w);
    t->ckpt_pending = false;
    t->ops->checkpointed(t->ag, t);
}

gp_err
attempt_start(agent *ag, const attempt_ops *ops, struct ev_loop *loop, const msg_run_attempt *in,
              int ngpus_node, unsigned lease_ms, attempt **out, char *detail, size_t dlen)
{
    attempt *t;
    envb     env = {0};
    gp_err   rc;

    for (uint32_t i = 0; i < in->gpus.n; i++) {
        int g = ((const int32_t *)in->gpus.v)[i];

        if (g >= ngpus_node) {
            snprintf(detail, dlen, "gpu %d: the node has %d GPUs", g, ngpus_node);
            return GP_EINVAL;
        }
    }
    if ((t = calloc(1, sizeof(*t))) == NULL)
        return GP_ENOMEM;
    t->guard_fd = -1;
    ev_timer_init(&t->guard_t, guard_cb, 0, 0);
    if (in->image[0] != '\0') {         /* a container: pulled first, run later */
        rc = ctr_begin(ag, ops, loop, t, in, detail, dlen);
        if (rc != GP_EOK) {
            free(t);
            return rc;
        }
    } else if (simjob_is(in->command)) {     /* no process, no folder: the loop runs it */
        rc = sim_prepare(ag, ops, t, in, detail, dlen);
        if (rc != GP_EOK) {
            free(t);
            return rc;
        }
    } else if (!ops->host_commands(ag)) {
        snprintf(detail, dlen, "image: needed: this node runs workloads in containers only");
        free(t);
        return GP_EINVAL;
    } else if (in->checkpoint_dir[0] != '\0' && mkdir_p(in->checkpoint_dir) != 0) {
        snprintf(detail, dlen, "checkpoint dir %s: %s", in->checkpoint_dir, strerror(errno));
        free(t);
        return GP_EINTERNAL;
    }
    rc = t->sim || t->ctr ? GP_EOK : env_build(&env, in, detail, dlen);
    if (rc == GP_EOK && !t->sim && !t->ctr && (t->pid = spawn(in->command, env.v)) < 0) {
        snprintf(detail, dlen, "cannot start /bin/sh: %s", strerror(errno));
        rc = GP_EINTERNAL;
    }
    env_free(&env);
    if (rc != GP_EOK) {
        free(t);
        return rc;
    }
    t->ag = ag;
    t->ops = ops;
    snprintf(t->job_id, sizeof(t->job_id), "%s", in->job_id);
    t->num = in->attempt;
    t->ngpus = (int)in->gpus.n;
    for (int i = 0; i < t->ngpus; i++)
        t->gpus[i] = ((const int32_t *)in->gpus.v)[i];
    t->acc_ms = ops->now_ms(ag);
    t->granted_ms = ops->now_ms(ag);
    t->start_ms = t->acc_ms;
    t->start_wall_ms = gp_wall_ms();
    if (!t->sim)
        t->load = 0.92;
    t->lease_ms = lease_ms;
    t->end_event = -1;
    snprintf(t->ckpt_dir, sizeof(t->ckpt_dir), "%s", in->checkpoint_dir);
    snprintf(t->ckpt_file, sizeof(t->ckpt_file), "%s/" CKPT_MARKER, in->checkpoint_dir);
    ev_timer_init(&t->kill_timer, kill_cb, 0, 0);
    ev_stat_init(&t->ckpt_stat, stat_cb, t->ckpt_file, 0.5);
    if (t->sim) {
        sim_start(t, loop);
    } else if (t->ctr != NULL) {
        ;                             /* ctr_running_cb: the child and its guard */
    } else if (guard_start(t) != 0) {
        /* without its guard a hung agent could not end it in time */
        snprintf(detail, dlen, "cannot start the lease guard: %s", strerror(errno));
        kill(-t->pid, SIGKILL);
        waitpid(t->pid, NULL, 0);
        free(t);
        return GP_EINTERNAL;
    } else {
        ev_child_init(&t->child, child_cb, t->pid, 0);
        ev_child_start(loop, &t->child);
    }
    *out = t;
    return GP_EOK;
}

void
attempt_stop(attempt *t, int event, unsigned grace_ms)
{
    struct ev_loop *loop = ev_default_loop(0);

    if (t->done)
        return;
    if (t->end_event < 0)
        t->end_event = event;
    if (t->stopping)
        return;
    t->stopping = true;
    if (t->sim) {
        ev_timer_stop(loop, &t->sim_ckpt);
        if (!t->spec.hang) {           /* it obeys the SIGTERM: gone on the next turn */
            ev_timer_stop(loop, &t->sim_end);
            ev_timer_set(&t->sim_end, 0, 0);
            ev_timer_start(loop, &t->sim_end);
        }
    } else if (t->preparing) {
        grace_ms = 0;                 /* nothing runs yet: the pull is cancelled (kill_cb) */
    } else if (t->ctr != NULL) {
        ctr_signal(t->ctr, SIGTERM);
    } else {
        kill(-t->pid, SIGTERM);
    }
    ev_timer_set(&t->kill_timer, grace_ms / 1000.0, 0);
    ev_timer_start(loop, &t->kill_timer);
}

void
attempt_kill_now(attempt *t)
{
    struct ev_loop *loop = ev_default_loop(0);

    if (t->sim) {
        ev_timer_stop(loop, &t->sim_end);
        ev_timer_stop(loop, &t->sim_ckpt);
        ev_timer_stop(loop, &t->sim_sig);
        if (!t->done)
            t->end_ms = t->ops->now_ms(t->ag);
    } else if (t->preparing) {
        ctr_free(t->ctr);             /* the pull is cancelled */
        t->ctr = NULL;
        t->preparing = false;
    } else {
        if (!t->done && t->ctr != NULL)
            ctr_kill_sync(t->ctr);    /* the agent's last act: the runtime says it is done */
        else if (!t->done)
            kill(-t->pid, SIGKILL);  /* libev's SIGCHLD handler reaps it later */
        ev_child_stop(loop, &t->child);
    }
    ev_timer_stop(loop, &t->kill_timer);
    ev_stat_stop(loop, &t->ckpt_stat);
    guard_end(t);
}

gp_err
attempt_checkpoint(attempt *t)
{
    struct ev_loop *loop = ev_default_loop(0);

    if (t->done || t->stopping || t->preparing)
        return GP_ECONFLICT;
    if (t->sim) {                      /* it writes its checkpoint in a moment */
        if (!t->ckpt_pending) {
            t->ckpt_pending = true;
            ev_timer_start(loop, &t->sim_sig);
        }
        return GP_EOK;
    }
    clock_gettime(CLOCK_REALTIME, &t->ckpt_sent);
    if (t->ctr != NULL)
        ctr_signal(t->ctr, SIGUSR1);  /* every process of it, as the group's signal */
    else if (kill(-t->pid, SIGUSR1) != 0)
        return GP_EINTERNAL;
    if (t->ckpt_dir[0] == '\0') {        /* nowhere to confirm: delivery is the event */
        t->ops->checkpointed(t->ag, t);
        return GP_EOK;
    }
    t->ckpt_pending = true;
    ev_stat_stop(loop, &t->ckpt_stat);
    ev_stat_start(loop, &t->ckpt_stat);
    return GP_EOK;
}

void
attempt_account(attempt *t, uint64_t now_ms, const double *power_w)
{
    uint64_t dt;
    double   w = 0;

    if (t->done || now_ms <= t->acc_ms)
        return;
    if (t->preparing) {               /* its GPUs wait for the pull: not delivered yet */
        t->acc_ms = now_ms;
        return;
    }
    dt = now_ms - t->acc_ms;
    t->acc_ms = now_ms;
    t->gpu_ms += dt * (uint64_t)t->ngpus;
    for (int i = 0; i < t->ngpus; i++)
        w += power_w[t->gpus[i]];
    t->energy_mj += (uint64_t)(w * (double)dt + 0.5);     /* W x ms = mJ */
}

void
attempt_free(attempt *t)
{
    guard_end(t);
    ctr_free(t->ctr);
    free(t);
}
