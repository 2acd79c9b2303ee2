/* agent_simjob_test.c -- the "sim:" command grammar (services/agent/simjob.h):
 * every key, durations, defaults, and bad input refused INVAL naming
 * `command`. */
#include <string.h>

#include "../../services/agent/simjob.h"
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

int
main(void)
{
    test_keys();
    test_durations();
    test_refused();
    return T_DONE();
}
