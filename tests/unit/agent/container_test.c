/* container_test.c -- the checkpoint report protocol's parser
 * (container.h: ctr_report_parse): what a job may write to
 * $GP_REPORT_DIR/checkpoint, and what is refused. */
#include <string.h>

#include "../../../services/agent/container.h"
#include "gp/limits.h"
#include "test.h"

static void
test_good(void)
{
    static const struct { const char *s; uint64_t step; const char *id; } ok[] = {
        {"step=0", 0, ""},
        {"step=1200\n", 1200, ""},
        {"step=7 id=state-7\n", 7, "state-7"},
        {"step=18446744073709551615 id=s3://b/k/ckpt.pt", 18446744073709551615ull, "s3://b/k/ckpt.pt"},
        {"step=3 id=a:b_c.d\r\n", 3, "a:b_c.d"},
    };
    char     id[128];
    uint64_t step;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        step = 99;
        T_OKM(ctr_report_parse(ok[i].s, &step, id, sizeof(id)) && step == ok[i].step &&
                  strcmp(id, ok[i].id) == 0,
              "'%.*s' -> step %llu id '%s'", (int)strcspn(ok[i].s, "\r\n"), ok[i].s,
              (unsigned long long)ok[i].step, ok[i].id);
    }
}

static void
test_bad(void)
{
    static const char *const bad[] = {
        "", "step=", "step=x", "step=-1", "Step=1", " step=1", "step=1 id=", "step=1 id=a b",
        "step=1 id=$(reboot)", "step=1 junk", "step=18446744073709551616", "step=1\nstep=2",
        "step=1 id=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    };
    char     id[128];
    uint64_t step = 42;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        T_OKM(!ctr_report_parse(bad[i], &step, id, sizeof(id)), "'%.*s' refused",
              (int)(strcspn(bad[i], "\n") < 40 ? strcspn(bad[i], "\n") : 40), bad[i]);
    T_OKM(step == 42, "a refused report leaves the step alone");
}

int
main(void)
{
    test_good();
    test_bad();
    return T_DONE();
}
