/* agent_test.c -- gridpool-agent against a real NATS, with this test as
 * its control plane (no registry): registration, heartbeats, attempts and
 * their counters, fencing, lease expiry while cut off, kill lists,
 * checkpoints; replies in the node's own subtree; ghost nodes (a lease
 * NOTFOUND re-registers, a registration DENIED stops the agent, and
 * gridpool-sim takes a refused node down).  Real time: about 40 s. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "msg_gen.h"
#include "test_stack.h"

#define SITE     "t1"
#define NODE     "n1"
#define HB_MS    400
#define LEASE_MS 6000    /* long enough that a loaded 2-core machine under ASan keeps the renewals on time */

typedef struct ev_rec {
    char     job[64];
    uint32_t attempt;
    int      event;
    int      exit_code;
    uint64_t gpu_ms;
    double   at;
} ev_rec;

static struct ev_loop   *loop;
static gp_bus           *bus;
static volatile int      registered, answering = 1;
static msg_node_register reg;
static msg_heartbeat     last_hb;
static int               nhb;
static double            hb_at[256];
static ev_rec            events[64];
static int               nevents;
static double            last_grant_at;
static msg_attempt_ref   kill_list[4];
static int               nkill;
static int               lease_seen_attempts;
static char              reg_reply[GP_MAX_SUBJECT + 1];   /* reply subject of the last register */
static gp_err            lease_err, register_err;        /* answer with this error instead */
static int               nregister_req;
/* one message per node per interval: renewals with a beat, renewals
 * alone, beats alone */
static int               nlease_beat, nlease_alone, nhb_alone;

/* The registry's error reply (ghost nodes: NOTFOUND, DENIED). */
static void
answer_error(const gp_bus_msg *m, gp_err code, const char *message)
{
    gp_buf b;

    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_msg_encode_error(code, message, &b);
    gp_bus_pub(bus, m->reply, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

static double            lease_delay;          /* s: renewals answered this late */
static double            last_req_at;          /* when the last answered renewal arrived */
static ev_timer          delay_t;
static gp_buf            delayed;              /* the held answer */
static char              delayed_to[GP_MAX_SUBJECT + 1];

static void
delay_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l, (void)w, (void)revents;
    gp_bus_pub(bus, delayed_to, NULL, delayed.p, delayed.n);
    gp_buf_fini(&delayed);
    last_grant_at = tl_now();
}

static void
answer(const gp_bus_msg *m, const gp_arr *attempts)
{
    msg_node_registered r;
    gp_buf              b;

    memset(&r, 0, sizeof(r));
    r.heartbeat_ms = HB_MS;
    r.lease_ms = LEASE_MS;
    r.keep = *attempts;                 /* grant all it runs, like the registry today */
    r.kill.v = kill_list;
    r.kill.n = (uint32_t)nkill;
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_msg_encode(&msg_node_registered_desc, &r, &b);
    nkill = 0;
    last_req_at = tl_now();
    if (lease_delay > 0 && !ev_is_active(&delay_t)) {
        delayed = b;                    /* published by delay_cb */
        snprintf(delayed_to, sizeof(delayed_to), "%s", m->reply);
        ev_timer_init(&delay_t, delay_cb, lease_delay, 0);
        ev_timer_start(loop, &delay_t);
        return;
    }
    gp_bus_pub(bus, m->reply, NULL, b.p, b.n);
    gp_buf_fini(&b);
    last_grant_at = tl_now();
}

static void
on_register(void *arg, const gp_bus_msg *m)
{
    (void)arg;
    gp_msg_clear(&msg_node_register_desc, &reg);
    if (gp_msg_decode(&msg_node_register_desc, m->data, m->len, &reg, NULL, 0) != GP_EOK)
        return;
    nregister_req++;
    snprintf(reg_reply, sizeof(reg_reply), "%s", m->reply ? m->reply : "");
    if (answering && m->reply != NULL && register_err != GP_EOK) {
        answer_error(m, register_err, "node deleted by an operator");
        return;
    }
    if (answering && m->reply != NULL) {
        answer(m, &reg.attempts);
        registered++;
    }
}

/* A beat, alone or in a renewal: kept in last_hb (a copy of its own). */
static void
took_beat(const msg_heartbeat *hb)
{
    gp_buf b;

    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_msg_clear(&msg_heartbeat_desc, &last_hb);
    if (gp_msg_encode(&msg_heartbeat_desc, hb, &b) == GP_EOK &&
        gp_msg_decode(&msg_heartbeat_desc, b.p, b.n, &last_hb, NULL, 0) == GP_EOK)
        hb_at[nhb++ % 256] = tl_now();
    gp_buf_fini(&b);
}

static void
on_lease(void *arg, const gp_bus_msg *m)
{
    msg_lease_renew l;

    (void)arg;
    if (gp_msg_decode(&msg_lease_renew_desc, m->data, m->len, &l, NULL, 0) != GP_EOK)
        return;
    lease_seen_attempts = (int)l.attempts.n;
    if (GP_HAS(&l, MSG_LEASE_RENEW__BEAT)) {
        nlease_beat++;
        took_beat(&l.beat);
    } else {
        nlease_alone++;
    }
    if (answering && m->reply != NULL && lease_err != GP_EOK)
        answer_error(m, lease_err, "no such node: register again");
    else if (answering && m->reply != NULL)
        answer(m, &l.attempts);
    gp_msg_clear(&msg_lease_renew_desc, &l);
}

static void
on_hb(void *arg, const gp_bus_msg *m)
{
    (void)arg;
    nhb_alone++;
    gp_msg_clear(&msg_heartbeat_desc, &last_hb);
    if (gp_msg_decode(&msg_heartbeat_desc, m->data, m->len, &last_hb, NULL, 0) == GP_EOK)
        hb_at[nhb++ % 256] = tl_now();
}

/* What the registry sends for a beat of a node it does not hold. */
static void
register_again(const char *site, const char *node)
{
    msg_register_again m = {0};
    char               subj[GP_MAX_SUBJECT + 1];
    gp_buf             b;

    snprintf(m.reason, sizeof(m.reason), "the test forgot %s", node);
    snprintf(subj, sizeof(subj), "gp.node.%s.%s.cmd.register", site, node);
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_msg_encode(&msg_register_again_desc, &m, &b);
    gp_bus_pub(bus, subj, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

static void
on_attempt(void *arg, const gp_bus_msg *m)
{
    msg_attempt_event e;

    (void)arg;
    /* a control plane that does not answer neither stores nor acks: the
     * agent keeps the event in its outbox and sends it again */
    if (!answering || gp_msg_decode(&msg_attempt_event_desc, m->data, m->len, &e, NULL, 0) != GP_EOK ||
        nevents == 64)
        return;
    /* acked as the stream ATTEMPTS does (a PubAck) */
    if (m->reply != NULL) {
        char ack[64];
        int  n = snprintf(ack, sizeof(ack), "{\"stream\":\"ATTEMPTS\",\"seq\":%d}", nevents + 1);

        gp_bus_pub(bus, m->reply, NULL, ack, (size_t)n);
    }
    snprintf(events[nevents].job, sizeof(events[0].job), "%s", e.job_id);
    events[nevents].attempt = e.attempt;
    events[nevents].event = e.event;
    events[nevents].exit_code = e.exit_code;
    events[nevents].gpu_ms = e.gpu_ms;
    events[nevents].at = tl_now();
    nevents++;
}

static const ev_rec *
find_event(const char *job, int event)
{
    for (int i = 0; i < nevents; i++)
        if (strcmp(events[i].job, job) == 0 && events[i].event == event)
            return &events[i];
    return NULL;
}

/* Runs the loop until the event shows up or timeout_s passes. */
static const ev_rec *
wait_event(const char *job, int event, double timeout_s)
{
    double end = tl_now() + timeout_s;

    while (find_event(job, event) == NULL && tl_now() < end)
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT), usleep(1000);
    return find_event(job, event);
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

static gp_err
run_cmd(const char *job, uint32_t attempt, const char *cmd, const char *ckpt, msg_attempt_ack *ack,
        char *detail)
{
    msg_run_attempt r;
    int32_t         gpus[2] = {0, 1};

    memset(&r, 0, sizeof(r));
    snprintf(r.job_id, sizeof(r.job_id), "%s", job);
    r.attempt = attempt;
    snprintf(r.command, sizeof(r.command), "%s", cmd);
    snprintf(r.checkpoint_dir, sizeof(r.checkpoint_dir), "%s", ckpt ? ckpt : "");
    r.gpus.v = gpus;
    r.gpus.n = 2;
    memset(ack, 0, sizeof(*ack));
    return tl_call(loop, bus, "gp.node." SITE "." NODE ".cmd.run", &msg_run_attempt_desc, &r,
                   &msg_attempt_ack_desc, ack, 3000, detail, GP_ERRBUF_LEN);
}

static gp_err
signal_cmd(const char *job, uint32_t attempt, int action)
{
    msg_attempt_signal s;
    msg_attempt_ack    ack;
    char               detail[GP_ERRBUF_LEN];

    memset(&s, 0, sizeof(s));
    snprintf(s.job_id, sizeof(s.job_id), "%s", job);
    s.attempt = attempt;
    s.action = action;
    return tl_call(loop, bus, "gp.node." SITE "." NODE ".cmd.signal", &msg_attempt_signal_desc, &s,
                   &msg_attempt_ack_desc, &ack, 3000, detail, sizeof(detail));
}

/* log: the agent's output goes there (NULL: inherited). */
static pid_t
start_agent_log(const char *log)
{
    char  bin[512], port[32];
    /* host commands: these are the agent's own mechanics (signals, leases,
     * checkpoints) on plain processes; containers: container_test.sh */
    char  a[15][32] = {"--site", SITE, "--node", NODE, "--gpu-backend", "sim", "--sim-gpus",
                       "2", "--sim-model", "L40S", "--stop-grace-ms", "1000",
                       "--host-commands=true", "--http-port", ""};
    char *argv[17];

    argv[0] = bin;
    for (int i = 0; i < 15; i++)
        argv[i + 1] = a[i];
    argv[15] = port;
    argv[16] = NULL;

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-agent", tl_env("GP_BUILD"));
    snprintf(port, sizeof(port), "%d", tl_free_port());
    if (log == NULL)
        return tl_spawn(argv);
    pid_t pid = fork();

    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static pid_t
start_agent(void)
{
    return start_agent_log(NULL);
}

/* Does the file hold a line with every one of the words? */
static bool
log_has(const char *path, const char *w1, const char *w2)
{
    char  line[2048];
    bool  found = false;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, w1) != NULL && (w2 == NULL || strstr(line, w2) != NULL);
    fclose(f);
    return found;
}

static void
test_register_and_heartbeats(void)
{
    const msg_gpu_telemetry *g;
    double                   span;
    int                      n0, l0, r0;

    T_OKM(tl_run_until(loop, &registered, 10), "agent registers");
    T_OK(strcmp(reg.site, SITE) == 0 && strcmp(reg.node, NODE) == 0 && reg.agent_version[0]);
    T_OK(reg.gpus.n == 2 && strcmp(((msg_gpu *)reg.gpus.v)[0].model, "L40S") == 0);
    T_OK(reg.boot_id[0] != '\0' && reg.cpu_cores > 0 && reg.mem_mb > 0);
    tl_spin(loop, 0.1);
    n0 = nhb;
    l0 = nlease_beat + nlease_alone;
    tl_spin(loop, HB_MS * 5.5 / 1000.0);
    T_OKM(nhb - n0 >= 4 && nhb - n0 <= 7, "heartbeats at the granted interval (%d in %.1f s)",
          nhb - n0, HB_MS * 5.5 / 1000.0);
    T_OKM(nlease_beat + nlease_alone == l0, "an idle node renews no lease: its beat is all it "
          "sends (%d renewals in %.1f s)", nlease_beat + nlease_alone - l0, HB_MS * 5.5 / 1000.0);
    span = hb_at[(nhb - 1) % 256] - hb_at[(nhb - 4) % 256];
    T_OKM(span > 3 * HB_MS / 1000.0 * 0.7 && span < 3 * HB_MS / 1000.0 * 1.4,
          "3 intervals took %.2f s", span);
    g = last_hb.gpus.v;
    T_OK(strcmp(last_hb.site, SITE) == 0 && last_hb.seq >= 4 && last_hb.sent_ms > 0);
    T_OK(last_hb.gpus.n == 2 && g[0].temp_c > 10 && g[0].power_w > 0 && g[1].index == 1);
    T_OKM(last_hb.uplink_rtt_ms > 0 && last_hb.uplink_rtt_ms < 1000, "uplink rtt %.2f ms",
          last_hb.uplink_rtt_ms);
    T_OK(last_hb.disk == MSG_HEARTBEAT_DISK_OK && last_hb.attempts.n == 0);
    /* Typed calls on the bus inbox, inside the node's own subtree (its NATS
     * identity has no rights elsewhere). */
    T_OKM(strncmp(reg_reply, "gp.node." SITE "." NODE "._reply.", 21) == 0,
          "the register reply comes back in the node's subtree (%s)", reg_reply);
    /* the registry forgot it: an idle node hears it on cmd.register */
    r0 = registered;
    register_again(SITE, NODE);
    for (double t0 = tl_now(); registered == r0 && tl_now() < t0 + 3;)
        tl_spin(loop, 0.02);
    T_OKM(registered > r0, "told to register again (cmd.register), the idle node registers");
}

/* Ghost nodes: a lease answered NOTFOUND makes the agent register again at
 * once; a registration answered DENIED stops it for good (attempts
 * killed, process exits non-zero).  A second agent, its log captured. */
static void
test_ghost_node(void)
{
    char            log[600], detail[GP_ERRBUF_LEN] = "";
    msg_attempt_ack ack;
    pid_t           apid;
    int             r0, st;
    double          t0;

    snprintf(log, sizeof(log), "%s/agent-ghost.log", tl_env("GP_STACK_DIR"));
    lease_err = register_err = GP_EOK;
    r0 = registered;
    apid = start_agent_log(log);
    t0 = tl_now();
    while (registered == r0 && tl_now() < t0 + 10)
        tl_spin(loop, 0.02);
    T_OKM(registered > r0, "a second agent registers");
    T_EQ_INT(run_cmd("j6", 1, "sleep 30", NULL, &ack, detail), GP_EOK);
    r0 = registered;
    lease_err = GP_ENOTFOUND;          /* the registry lost the node */
    t0 = tl_now();
    while (registered == r0 && tl_now() < t0 + LEASE_MS / 3000.0 + 3)
        tl_spin(loop, 0.02);
    lease_err = GP_EOK;
    T_OKM(registered > r0, "a lease answered NOTFOUND: registered again %.2f s later",
          tl_now() - t0);
    T_OKM(log_has(log, "event=agent_reregister", "reason=lease_notfound"),
          "agent_reregister reason=lease_notfound logged");
    T_OKM(tl_alive(ack.pid), "its attempt keeps running");
    tl_spin(loop, 0.3);
    register_err = GP_EDENIED;         /* an operator deleted the node */
    lease_err = GP_ENOTFOUND;          /* makes it register: DENIED */
    t0 = tl_now();
    st = -1;
    while (st < 0 && tl_now() < t0 + LEASE_MS / 3000.0 + 5) {   /* answering meanwhile */
        int ws;

        tl_spin(loop, 0.02);
        if (waitpid(apid, &ws, WNOHANG) == apid)
            st = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    }
    T_OKM(st > 0, "a registration answered DENIED: the agent exits non-zero (status %d, %.2f s)",
          st, tl_now() - t0);
    T_OKM(log_has(log, "event=agent_stopped", "reason=register_DENIED"),
          "agent_stopped reason=register_DENIED logged");
    tl_spin(loop, 0.3);
    T_OKM(!tl_alive(ack.pid), "its attempt is killed");
    if (st < 0)
        kill(apid, SIGTERM), tl_wait_exit(apid, 5);
    lease_err = register_err = GP_EOK;
}

static int
test_attempt_and_counters(void)
{
    msg_attempt_ack          ack, ack2;
    char                     detail[GP_ERRBUF_LEN] = "";
    const msg_attempt_usage *u;
    uint64_t                 g1, e1;
    int                      pid;

    T_EQ_INT(run_cmd("j1", 2, "sleep 30", NULL, &ack, detail), GP_EOK);
    pid = ack.pid;
    T_OKM(pid > 0 && tl_alive(pid) && strcmp(ack.job_id, "j1") == 0, "attempt runs as pid %d", pid);
    T_OKM(getpgid(pid) == pid, "in its own process group");
    T_OK(wait_event("j1", MSG_ATTEMPT_EVENT_EVENT_STARTED, 2) != NULL);
    T_EQ_INT(run_cmd("j1", 1, "sleep 30", NULL, &ack2, detail), GP_ECONFLICT);
    T_OKM(strstr(detail, "stale") != NULL, "stale attempt refused: %s", detail);
    T_EQ_INT(run_cmd("j1", 2, "sleep 30", NULL, &ack2, detail), GP_EOK);
    T_OKM(ack2.pid == pid, "a repeated RunAttempt is the same attempt");
    tl_spin(loop, HB_MS * 1.5 / 1000.0);
    u = usage_of("j1");
    T_OK(u != NULL && u->attempt == 2 && u->state == MSG_ATTEMPT_USAGE_STATE_RUNNING);
    g1 = u ? u->gpu_ms : 0;
    e1 = u ? u->energy_mj : 0;
    tl_spin(loop, HB_MS * 3.0 / 1000.0);
    u = usage_of("j1");
    T_OKM(u != NULL && u->gpu_ms > g1 + 2 * HB_MS && u->gpu_ms < g1 + 2 * 4 * HB_MS,
          "gpu_ms grows by wall time x 2 GPUs (%llu -> %llu)", (unsigned long long)g1,
          (unsigned long long)(u ? u->gpu_ms : 0));
    T_OKM(u != NULL && u->energy_mj > e1 + 100000, "energy grows (%llu -> %llu mJ)",
          (unsigned long long)e1, (unsigned long long)(u ? u->energy_mj : 0));
    T_OK(((msg_gpu_telemetry *)last_hb.gpus.v)[0].util_pct > 50);
    T_OKM(lease_seen_attempts == 1, "lease renewals list the attempt");
    {
        int b0 = nlease_beat, a0 = nlease_alone, h0 = nhb_alone;

        tl_spin(loop, HB_MS * 5.5 / 1000.0);
        T_OKM(nlease_beat - b0 >= 4 && nlease_beat - b0 <= 7 && nlease_alone == a0 &&
                  nhb_alone == h0,
              "a busy node beats inside its renewals, one message per interval (in %.1f s: %d "
              "renewals with a beat, %d alone, %d beats alone)", HB_MS * 5.5 / 1000.0,
              nlease_beat - b0, nlease_alone - a0, nhb_alone - h0);
    }
    return pid;
}

/* When pid died (polled every 20 ms), or 0 if it lives at deadline. */
static double
wait_dead(int pid, double deadline)
{
    while (tl_now() < deadline) {
        tl_spin(loop, 0.02);
        if (!tl_alive(pid))
            return tl_now();
    }
    return 0;
}

static void
test_lease(int pid)
{
    const ev_rec *e;
    double        t0, died;

    answering = 0;                     /* a short outage: less than the lease */
    tl_spin(loop, LEASE_MS * 0.5 / 1000.0);
    answering = 1;
    tl_spin(loop, LEASE_MS * 0.7 / 1000.0);
    T_OKM(tl_alive(pid) && find_event("j1", MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED) == NULL,
          "an outage shorter than the lease keeps the attempt");
    answering = 0;                     /* a long one */
    tl_spin(loop, 0.05);
    t0 = last_grant_at;
    died = wait_dead(pid, t0 + LEASE_MS / 1000.0 + 3);
    T_OKM(died > 0 && died - t0 > LEASE_MS / 1000.0 - 0.3 && died - t0 < LEASE_MS / 1000.0 + 1.0,
          "killed %.2f s after the last grant (lease %.1f s)", died - t0, LEASE_MS / 1000.0);
    tl_spin(loop, 0.5);
    T_OKM(find_event("j1", MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED) == NULL,
          "lease_expired is held while cut off");
    answering = 1;
    e = wait_event("j1", MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED, LEASE_MS / 1000.0 + 2);
    T_OKM(e != NULL && e->attempt == 2 && e->gpu_ms > 0,
          "lease_expired reported once the control plane answers (gpu_ms %llu)",
          (unsigned long long)(e ? e->gpu_ms : 0));
}

/* The lease runs from when the renewal was sent, not from when its
 * answer came: renewals answered 0.6 s late, then none; the attempt dies
 * a lease after the last answered renewal ARRIVED at the control plane
 * (which is after the agent sent it), not 0.6 s later. */
static void
test_lease_from_send(void)
{
    msg_attempt_ack ack;
    char            detail[GP_ERRBUF_LEN] = "";
    double          grant0, req, died;
    int             pid;

    T_EQ_INT(run_cmd("j6", 1, "sleep 60", NULL, &ack, detail), GP_EOK);
    pid = ack.pid;
    lease_delay = 0.6;
    tl_spin(loop, LEASE_MS / 1000.0);  /* renewals every lease/3, each answered late */
    grant0 = last_grant_at;
    while (last_grant_at == grant0 && tl_now() < grant0 + LEASE_MS / 1000.0)
        tl_spin(loop, 0.01);           /* a late answer has just gone out */
    answering = 0;
    req = last_req_at;
    died = wait_dead(pid, req + LEASE_MS / 1000.0 + 3);
    T_OKM(died > 0 && died - req > LEASE_MS / 1000.0 - 0.5 && died - req < LEASE_MS / 1000.0 + 0.45,
          "killed %.2f s after its renewal reached the control plane, %.2f s after the late "
          "answer (lease %.1f s)", died - req, died - last_grant_at, LEASE_MS / 1000.0);
    lease_delay = 0;
    answering = 1;
    tl_spin(loop, 0.3);
}

static void
test_kill_list(void)
{
    msg_attempt_ack ack;
    char            detail[GP_ERRBUF_LEN] = "";
    const ev_rec   *e;

    T_EQ_INT(run_cmd("j2", 1, "sleep 30", NULL, &ack, detail), GP_EOK);
    snprintf(kill_list[0].job_id, sizeof(kill_list[0].job_id), "j2");
    kill_list[0].attempt = 1;
    nkill = 1;
    e = wait_event("j2", MSG_ATTEMPT_EVENT_EVENT_KILLED, LEASE_MS / 1000.0 + 2);
    T_OKM(e != NULL, "an attempt on a reply's kill list is stopped");
    T_OKM(e != NULL && e->exit_code == 128 + SIGTERM, "by SIGTERM (exit_code %d)",
          e ? e->exit_code : -1);
    T_OKM(ack.pid > 0 && !tl_alive(ack.pid), "the killed attempt (pid %d) is gone", (int)ack.pid);
}

static void
test_checkpoint_env_exit(void)
{
    char            dir[256], path[300], cmd[700], line[256] = "";
    msg_attempt_ack ack;
    char            detail[GP_ERRBUF_LEN] = "";
    const ev_rec   *e;
    FILE           *f;

    snprintf(dir, sizeof(dir), "%s/ckpt-j3", tl_env("GP_STACK_DIR"));
    snprintf(cmd, sizeof(cmd),
             "echo \"$GP_JOB_ID $GP_ATTEMPT $CUDA_VISIBLE_DEVICES $GP_CHECKPOINT_DIR\" >%s.env; "
             "trap 'touch \"$GP_CHECKPOINT_DIR/CHECKPOINT_DONE\"' USR1; "
             "while :; do sleep 0.1; done", dir);
    T_EQ_INT(run_cmd("j3", 1, cmd, dir, &ack, detail), GP_EOK);
    tl_spin(loop, 0.5);
    snprintf(path, sizeof(path), "%s.env", dir);
    if ((f = fopen(path, "r")) != NULL) {
        (void)!fgets(line, sizeof(line), f);
        fclose(f);
    }
    T_OKM(strncmp(line, "j3 1 0,1 ", 9) == 0, "environment: %s", line);
    T_EQ_INT(signal_cmd("j3", 1, MSG_ATTEMPT_SIGNAL_ACTION_CHECKPOINT), GP_EOK);
    T_OKM(wait_event("j3", MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED, 3) != NULL,
          "checkpointed when the job writes CHECKPOINT_DONE");
    T_EQ_INT(signal_cmd("j3", 1, MSG_ATTEMPT_SIGNAL_ACTION_STOP), GP_EOK);
    T_OK(wait_event("j3", MSG_ATTEMPT_EVENT_EVENT_KILLED, 3) != NULL);
    T_EQ_INT(signal_cmd("j3", 1, MSG_ATTEMPT_SIGNAL_ACTION_STOP), GP_ENOTFOUND);
    T_EQ_INT(run_cmd("j4", 1, "exit 3", NULL, &ack, detail), GP_EOK);
    e = wait_event("j4", MSG_ATTEMPT_EVENT_EVENT_EXITED, 3);
    T_OKM(e != NULL && e->exit_code == 3, "exited with its exit code (%d)", e ? e->exit_code : -1);
}

/* ---- the simulator's side of a refusal -------------------------------------- */

static char sim_victim_site[64], sim_victim[64];  /* the node this "registry" refuses */
static bool sim_ghost;                            /* refuse it now */
static int  sim_registered, sim_denied, sim_victim_hb;

/* "gp.node.<site>.<node>.<verb>" -> node (and site). */
static void
subj_node(const char *subj, char *site, char *node, size_t n)
{
    const char *p = subj + strlen("gp.node."), *q = strchr(p, '.'), *r = q ? strchr(q + 1, '.') : NULL;

    site[0] = node[0] = '\0';
    if (strncmp(subj, "gp.node.", 8) != 0 || q == NULL || r == NULL)
        return;
    snprintf(site, n, "%.*s", (int)(q - p), p);
    snprintf(node, n, "%.*s", (int)(r - q - 1), q + 1);
}

static void
sim_answer(const gp_bus_msg *m, const gp_arr *attempts)
{
    msg_node_registered r;
    gp_buf              b;

    memset(&r, 0, sizeof(r));
    r.heartbeat_ms = 300;
    r.lease_ms = 1500;
    r.keep = *attempts;
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_msg_encode(&msg_node_registered_desc, &r, &b);
    gp_bus_pub(bus, m->reply, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

static void
sim_on_register(void *arg, const gp_bus_msg *m)
{
    msg_node_register r;

    (void)arg;
    memset(&r, 0, sizeof(r));
    if (m->reply == NULL || gp_msg_decode(&msg_node_register_desc, m->data, m->len, &r, NULL, 0) != GP_EOK)
        return;
    if (sim_victim[0] == '\0') {
        snprintf(sim_victim_site, sizeof(sim_victim_site), "%s", r.site);
        snprintf(sim_victim, sizeof(sim_victim), "%s", r.node);
    }
    if (sim_ghost && strcmp(r.node, sim_victim) == 0) {
        answer_error(m, GP_EDENIED, "node deleted by an operator");
        sim_denied++;
    } else {
        sim_answer(m, &r.attempts);
        sim_registered++;
    }
    gp_msg_clear(&msg_node_register_desc, &r);
}

static void
sim_on_lease(void *arg, const gp_bus_msg *m)
{
    msg_lease_renew l;
    char            site[64], node[64];

    (void)arg;
    memset(&l, 0, sizeof(l));
    subj_node(m->subject, site, node, sizeof(node));
    if (m->reply == NULL || gp_msg_decode(&msg_lease_renew_desc, m->data, m->len, &l, NULL, 0) != GP_EOK)
        return;
    if (sim_ghost && strcmp(node, sim_victim) == 0)
        answer_error(m, GP_ENOTFOUND, "no such node: register again");
    else
        sim_answer(m, &l.attempts);
    gp_msg_clear(&msg_lease_renew_desc, &l);
}

static void
sim_on_hb(void *arg, const gp_bus_msg *m)
{
    char site[64], node[64];
    bool victim;

    (void)arg;
    subj_node(m->subject, site, node, sizeof(node));
    victim = sim_victim[0] != '\0' && strcmp(node, sim_victim) == 0;
    sim_victim_hb += victim;
    if (victim && sim_ghost)           /* as the registry does for a forgotten node */
        register_again(site, node);
}

/* gridpool-sim with this test as its registry: one node is refused (a
 * lease NOTFOUND, then its registration DENIED): the simulator takes that
 * node down (no heartbeats, its command routes unbound) and runs on. */
static void
test_sim_refused(void)
{
    char            bin[512], log[600], subj[GP_MAX_SUBJECT + 1], detail[GP_ERRBUF_LEN] = "";
    char            a[12][16] = {"--sites", "1", "--seed", "7", "--admin=false", "--spread-ms", "0",
                                 "--heartbeat-ms", "300", "--http-port", "0", ""};
    char           *argv[13];
    gp_bus_sub     *subs[3];
    msg_run_attempt r;
    msg_attempt_ack ack;
    pid_t           pid;
    double          t0;
    int             hb0, ws;

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-sim", tl_env("GP_BUILD"));
    snprintf(log, sizeof(log), "%s/sim-refused.log", tl_env("GP_STACK_DIR"));
    argv[0] = bin;
    for (int i = 0; i < 11; i++)
        argv[i + 1] = a[i];
    argv[12] = NULL;
    gp_bus_sub_new(bus, "gp.node.*.*.register", NULL, sim_on_register, NULL, &subs[0]);
    gp_bus_sub_new(bus, "gp.node.*.*.lease", NULL, sim_on_lease, NULL, &subs[1]);
    gp_bus_sub_new(bus, "gp.node.*.*.hb", NULL, sim_on_hb, NULL, &subs[2]);
    tl_spin(loop, 0.2);
    pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    t0 = tl_now();
    while (sim_victim_hb < 2 && tl_now() < t0 + 15)
        tl_spin(loop, 0.02);
    T_OKM(sim_victim_hb >= 2, "simulated node %s registers and heartbeats", sim_victim);
    sim_ghost = true;                  /* an operator deleted it */
    t0 = tl_now();
    while (sim_denied == 0 && tl_now() < t0 + 5)
        tl_spin(loop, 0.02);
    T_OKM(sim_denied > 0, "told to register again, its registration DENIED (%.2f s)",
          tl_now() - t0);
    tl_spin(loop, 0.5);
    hb0 = sim_victim_hb;
    tl_spin(loop, 1.5);
    T_OKM(sim_victim_hb == hb0, "the simulator stops that node's heartbeats (%d more)",
          sim_victim_hb - hb0);
    memset(&r, 0, sizeof(r));
    snprintf(r.job_id, sizeof(r.job_id), "j9");
    r.attempt = 1;
    snprintf(r.command, sizeof(r.command), "true");
    snprintf(subj, sizeof(subj), "gp.node.%s.%s.cmd.run", sim_victim_site, sim_victim);
    T_EQ_INT(tl_call(loop, bus, subj, &msg_run_attempt_desc, &r, &msg_attempt_ack_desc, &ack, 1000,
                     detail, sizeof(detail)), GP_ENOROUTE);
    T_OKM(log_has(log, "event=agent_stopped", "reason=register_DENIED") &&
              log_has(log, "event=sim_node_refused", sim_victim),
          "agent_stopped and sim_node_refused logged");
    T_OKM(waitpid(pid, &ws, WNOHANG) == 0, "the simulator runs on");
    kill(pid, SIGTERM);
    T_OKM(tl_wait_exit(pid, 10) == 0, "and stops on SIGTERM with status 0");
    for (int i = 0; i < 3; i++)
        gp_bus_sub_free(subs[i]);
}

int
main(void)
{
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "agent-test"};
    gp_bus_sub *subs[4];
    pid_t       agent_pid;
    int         pid, last_pid;
    msg_attempt_ack ack;
    char        detail[GP_ERRBUF_LEN];

    loop = ev_loop_new(0);             /* not the default loop: it would reap our children */
    if (gp_bus_new(loop, &bo, NULL, NULL, &bus) != GP_EOK)
        return printf("not ok - bus\n"), 1;
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".register", NULL, on_register, NULL, &subs[0]);
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".lease", NULL, on_lease, NULL, &subs[1]);
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".hb", NULL, on_hb, NULL, &subs[2]);
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".attempt", NULL, on_attempt, NULL, &subs[3]);
    tl_spin(loop, 0.3);
    agent_pid = start_agent();
    test_register_and_heartbeats();
    pid = test_attempt_and_counters();
    test_lease(pid);
    test_kill_list();
    test_checkpoint_env_exit();
    test_lease_from_send();
    T_EQ_INT(run_cmd("j5", 1, "sleep 30", NULL, &ack, detail), GP_EOK);
    last_pid = ack.pid;
    kill(agent_pid, SIGTERM);
    T_OKM(tl_wait_exit(agent_pid, 10) == 0, "agent stops on SIGTERM with status 0");
    tl_spin(loop, 0.2);
    T_OKM(last_pid > 0 && !tl_alive(last_pid), "and takes its attempts with it (pid %d)", last_pid);
    test_ghost_node();
    test_sim_refused();
    for (int i = 0; i < 4; i++)
        gp_bus_sub_free(subs[i]);
    gp_msg_clear(&msg_node_register_desc, &reg);
    gp_msg_clear(&msg_heartbeat_desc, &last_hb);
    gp_bus_free(bus);
    ev_loop_destroy(loop);
    gp_lib_close();
    return T_DONE();
}
