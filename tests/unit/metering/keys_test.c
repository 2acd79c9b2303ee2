/* keys_test.c -- metering's key names and record lines
 * (services/metering/keys.c): a line as the scripts write it (scripts.h),
 * the raw counters a state is taken up from after Redis lost it, an older
 * line without them, and lines that are not records. */
#include <string.h>

#include "../../../services/metering/metering.h"
#include "test.h"

static void
test_keys(void)
{
    char out[METERING_KEY_LEN], member[200];

    metering_key(out, 7, "epoch");
    T_OK(strcmp(out, "gp:{7}:m:epoch") == 0);
    metering_member(member, sizeof(member), "j-1", 3, "n-2");
    T_OK(strcmp(member, "j-1:3:n-2") == 0);
    metering_att_key(out, 255, 'a', member);
    T_OK(strcmp(out, "gp:{255}:m:a:j-1:3:n-2") == 0);
}

static void
test_lines(void)
{
    metering_line l;

    T_OKM(metering_line_read("j-1 3 n-2 s-1 898325359 2000 100 900 1187 394192 500 1000 7 1 "
                             "42 1 exited 687 227592 1687 395192", &l),
          "a record line with its raw counters");
    T_OKM(strcmp(l.job, "j-1") == 0 && l.att == 3 && strcmp(l.node, "n-2") == 0 &&
              strcmp(l.site, "s-1") == 0 && l.window == 898325359 && l.window_ms == 2000,
          "... its attempt, node, site and window");
    T_OKM(l.gpu_ms == 1187 && l.from_gpu_ms == 500 && l.energy_mj == 394192 &&
              l.from_energy_mj == 1000 && l.dropped_gpu_ms == 7 && l.resets == 1,
          "... its amounts and the counted totals before them");
    T_OKM(l.site_seq == 42 && l.final && strcmp(l.end_event, "exited") == 0 &&
              l.ckpt_gpu_ms == 687 && l.ckpt_energy_mj == 227592,
          "... its sequence number, end and checkpoint");
    T_OKM(l.has_raw && l.raw_gpu_ms == 1687 && l.raw_energy_mj == 395192,
          "... and the agent's counters the next delta starts from");
    T_OKM(metering_line_read("j-1 3 n-2 s-1 5 2000 100 900 10 20 0 0 0 0 1 0 none 0 0", &l) &&
              !l.has_raw && !l.final,
          "an older metering's line (no raw counters) reads, without them");
    T_OKM(!metering_line_read("j-1 0 n-2 s-1 5 2000 100 900 10 20 0 0 0 0 1 0 none 0 0", &l),
          "attempt 0 is not a record");
    T_OKM(!metering_line_read("j-1 3 n-2 s-1 5 0 100 900 10 20 0 0 0 0 1 0 none 0 0", &l),
          "a window of 0 ms is not a record");
    T_OKM(!metering_line_read("j-1 3 n-2 s-1 5 2000 100", &l), "a short line is not a record");
    T_OKM(!metering_line_read("", &l), "an empty line is not a record");
}

int
main(void)
{
    test_keys();
    test_lines();
    return T_DONE();
}
