/* attempt_test.c -- the lease guard (services/agent/attempt.c): an
 * attempt ends at its lease's deadline even when the agent's loop is hung,
 * a renewal moves the deadline, and the guard leaves with its attempt.
 *
 * A hung agent is modelled twice, as in production and in the simulator:
 * a real command while this process does not run its loop at all
 * (nanosleep), and a sim: job while the agent is paused (agent_pause, the
 * simulator's hung node: the loop runs, the agent does nothing). */
#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "../../../services/agent/agent.h"
#include "../../../services/agent/attempt.h"
#include "../../../services/agent/gpu.h"
#include "gp/clock.h"
#include "test.h"

static agent_attempt_end ends[8];
static int               nends;

static void
on_end(void *arg, agent *a, const agent_attempt_end *e)
{
    (void)arg;
    (void)a;
    if (nends < 8)
        ends[nends++] = *e;
}

static agent *
node(gpu_backend *g)
{
    agent_opts o;
    agent     *a;

    memset(&o, 0, sizeof(o));
    snprintf(o.site, sizeof(o.site), "s1");
    snprintf(o.node, sizeof(o.node), "n1");
    o.start_delay_s = 3600;            /* never registers: no bus */
    o.stop_grace_ms = 5000;
    o.on_attempt_end = on_end;
    o.host_commands = true;
    a = agent_new(ev_default_loop(0), NULL, &o, g);
    if (a != NULL)
        agent_set_connected(a, false);
    return a;
}

static void
request(msg_run_attempt *r, int32_t *gpus, const char *job, const char *cmd, unsigned lease_ms)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->job_id, sizeof(r->job_id), "%s", job);
    r->attempt = 1;
    snprintf(r->command, sizeof(r->command), "%s", cmd);
    gpus[0] = 0;
    gpus[1] = 1;
    r->gpus.v = gpus;
    r->gpus.n = 2;
    r->lease_ms = lease_ms;
}

static void
spin_ms(unsigned ms)
{
    uint64_t end = gp_mono_ms() + ms;

    while (gp_mono_ms() < end)
        ev_run(ev_default_loop(0), EVRUN_ONCE | EVRUN_NOWAIT);
}

/* The loop does not run: this process is "hung". */
static void
hang_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The state of pid without reaping it: 0 still running, else the signal
 * that ended it (or 1000 + its exit code). */
static int
ended_by(pid_t pid)
{
    siginfo_t si;

    memset(&si, 0, sizeof(si));
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
        return 0;
    return si.si_code == CLD_EXITED ? 1000 + si.si_status : si.si_status;
}

/* A command, its agent hung past the deadline: the guard kills its group
 * at the deadline; once the loop runs again the attempt ends
 * lease_expired, counted up to the deadline only. */
static void
test_process_hung_agent(void)
{
    gpu_backend    *g = gpu_sim_new("L4", 2, 1);
    agent          *a = node(g);
    msg_run_attempt r;
    msg_attempt_ack ack;
    int32_t         gpus[2];
    char            d[256] = "";
    uint64_t        t0 = gp_mono_ms();

    nends = 0;
    request(&r, gpus, "j1", "sleep 30", 600);
    T_EQ_INT(agent_cmd_run(a, &r, &ack, d, sizeof(d)), GP_EOK);
    T_OKM(ack.pid > 0, "a command runs as a process (pid %d)", (int)ack.pid);
    hang_ms(400);
    T_EQ_INT(ended_by(ack.pid), 0);
    hang_ms(600);                      /* 1 s in: the deadline (600 ms) has passed */
    T_OKM(ended_by(ack.pid) == SIGKILL,
          "the loop never ran: the guard killed the job at its deadline (%d)", ended_by(ack.pid));
    spin_ms(300);                      /* the agent wakes up and reaps it */
    T_EQ_INT(nends, 1);
    T_OKM(nends == 1 && ends[0].event == MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED,
          "it ends lease_expired (event %d), not as a failure", nends ? ends[0].event : -2);
    T_OKM(nends == 1 && ends[0].end_mono_ms - ends[0].start_mono_ms <= 600 &&
          ends[0].agent_gpu_ms <= 1200,
          "counted up to the deadline only: %llu ms, gpu_ms %llu, though reaped %llu ms after "
          "its start", nends ? (unsigned long long)(ends[0].end_mono_ms - ends[0].start_mono_ms) : 0,
          nends ? (unsigned long long)ends[0].agent_gpu_ms : 0,
          (unsigned long long)(gp_mono_ms() - t0));
    agent_free(a);
    gpu_free(g);
}

/* A renewal moves the guard's deadline; the guard leaves with the attempt
 * and the loop reaps it. */
static void
test_process_renewed(void)
{
    gpu_backend    *g = gpu_sim_new("L4", 2, 1);
    agent          *a = node(g);
    msg_run_attempt r;
    int32_t         gpus[2];
    char            d[256] = "";
    attempt        *t = NULL;
    pid_t           pid, gpid;

    request(&r, gpus, "j2", "sleep 30", 600);
    T_EQ_INT(attempt_start(a, &agent_attempt_ops, ev_default_loop(0), &r, 2, 600, &t, d,
                           sizeof(d)), GP_EOK);
    if (t == NULL)
        return;
    pid = t->pid;
    gpid = t->guard_pid;
    T_OKM(gpid > 0 && gpid != pid && t->guard_fd >= 0, "a guard beside the job (%d)", (int)gpid);
    hang_ms(400);
    attempt_granted(t, gp_mono_ms());  /* renewed: the deadline is now 600 ms away */
    T_OKM(attempt_deadline(t) >= gp_mono_ms() + 550, "the deadline moved with the renewal");
    hang_ms(400);                      /* 800 ms: past the first deadline, not the second */
    T_OKM(ended_by(pid) == 0, "renewed at 400 ms: still running at 800 ms");
    hang_ms(400);                      /* 1.2 s: past the second (1 s) */
    T_OKM(ended_by(pid) == SIGKILL, "killed at the moved deadline (%d)", ended_by(pid));
    attempt_kill_now(t);               /* the agent lets go: the guard leaves */
    waitpid(pid, NULL, 0);
    spin_ms(300);
    T_OKM(kill(gpid, 0) != 0 && errno == ESRCH, "the guard left and was reaped");
    attempt_free(t);
    agent_free(a);
    gpu_free(g);
}

/* A job that ends on its own: its guard leaves at once (no kill at the
 * old deadline of a process group that may be reused). */
static void
test_process_ends(void)
{
    gpu_backend    *g = gpu_sim_new("L4", 2, 1);
    agent          *a = node(g);
    msg_run_attempt r;
    int32_t         gpus[2];
    char            d[256] = "";
    attempt        *t = NULL;
    pid_t           gpid;

    request(&r, gpus, "j3", "exit 3", 60000);
    T_EQ_INT(attempt_start(a, &agent_attempt_ops, ev_default_loop(0), &r, 2, 60000, &t, d,
                           sizeof(d)), GP_EOK);
    if (t == NULL)
        return;
    gpid = t->guard_pid;
    for (int i = 0; i < 100 && !t->done; i++)
        spin_ms(20);
    T_OKM(t->done && t->exit_code == 3 && t->end_event < 0, "exit 3: ended on its own");
    spin_ms(200);
    T_OKM(t->guard_fd < 0 && kill(gpid, 0) != 0 && errno == ESRCH,
          "its guard left with it, 60 s before its deadline");
    attempt_free(t);
    agent_free(a);
    gpu_free(g);
}

/* A sim: job on a paused agent (the simulator's hung node): its guard, a
 * timer of the loop, ends it at the deadline; and the simulator's ground
 * truth hears the end then, not when the agent resumes. */
static void
test_sim_paused_agent(void)
{
    gpu_backend    *g = gpu_sim_new("L4", 2, 1);
    agent          *a = node(g);
    msg_run_attempt r;
    msg_attempt_ack ack;
    int32_t         gpus[2];
    char            d[256] = "";

    nends = 0;
    request(&r, gpus, "j4", "sim:", 500);
    T_EQ_INT(agent_cmd_run(a, &r, &ack, d, sizeof(d)), GP_EOK);
    agent_pause(a, true);
    spin_ms(300);
    T_EQ_INT(nends, 0);
    spin_ms(500);
    T_OKM(nends == 1 && ends[0].event == MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED &&
          ends[0].end_mono_ms - ends[0].start_mono_ms >= 500 &&
          ends[0].end_mono_ms - ends[0].start_mono_ms < 700,
          "paused: ended lease_expired at its deadline (%d ends, after %llu ms)", nends,
          nends ? (unsigned long long)(ends[0].end_mono_ms - ends[0].start_mono_ms) : 0);
    agent_pause(a, false);
    agent_free(a);
    gpu_free(g);
}

int
main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_process_hung_agent();
    test_process_renewed();
    test_process_ends();
    test_sim_paused_agent();
    return T_DONE();
}
