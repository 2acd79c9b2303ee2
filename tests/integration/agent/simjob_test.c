/* simjob_test.c -- "sim:" behaviours in gridpool-agent on the
 * simulated GPU backend, with this test as the control plane: run/exit,
 * fail_after, ckpt with progress_ms, resume_ms, a checkpoint signal,
 * stop (SIGTERM semantics) and hang (the grace kill), start_fail, a bad
 * command, lease expiry, load and power in heartbeats, and no child
 * process forked for any of it; a real command still forks and finds
 * GP_RESUME_MS.  Real time: about 20 s. */
#include <dirent.h>

#include "msg_gen.h"
#include "test_beat.h"
#include "test_stack.h"

#define SITE     "t1"
#define NODE     "n1"
#define HB_MS    300
#define LEASE_MS 4000
#define GRACE_MS 1000

typedef struct ev_rec {
    char     job[64];
    int      event;
    int      exit_code;
    uint64_t gpu_ms, energy_mj, progress_ms;
    bool     has_progress;
    double   at;
} ev_rec;

static struct ev_loop *loop;
static gp_bus         *bus;
static pid_t           agent_pid;
static volatile int    registered, answering = 1;
static msg_heartbeat   last_hb;
static int             nhb;
static ev_rec          events[128];
static int             nevents;
static int             max_children;

static void
answer(const gp_bus_msg *m, const gp_arr *attempts)
{
    msg_node_registered r;
    gp_buf              b;

    memset(&r, 0, sizeof(r));
    r.heartbeat_ms = HB_MS;
    r.lease_ms = LEASE_MS;
    r.keep = *attempts;
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_msg_encode(&msg_node_registered_desc, &r, &b);
    gp_bus_pub(bus, m->reply, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

static void
on_register(void *arg, const gp_bus_msg *m)
{
    msg_node_register r;

    (void)arg;
    memset(&r, 0, sizeof(r));
    if (m->reply == NULL || gp_msg_decode(&msg_node_register_desc, m->data, m->len, &r, NULL, 0))
        return;
    if (answering) {
        answer(m, &r.attempts);
        registered++;
    }
    gp_msg_clear(&msg_node_register_desc, &r);
}

static void on_hb(void *arg, const gp_bus_msg *m);

static void
on_lease(void *arg, const gp_bus_msg *m)
{
    msg_lease_renew l;

    (void)arg;
    memset(&l, 0, sizeof(l));
    if (m->reply == NULL || gp_msg_decode(&msg_lease_renew_desc, m->data, m->len, &l, NULL, 0))
        return;
    if (answering)
        answer(m, &l.attempts);
    gp_msg_clear(&msg_lease_renew_desc, &l);
    tl_lease_beat(m, on_hb, NULL);     /* a busy node's beat rides in its renewal */
}

static void
on_hb(void *arg, const gp_bus_msg *m)
{
    (void)arg;
    gp_msg_clear(&msg_heartbeat_desc, &last_hb);
    if (gp_msg_decode(&msg_heartbeat_desc, m->data, m->len, &last_hb, NULL, 0) == GP_EOK)
        nhb++;
}

/* Acks an attempt event as the stream ATTEMPTS does (a PubAck), so the
 * agent's outbox moves on instead of sending it again. */
static void
ack_event(const gp_bus_msg *m)
{
    static int seq;
    char       ack[64];
    int        n = snprintf(ack, sizeof(ack), "{\"stream\":\"ATTEMPTS\",\"seq\":%d}", ++seq);

    if (m->reply != NULL)
        gp_bus_pub(bus, m->reply, NULL, ack, (size_t)n);
}

static void
on_attempt(void *arg, const gp_bus_msg *m)
{
    msg_attempt_event e;
    ev_rec           *r = &events[nevents];

    (void)arg;
    memset(&e, 0, sizeof(e));
    /* a control plane that does not answer neither stores nor acks: the
     * agent keeps the event and sends it again */
    if (!answering || nevents == 128 ||
        gp_msg_decode(&msg_attempt_event_desc, m->data, m->len, &e, NULL, 0))
        return;
    ack_event(m);
    snprintf(r->job, sizeof(r->job), "%s", e.job_id);
    r->event = e.event;
    r->exit_code = e.exit_code;
    r->gpu_ms = e.gpu_ms;
    r->energy_mj = e.energy_mj;
    r->progress_ms = e.progress_ms;
    r->has_progress = GP_HAS(&e, MSG_ATTEMPT_EVENT__PROGRESS_MS);
    r->at = tl_now();
    nevents++;
}

/* Processes whose parent is the agent. */
static int
children_of(pid_t parent)
{
    DIR           *d = opendir("/proc");
    struct dirent *de;
    int            n = 0;

    while (d != NULL && (de = readdir(d)) != NULL) {
        char  path[300], buf[512];
        FILE *f;
        char *p;
        int   ppid = 0;

        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        if (fgets(buf, sizeof(buf), f) != NULL && (p = strrchr(buf, ')')) != NULL &&
            sscanf(p + 2, "%*c %d", &ppid) == 1 && ppid == parent)
            n++;
        fclose(f);
    }
    if (d != NULL)
        closedir(d);
    return n;
}

/* Spins the loop, watching the agent's children. */
static void
spin(double s)
{
    double end = tl_now() + s;

    while (tl_now() < end) {
        int c;

        tl_spin(loop, 0.05);
        if ((c = children_of(agent_pid)) > max_children)
            max_children = c;
    }
}

static const ev_rec *
find_event(const char *job, int event, int nth)
{
    for (int i = 0; i < nevents; i++)
        if (strcmp(events[i].job, job) == 0 && events[i].event == event && nth-- == 0)
            return &events[i];
    return NULL;
}

static const ev_rec *
wait_event(const char *job, int event, double timeout_s)
{
    double end = tl_now() + timeout_s;

    while (find_event(job, event, 0) == NULL && tl_now() < end)
        spin(0.02);
    return find_event(job, event, 0);
}

static gp_err
run_cmd(const char *job, const char *cmd, int g0, int ng, uint64_t resume_ms, char *detail)
{
    msg_run_attempt r;
    msg_attempt_ack ack;
    int32_t         gpus[2] = {g0, g0 + 1};

    memset(&r, 0, sizeof(r));
    snprintf(r.job_id, sizeof(r.job_id), "%s", job);
    r.attempt = 1;
    snprintf(r.command, sizeof(r.command), "%s", cmd);
    r.gpus.v = gpus;
    r.gpus.n = (uint32_t)ng;
    if (resume_ms > 0) {
        r.resume_ms = resume_ms;
        GP_SET_HAS(&r, MSG_RUN_ATTEMPT__RESUME_MS);
    }
    detail[0] = '\0';
    return tl_call(loop, bus, "gp.node." SITE "." NODE ".cmd.run", &msg_run_attempt_desc, &r,
                   &msg_attempt_ack_desc, &ack, 3000, detail, GP_ERRBUF_LEN);
}

static gp_err
signal_cmd(const char *job, int action)
{
    msg_attempt_signal s;
    msg_attempt_ack    ack;
    char               detail[GP_ERRBUF_LEN];

    memset(&s, 0, sizeof(s));
    snprintf(s.job_id, sizeof(s.job_id), "%s", job);
    s.attempt = 1;
    s.action = action;
    return tl_call(loop, bus, "gp.node." SITE "." NODE ".cmd.signal", &msg_attempt_signal_desc, &s,
                   &msg_attempt_ack_desc, &ack, 3000, detail, sizeof(detail));
}

static const msg_attempt_usage *
usage_of(const char *job)
{
    const msg_attempt_usage *u = last_hb.attempts.v;

    for (uint32_t i = 0; i < last_hb.attempts.n; i++)
        if (strcmp(u[i].job_id, job) == 0)
            return &u[i];
    return NULL;
}

#define NEAR(x, want, tol) ((double)(x) >= (want) * (1 - (tol)) && (double)(x) <= (want) * (1 + (tol)))

/* Several behaviours side by side: their ends, their timing and counters. */
static void
test_runs(void)
{
    char          d[GP_ERRBUF_LEN];
    const ev_rec *e, *s, *c0, *c1;
    double        t0 = tl_now();

    T_EQ_INT(run_cmd("run2", "sim:run=2s exit=0", 0, 2, 0, d), GP_EOK);
    T_EQ_INT(run_cmd("fail", "sim:fail_after=1s run=10s", 0, 1, 0, d), GP_EOK);
    T_EQ_INT(run_cmd("ckpt", "sim:run=2500ms ckpt=1s", 1, 1, 0, d), GP_EOK);
    T_EQ_INT(run_cmd("resume", "sim:run=3s", 0, 1, 2000, d), GP_EOK);
    T_EQ_INT(run_cmd("exit7", "sim:run=500ms exit=7", 1, 1, 0, d), GP_EOK);
    s = wait_event("run2", MSG_ATTEMPT_EVENT_EVENT_STARTED, 2);
    T_OKM(s != NULL, "run2 started");
    e = wait_event("run2", MSG_ATTEMPT_EVENT_EVENT_EXITED, 5);
    T_OKM(e != NULL && e->exit_code == 0, "run=2s exit=0 ends exited 0 (%d)", e ? e->exit_code : -1);
    T_OKM(e && s && e->at - s->at > 1.8 && e->at - s->at < 2.6, "after %.2f s",
          e && s ? e->at - s->at : -1);
    T_OKM(e && NEAR(e->gpu_ms, 4000, 0.1), "gpu_ms %llu ~= 2000 x 2 GPUs",
          (unsigned long long)(e ? e->gpu_ms : 0));
    T_OKM(e && e->energy_mj > 0, "energy_mj %llu", (unsigned long long)(e ? e->energy_mj : 0));
    T_OKM(e && e->has_progress && e->progress_ms == 2000, "its end carries progress_ms 2000 (%llu)",
          (unsigned long long)(e ? e->progress_ms : 0));
    e = find_event("fail", MSG_ATTEMPT_EVENT_EVENT_EXITED, 0);
    T_OKM(e && e->exit_code == 1 && e->at - t0 > 0.8 && e->at - t0 < 1.8,
          "fail_after=1s ends exited 1 (%d after %.2f s)", e ? e->exit_code : -1,
          e ? e->at - t0 : -1);
    e = find_event("resume", MSG_ATTEMPT_EVENT_EVENT_EXITED, 0);
    T_OKM(e && e->exit_code == 0 && e->at - t0 < 1.8 && e->progress_ms == 3000,
          "run=3s resumed at 2000 ms runs about 1 s (%.2f s, progress %llu)", e ? e->at - t0 : -1,
          (unsigned long long)(e ? e->progress_ms : 0));
    e = find_event("exit7", MSG_ATTEMPT_EVENT_EVENT_EXITED, 0);
    T_OKM(e && e->exit_code == 7, "exit=7 ends exited 7 (%d)", e ? e->exit_code : -1);
    e = wait_event("ckpt", MSG_ATTEMPT_EVENT_EVENT_EXITED, 3);
    c0 = find_event("ckpt", MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED, 0);
    c1 = find_event("ckpt", MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED, 1);
    T_OKM(c0 && c1 && find_event("ckpt", MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED, 2) == NULL,
          "ckpt=1s over 2.5 s: two checkpointed events");
    T_OKM(c0 && c1 && c0->has_progress && NEAR(c0->progress_ms, 1000, 0.15) &&
          NEAR(c1->progress_ms, 2000, 0.1), "with progress_ms (%llu, %llu)",
          (unsigned long long)(c0 ? c0->progress_ms : 0), (unsigned long long)(c1 ? c1->progress_ms : 0));
    T_OKM(e && e->exit_code == 0 && e->progress_ms == 2500, "then exited at progress 2500");
}

/* load= drives the GPU's utilization and power; idle GPUs stay idle; a
 * checkpoint signal is answered; a stop ends it at once (SIGTERM). */
static void
test_load_signal_stop(void)
{
    char                     d[GP_ERRBUF_LEN];
    const msg_gpu_telemetry *g;
    const msg_attempt_usage *u;
    const ev_rec            *e;
    double                   t;

    T_EQ_INT(run_cmd("load40", "sim:load=40", 0, 1, 0, d), GP_EOK);
    spin(HB_MS * 4 / 1000.0);
    g = last_hb.gpus.v;
    /* L40S: 35 W idle, 350 W at full load. */
    T_OKM(last_hb.gpus.n == 2 && g[0].util_pct > 33 && g[0].util_pct < 47,
          "heartbeat: GPU 0 at %.0f%% (load=40)", last_hb.gpus.n ? g[0].util_pct : -1);
    T_OKM(last_hb.gpus.n == 2 && NEAR(g[0].power_w, 35 + 315 * 0.4, 0.05),
          "GPU 0 draws %.0f W (~161 W)", last_hb.gpus.n ? g[0].power_w : -1);
    T_OKM(last_hb.gpus.n == 2 && g[1].util_pct == 0 && g[1].power_w < 40,
          "GPU 1 idle: %.0f%% %.0f W", last_hb.gpus.n ? g[1].util_pct : -1,
          last_hb.gpus.n ? g[1].power_w : -1);
    u = usage_of("load40");
    T_OKM(u && u->state == MSG_ATTEMPT_USAGE_STATE_RUNNING && u->gpu_ms > 0 && u->energy_mj > 0,
          "its usage rides in the heartbeat (gpu_ms %llu)", (unsigned long long)(u ? u->gpu_ms : 0));
    T_EQ_INT(signal_cmd("load40", MSG_ATTEMPT_SIGNAL_ACTION_CHECKPOINT), GP_EOK);
    e = wait_event("load40", MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED, 2);
    T_OKM(e && e->has_progress && e->progress_ms > 1000, "a checkpoint signal: checkpointed, "
          "progress_ms %llu", (unsigned long long)(e ? e->progress_ms : 0));
    t = tl_now();
    T_EQ_INT(signal_cmd("load40", MSG_ATTEMPT_SIGNAL_ACTION_STOP), GP_EOK);
    e = wait_event("load40", MSG_ATTEMPT_EVENT_EVENT_KILLED, 2);
    T_OKM(e && e->exit_code == 128 + SIGTERM && e->at - t < 0.5,
          "stop: killed at once with 143 (%d after %.2f s)", e ? e->exit_code : -1, e ? e->at - t : -1);
    T_EQ_INT(signal_cmd("load40", MSG_ATTEMPT_SIGNAL_ACTION_STOP), GP_ENOTFOUND);
}

static void
test_hang_startfail_bad(void)
{
    char          d[GP_ERRBUF_LEN];
    const ev_rec *e;
    double        t;

    T_EQ_INT(run_cmd("hang", "sim:hang", 0, 2, 0, d), GP_EOK);
    spin(0.3);
    t = tl_now();
    T_EQ_INT(signal_cmd("hang", MSG_ATTEMPT_SIGNAL_ACTION_STOP), GP_EOK);
    e = wait_event("hang", MSG_ATTEMPT_EVENT_EVENT_KILLED, GRACE_MS / 1000.0 + 2);
    T_OKM(e && e->exit_code == 128 + SIGKILL && e->at - t > GRACE_MS / 1000.0 * 0.9,
          "hang ignores the stop: killed by the grace kill (%d after %.2f s)",
          e ? e->exit_code : -1, e ? e->at - t : -1);
    T_OKM(run_cmd("sfail", "sim:start_fail", 0, 1, 0, d) != GP_EOK, "start_fail: RunAttempt fails (%s)", d);
    T_OKM(wait_event("sfail", MSG_ATTEMPT_EVENT_EVENT_FAILED_TO_START, 2) != NULL,
          "start_fail: failed_to_start");
    T_EQ_INT(run_cmd("bad", "sim:run=300", 0, 1, 0, d), GP_EINVAL);
    T_OKM(strstr(d, "command") != NULL, "a bad sim: command is refused naming command: %s", d);
    T_EQ_INT(run_cmd("bad2", "sim:run=1s bogus=1", 0, 1, 0, d), GP_EINVAL);
}

/* Cut off from the control plane, a sim job is killed when its lease ends
 * and lease_expired is reported once the control plane answers again. */
static void
test_lease(void)
{
    char          d[GP_ERRBUF_LEN];
    const ev_rec *e;

    T_EQ_INT(run_cmd("leased", "sim:run=60s", 0, 1, 0, d), GP_EOK);
    spin(0.5);
    answering = 0;
    spin(LEASE_MS / 1000.0 + 1.0);
    T_OKM(find_event("leased", MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED, 0) == NULL,
          "lease_expired held while cut off");
    answering = 1;
    e = wait_event("leased", MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED, LEASE_MS / 1000.0 + 2);
    /* killed at the deadline, with no grace: its guard or the agent */
    T_OKM(e && (e->exit_code == 128 + SIGKILL || e->exit_code == 128 + SIGTERM) &&
          e->gpu_ms > LEASE_MS / 2,
          "the lease lapsed: lease_expired (%d, gpu_ms %llu)", e ? e->exit_code : -1,
          (unsigned long long)(e ? e->gpu_ms : 0));
}

/* The real path is unchanged on the simulated backend (a real command
 * forks), and a resumed real command finds GP_RESUME_MS. */
static void
test_real_resume(void)
{
    char          d[GP_ERRBUF_LEN], path[300], cmd[400], line[64] = "";
    const ev_rec *e;
    FILE         *f;

    snprintf(path, sizeof(path), "%s/resume.txt", tl_env("GP_STACK_DIR"));
    snprintf(cmd, sizeof(cmd), "echo \"$GP_RESUME_MS\" >%s", path);
    T_EQ_INT(run_cmd("real", cmd, 0, 1, 123456, d), GP_EOK);
    e = wait_event("real", MSG_ATTEMPT_EVENT_EVENT_EXITED, 3);
    if ((f = fopen(path, "r")) != NULL) {
        (void)!fgets(line, sizeof(line), f);
        fclose(f);
    }
    T_OKM(e && e->exit_code == 0 && strcmp(line, "123456\n") == 0 && !e->has_progress,
          "a real command resumed: GP_RESUME_MS=%.*s, no progress_ms", (int)strcspn(line, "\n"), line);
}

int
main(void)
{
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "agent-simjob-test"};
    gp_bus_sub *subs[4];
    char        bin[512], port[32];
    char        a[15][32] = {"--site", SITE, "--node", NODE, "--gpu-backend", "sim", "--sim-gpus",
                             "2", "--sim-model", "L40S", "--stop-grace-ms", "1000",
                             "--host-commands=true", "--http-port", ""};
    char       *argv[17];

    loop = ev_loop_new(0);
    if (gp_bus_new(loop, &bo, NULL, NULL, &bus) != GP_EOK)
        return printf("not ok - bus\n"), 1;
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".register", NULL, on_register, NULL, &subs[0]);
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".lease", NULL, on_lease, NULL, &subs[1]);
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".hb", NULL, on_hb, NULL, &subs[2]);
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".attempt", NULL, on_attempt, NULL, &subs[3]);
    tl_spin(loop, 0.3);
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-agent", tl_env("GP_BUILD"));
    snprintf(port, sizeof(port), "%d", tl_free_port());
    argv[0] = bin;
    for (int i = 0; i < 14; i++)
        argv[i + 1] = a[i];
    argv[15] = port;
    argv[16] = NULL;
    agent_pid = tl_spawn(argv);
    T_OKM(tl_run_until(loop, &registered, 10), "agent registers");
    spin(HB_MS * 2 / 1000.0);
    test_runs();
    test_load_signal_stop();
    test_hang_startfail_bad();
    test_lease();
    T_OKM(max_children == 0, "no child process forked for sim: commands (at most %d seen)",
          max_children);
    test_real_resume();
    kill(agent_pid, SIGTERM);
    T_OKM(tl_wait_exit(agent_pid, 10) == 0, "agent stops on SIGTERM with status 0");
    for (int i = 0; i < 4; i++)
        gp_bus_sub_free(subs[i]);
    gp_msg_clear(&msg_heartbeat_desc, &last_hb);
    gp_bus_free(bus);
    ev_loop_destroy(loop);
    gp_lib_close();
    return T_DONE();
}
