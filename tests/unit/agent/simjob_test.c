/* simjob_test.c -- the "sim:" command grammar (services/agent/simjob.h):
 * every key, durations, defaults, and bad input refused INVAL naming
 * `command`. */
#include <ev.h>
#include <string.h>

#include "../../../services/agent/agent.h"
#include "../../../services/agent/simjob.h"
#include "gp/clock.h"
#include "test.h"

static gp_err
parse(const char *cmd, simjob_spec *s, char *detail)
{
    detail[0] = '\0';
    return simjob_parse(cmd, s, detail, 256);
}

static void
test_keys(void)
{
    simjob_spec s;
    char        d[256];

    T_OK(simjob_is("sim:run=1s") && !simjob_is("sleep 1") && !simjob_is(" sim:run=1s"));
    T_EQ_INT(parse("sim:", &s, d), GP_EOK);
    T_OKM(!s.has_run && !s.has_fail && s.exit_code == 0 && s.ckpt_ms == 0 &&
          s.load_pct == SIMJOB_DEFAULT_LOAD && !s.hang && !s.start_fail,
          "sim: alone runs until stopped at the default load");
    T_EQ_INT(parse("sim:run=300s exit=3 ckpt=60s", &s, d), GP_EOK);
    T_OK(s.has_run && s.run_ms == 300000 && s.exit_code == 3 && s.ckpt_ms == 60000);
    T_EQ_INT(parse("sim:fail_after=40s", &s, d), GP_EOK);
    T_OK(s.has_fail && s.fail_ms == 40000 && !s.has_run);
    T_EQ_INT(parse("sim:  load=40   hang start_fail ", &s, d), GP_EOK);
    T_OK(s.load_pct == 40 && s.hang && s.start_fail);
    T_EQ_INT(parse("sim:load=0", &s, d), GP_EOK);
    T_EQ_INT(s.load_pct, 0);
    T_EQ_INT(parse("sim:load=100 exit=255", &s, d), GP_EOK);
    T_OK(s.load_pct == 100 && s.exit_code == 255);
}

static void
test_durations(void)
{
    static const struct { const char *s; uint64_t ms; } ok[] = {
        {"1500ms", 1500}, {"300s", 300000}, {"5m", 300000}, {"2h", 7200000}, {"0.5s", 500},
        {"0s", 0},
    };
    static const char *const bad[] = {"300", "s", "-1s", "5d", "1e99h", "abc", "5 m", ""};
    uint64_t ms;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        T_OKM(simjob_dur(ok[i].s, strlen(ok[i].s), &ms) && ms == ok[i].ms, "%s = %llu ms",
              ok[i].s, (unsigned long long)ok[i].ms);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        T_OKM(!simjob_dur(bad[i], strlen(bad[i]), &ms), "\"%s\" is not a duration", bad[i]);
}

static void
test_refused(void)
{
    static const char *const bad[] = {
        "sim:run=300",                 /* no unit */
        "sim:run=",                    /* no value */
        "sim:run",                     /* key without value */
        "sim:exit=256",
        "sim:exit=-1",
        "sim:exit=x",
        "sim:fail_after=soon",
        "sim:ckpt=0s",                 /* a checkpoint every 0 s */
        "sim:load=101",
        "sim:load=-5",
        "sim:hang=1",                  /* flags take no value */
        "sim:start_fail=yes",
        "sim:speed=3",                 /* unknown key */
        "sim:run=1s run=2s",           /* twice */
        "sim:run=1s,exit=0",           /* not space-separated */
        "run=1s",                      /* not a sim: command */
    };
    simjob_spec s;
    char        d[256];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        gp_err rc = parse(bad[i], &s, d);

        T_OKM(rc == GP_EINVAL && strncmp(d, "command:", 8) == 0, "\"%s\" refused: %s", bad[i], d);
    }
}

/* ---- the agent's side, without a bus (the node is "cut off": events are
 * held, nothing is sent) ------------------------------------------------ */

static agent_attempt_end ends[8];
static char              end_job[8][64];     /* e->job_id is valid during the call only */
static int               nends;

static void
on_end(void *arg, agent *a, const agent_attempt_end *e)
{
    (void)arg;
    (void)a;
    if (nends < 8) {
        snprintf(end_job[nends], sizeof(end_job[0]), "%s", e->job_id);
        ends[nends++] = *e;
    }
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
    o.stop_grace_ms = 300;
    o.on_attempt_end = on_end;
    o.host_commands = true;
    a = agent_new(ev_default_loop(0), NULL, &o, g);
    if (a != NULL)
        agent_set_connected(a, false);
    return a;
}

static gp_err
run(agent *a, const char *job, const char *cmd, uint64_t resume_ms, char *detail)
{
    msg_run_attempt r;
    msg_attempt_ack ack;
    int32_t         gpus[2] = {0, 1};

    memset(&r, 0, sizeof(r));
    snprintf(r.job_id, sizeof(r.job_id), "%s", job);
    r.attempt = 1;
    snprintf(r.command, sizeof(r.command), "%s", cmd);
    r.gpus.v = gpus;
    r.gpus.n = 2;
    r.resume_ms = resume_ms;
    detail[0] = '\0';
    return agent_cmd_run(a, &r, &ack, detail, 256);
}

static void
spin_ms(unsigned ms)
{
    uint64_t end = gp_mono_ms() + ms;

    while (gp_mono_ms() < end)
        ev_run(ev_default_loop(0), EVRUN_ONCE);
}

/* A real (NVML) node runs real commands only: a sim: command is refused
 * INVAL naming command.  A backend that says it is "nvml" stands in. */
static void
test_real_backend_refuses(void)
{
    static gpu_ops fake;
    gpu_backend   *g = gpu_sim_new("L4", 2, 1);
    agent         *a;
    char           d[256];

    fake = *g->ops;
    fake.name = "nvml";
    g->ops = &fake;
    a = node(g);
    T_OK(a != NULL);
    T_EQ_INT(run(a, "j1", "sim:run=1s", 0, d), GP_EINVAL);
    T_OKM(strncmp(d, "command:", 8) == 0, "refused on a real node: %s", d);
    T_EQ_INT(agent_attempts_running(a), 0);
    agent_free(a);
    gpu_free(g);
}

/* On the simulated backend: the end, its counters, and what the node tells
 * the simulator's ground truth (on_attempt_end). */
static void
test_sim_backend_runs(void)
{
    gpu_backend *g = gpu_sim_new("L4", 2, 1);
    agent       *a = node(g);
    char         d[256];

    nends = 0;
    T_EQ_INT(run(a, "j1", "sim:run=300ms exit=4 load=50", 0, d), GP_EOK);
    T_EQ_INT(run(a, "j2", "sim:run=10s", 9800, d), GP_EOK);
    T_EQ_INT(run(a, "j3", "sim:", 0, d), GP_EOK);
    T_EQ_INT(agent_attempts_running(a), 3);
    spin_ms(500);
    T_EQ_INT(agent_attempts_running(a), 1);
    T_OKM(nends == 2 && strcmp(end_job[0], "j2") == 0 && ends[0].progress_ms == 10000,
          "resume_ms 9800 of 10 s: ends first, at progress 10000");
    T_OKM(nends == 2 && strcmp(end_job[1], "j1") == 0 && ends[1].exit_code == 4 &&
          ends[1].event == MSG_ATTEMPT_EVENT_EVENT_EXITED && ends[1].sim && ends[1].load == 0.5,
          "run=300ms exit=4 load=50: exited 4 at load 0.5");
    T_OKM(nends == 2 && ends[1].end_mono_ms - ends[1].start_mono_ms >= 300 &&
          ends[1].end_mono_ms - ends[1].start_mono_ms < 400 && ends[1].agent_gpu_ms >= 600 &&
          ends[1].agent_gpu_ms < 800, "after %llu ms, gpu_ms %llu (2 GPUs)",
          (unsigned long long)(ends[1].end_mono_ms - ends[1].start_mono_ms),
          (unsigned long long)ends[1].agent_gpu_ms);
    agent_free(a);                     /* the node goes down with j3 running */
    T_OKM(nends == 3 && strcmp(end_job[2], "j3") == 0 && ends[2].event == -1,
          "a node freed with a job running tells its end too (event -1)");
    gpu_free(g);
}

int
main(void)
{
    test_keys();
    test_durations();
    test_refused();
    test_real_backend_refuses();
    test_sim_backend_runs();
    return T_DONE();
}
