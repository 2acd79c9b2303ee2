/* clock_step_test.c -- the date jumps under a running agent (an NTP step,
 * an operator's `date -s`): an hour forward, then back.
 *
 * gridpool-agent runs under Debian's libfaketime (package faketime) with
 * only the wall clock faked (FAKETIME_DONT_FAKE_MONOTONIC=1) and the
 * offset read from a file at every call (FAKETIME_NO_CACHE=1); the test
 * rewrites that file to step the agent's date.  This test is the control
 * plane (as in agent_test): it grants every attempt, so nothing but a
 * clock error can expire a lease.
 *
 * Checks, for each step: the step reached the agent (its heartbeats'
 * sent_ms moves by the step: otherwise the test proves nothing); no
 * attempt is killed (no lease_expired or killed event, the process
 * lives); gpu_ms and energy grow across the step as the monotonic time
 * that passed (x 2 GPUs; energy within the GPUs' power range), uptime too.
 * Real time: about 20 s. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "msg_gen.h"
#include "test_beat.h"
#include "test_stack.h"

#define SITE      "t1"
#define NODE      "n1"
#define HB_MS     300
#define LEASE_MS  3000
#define STEP_S    3600
static const char FAKETIME[] = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
#define NGPUS     2
#define MAX_W     400.0      /* L40S TDP 350 W, plus noise */
#define MIN_W     30.0       /* its idle draw is 35 W */

typedef struct hb_rec {
    double   at;             /* this test's monotonic clock, when received */
    uint64_t sent_ms, uptime_s, gpu_ms, energy_mj;
    double   rtt_ms;
    bool     has_j1;
} hb_rec;

static struct ev_loop *loop;
static gp_bus         *bus;
static volatile int    registered;
static hb_rec          hbs[1024];
static int             nhb;
static int             bad_events;        /* lease_expired / killed of j1 */
static int             started;
static double          max_rtt;
static char            tsfile[600];

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
    msg_node_register reg;

    (void)arg;
    memset(&reg, 0, sizeof(reg));
    if (gp_msg_decode(&msg_node_register_desc, m->data, m->len, &reg, NULL, 0) != GP_EOK)
        return;
    if (m->reply != NULL) {
        answer(m, &reg.attempts);
        registered++;
    }
    gp_msg_clear(&msg_node_register_desc, &reg);
}

static void on_hb(void *arg, const gp_bus_msg *m);

static void
on_lease(void *arg, const gp_bus_msg *m)
{
    msg_lease_renew l;

    (void)arg;
    memset(&l, 0, sizeof(l));
    if (gp_msg_decode(&msg_lease_renew_desc, m->data, m->len, &l, NULL, 0) != GP_EOK)
        return;
    if (m->reply != NULL)
        answer(m, &l.attempts);
    gp_msg_clear(&msg_lease_renew_desc, &l);
    tl_lease_beat(m, on_hb, NULL);     /* a busy node's beat rides in its renewal */
}

static void
on_hb(void *arg, const gp_bus_msg *m)
{
    msg_heartbeat hb;
    hb_rec       *r;

    (void)arg;
    memset(&hb, 0, sizeof(hb));
    if (gp_msg_decode(&msg_heartbeat_desc, m->data, m->len, &hb, NULL, 0) != GP_EOK)
        return;
    if (nhb < 1024) {
        r = &hbs[nhb++];
        memset(r, 0, sizeof(*r));
        r->at = tl_now();
        r->sent_ms = hb.sent_ms;
        r->uptime_s = hb.uptime_s;
        r->rtt_ms = hb.uplink_rtt_ms;
        for (uint32_t i = 0; i < hb.attempts.n; i++) {
            const msg_attempt_usage *u = (const msg_attempt_usage *)hb.attempts.v + i;

            if (strcmp(u->job_id, "j1") == 0) {
                r->has_j1 = true;
                r->gpu_ms = u->gpu_ms;
                r->energy_mj = u->energy_mj;
            }
        }
        if (r->rtt_ms > max_rtt)
            max_rtt = r->rtt_ms;
    }
    gp_msg_clear(&msg_heartbeat_desc, &hb);
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

    (void)arg;
    memset(&e, 0, sizeof(e));
    if (gp_msg_decode(&msg_attempt_event_desc, m->data, m->len, &e, NULL, 0) != GP_EOK)
        return;
    ack_event(m);
    if (strcmp(e.job_id, "j1") == 0 && e.event == MSG_ATTEMPT_EVENT_EVENT_STARTED)
        started++;
    if (strcmp(e.job_id, "j1") == 0 && (e.event == MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED ||
                                        e.event == MSG_ATTEMPT_EVENT_EVENT_KILLED)) {
        bad_events++;
        printf("# j1 event %s\n", msg_attempt_event_event_names[e.event]);
    }
}

/* The agent's date offset: written whole, then renamed over the file, so
 * libfaketime (re-reading it at every call) never sees half of it. */
static bool
set_offset(const char *off)
{
    char  tmp[620];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.new", tsfile);
    if ((f = fopen(tmp, "w")) == NULL)
        return false;
    fprintf(f, "%s\n", off);
    if (fclose(f) != 0)
        return false;
    return rename(tmp, tsfile) == 0;
}

static pid_t
start_agent(void)
{
    char  bin[512], port[32];
    char  a[14][24] = {"--site", SITE, "--node", NODE, "--gpu-backend", "sim", "--sim-gpus", "2",
                       "--sim-model", "L40S", "--stop-grace-ms", "1000", "--host-commands=true",
                       "--http-port"};
    char *argv[17];
    pid_t pid;

    argv[0] = bin;
    for (int i = 0; i < 14; i++)
        argv[i + 1] = a[i];
    argv[15] = port;
    argv[16] = NULL;

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-agent", tl_env("GP_BUILD"));
    snprintf(port, sizeof(port), "%d", tl_free_port());
    pid = fork();
    if (pid == 0) {
        const char *asan = getenv("ASAN_OPTIONS");
        char        opts[1024];

        /* Only the agent's wall clock is faked; under the sanitizer build
         * ASan must accept a preloaded library ahead of it. */
        snprintf(opts, sizeof(opts), "%s%sverify_asan_link_order=0", asan ? asan : "",
                 asan && asan[0] ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        setenv("LD_PRELOAD", FAKETIME, 1);
        setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
        setenv("FAKETIME_NO_CACHE", "1", 1);
        setenv("FAKETIME_TIMESTAMP_FILE", tsfile, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static gp_err
run_j1(msg_attempt_ack *ack)
{
    msg_run_attempt r;
    int32_t         gpus[NGPUS] = {0, 1};
    char            detail[GP_ERRBUF_LEN] = "";

    memset(&r, 0, sizeof(r));
    snprintf(r.job_id, sizeof(r.job_id), "j1");
    r.attempt = 1;
    snprintf(r.command, sizeof(r.command), "sleep 120");
    r.gpus.v = gpus;
    r.gpus.n = NGPUS;
    memset(ack, 0, sizeof(*ack));
    return tl_call(loop, bus, "gp.node." SITE "." NODE ".cmd.run", &msg_run_attempt_desc, &r,
                   &msg_attempt_ack_desc, ack, 3000, detail, sizeof(detail));
}

/* The last heartbeat that carries j1. */
static const hb_rec *
last_j1(void)
{
    for (int i = nhb - 1; i >= 0; i--)
        if (hbs[i].has_j1)
            return &hbs[i];
    return NULL;
}

/* One step: offset, then more than a lease of real time; a and b are the
 * last heartbeats before and after. */
static void
step(const char *name, const char *off, long long step_ms, int pid)
{
    hb_rec   a, b;
    double   el_ms;
    long long moved;
    uint64_t dg, de;

    T_OKM(last_j1() != NULL, "%s: a heartbeat with the attempt before the step", name);
    if (last_j1() == NULL)
        return;
    a = *last_j1();
    T_OKM(set_offset(off), "%s: date offset %s written", name, off);
    tl_spin(loop, LEASE_MS * 1.6 / 1000.0);
    T_OKM(last_j1() != NULL && last_j1()->at > a.at, "%s: heartbeats go on", name);
    b = *last_j1();
    el_ms = (b.at - a.at) * 1000.0;
    moved = (long long)b.sent_ms - (long long)a.sent_ms;
    /* Not vacuous: the agent's wall clock did jump. */
    T_OKM(llabs(moved - step_ms - (long long)el_ms) < 2000,
          "%s: the agent's date moved by the step (sent_ms %+lld ms in %.0f ms)", name, moved,
          el_ms);
    T_OKM(bad_events == 0 && tl_alive(pid), "%s: the attempt is not killed (events %d, alive %d)",
          name, bad_events, tl_alive(pid));
    dg = b.gpu_ms - a.gpu_ms;
    T_OKM(b.gpu_ms >= a.gpu_ms && dg > 0.5 * NGPUS * el_ms && dg < 1.5 * NGPUS * el_ms + 1000,
          "%s: gpu_ms grew %llu in %.0f ms x %d GPUs (monotonic)", name, (unsigned long long)dg,
          el_ms, NGPUS);
    de = b.energy_mj - a.energy_mj;
    T_OKM(b.energy_mj >= a.energy_mj && de > MIN_W * NGPUS * el_ms * 0.5 &&
              de < MAX_W * NGPUS * (el_ms * 1.5 + 500),
          "%s: energy grew %llu mJ in %.0f ms (%.0f W)", name, (unsigned long long)de, el_ms,
          de / (el_ms > 0 ? el_ms : 1));
    T_OKM(b.uptime_s >= a.uptime_s && b.uptime_s - a.uptime_s <= el_ms / 1000.0 + 2,
          "%s: uptime grew %llu s in %.1f s", name, (unsigned long long)(b.uptime_s - a.uptime_s),
          el_ms / 1000.0);
}

int
main(void)
{
    gp_bus_opts     bo = {.url = tl_env("GP_NATS_URL"), .name = "clock-step-test"};
    gp_bus_sub     *subs[4];
    msg_attempt_ack ack;
    pid_t           agent_pid;
    struct stat     st;

    snprintf(tsfile, sizeof(tsfile), "%s/faketime", tl_env("GP_STACK_DIR"));
    T_OKM(stat(FAKETIME, &st) == 0, "libfaketime is installed (%s; Debian package faketime, "
          "make deps)", FAKETIME);
    if (stat(FAKETIME, &st) != 0)
        return T_DONE();
    T_OK(set_offset("+0"));
    loop = ev_loop_new(0);
    if (gp_bus_new(loop, &bo, NULL, NULL, &bus) != GP_EOK)
        return printf("not ok - bus\n"), 1;
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".register", NULL, on_register, NULL, &subs[0]);
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".lease", NULL, on_lease, NULL, &subs[1]);
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".hb", NULL, on_hb, NULL, &subs[2]);
    gp_bus_sub_new(bus, "gp.node." SITE "." NODE ".attempt", NULL, on_attempt, NULL, &subs[3]);
    tl_spin(loop, 0.3);
    agent_pid = start_agent();
    T_OKM(tl_run_until(loop, &registered, 15), "the agent (under libfaketime) registers");
    T_EQ_INT(run_j1(&ack), GP_EOK);
    tl_spin(loop, HB_MS * 4 / 1000.0);
    T_OKM(started == 1 && tl_alive(ack.pid), "attempt j1 runs (pid %d)", ack.pid);

    step("forward", "+" "3600", (long long)STEP_S * 1000, ack.pid);
    step("back", "+0", -(long long)STEP_S * 1000, ack.pid);
    T_OKM(max_rtt >= 0 && max_rtt < 2000, "uplink RTT stays sane across the steps (max %.1f ms)",
          max_rtt);

    kill(agent_pid, SIGTERM);
    T_OKM(tl_wait_exit(agent_pid, 10) == 0, "the agent stops on SIGTERM with status 0");
    tl_spin(loop, 0.2);
    T_OKM(!tl_alive(ack.pid), "and takes its attempt with it");
    for (int i = 0; i < 4; i++)
        gp_bus_sub_free(subs[i]);
    gp_bus_free(bus);
    ev_loop_destroy(loop);
    gp_lib_close();
    return T_DONE();
}
