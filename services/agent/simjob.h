/* simjob.h -- simulated job behaviours: what a "sim:" command does when
 * the agent runs on the simulated GPU backend (internal to the agent).
 *
 * Thousands of simulated nodes cannot fork thousands of processes, so a
 * RunAttempt whose command starts with "sim:" runs in the loop (timers, no
 * fork) on the simulated backend; on the real (NVML) backend it is refused
 * INVAL: a real node runs real commands only.
 *
 * Grammar: "sim:" then space-separated items, each at most once:
 *   run=DUR        work to do; absent: runs until stopped (a provisioned
 *                  instance).  With resume_ms, only run - resume_ms is left.
 *   exit=N         exit status when the work is done (0..255, default 0)
 *   fail_after=DUR exits 1 after DUR of running (if run= is not done first)
 *   ckpt=DUR       checkpoints itself every DUR of running (a
 *                  `checkpointed` event each time, with progress_ms)
 *   load=P         GPU utilization in percent, 0..100 (default 95)
 *   hang           ignores the stop (SIGTERM-equivalent) until the grace kill
 *   start_fail     refuses to start (the attempt is failed_to_start)
 * DUR is a number with a unit: ms, s, m or h ("1500ms", "300s", "0.5s",
 * "5m", "2h": gp/duration.h), at most a year; a bare number is refused.  Anything else (unknown key, repeated
 * key, bad value, nothing after "sim:" is fine: it runs until stopped) is
 * refused with INVAL and a detail that starts with "command:". */
#ifndef GP_AGENT_SIMJOB_H
#define GP_AGENT_SIMJOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"

#define SIMJOB_PREFIX       "sim:"
#define SIMJOB_DEFAULT_LOAD 95
#define SIMJOB_MAX_DUR_MS   (366ull * 24 * 3600 * 1000)     /* a year: longer is a typo */
#define SIMJOB_CKPT_DELAY_MS 200     /* a checkpoint signal is answered this long after */

typedef struct simjob_spec {
    bool     has_run;
    uint64_t run_ms;
    int      exit_code;
    bool     has_fail;
    uint64_t fail_ms;
    uint64_t ckpt_ms;                /* 0: never checkpoints by itself */
    int      load_pct;
    bool     hang;
    bool     start_fail;
} simjob_spec;

/* Does the command name a simulated behaviour? */
bool   simjob_is(const char *command);
/* Parses a "sim:" command.  INVAL with detail ("command: ...") on bad input. */
gp_err simjob_parse(const char *command, simjob_spec *out, char *detail, size_t dlen);
/* "300s" -> 300000 (gp_duration_parse, units required, at most
 * SIMJOB_MAX_DUR_MS); false on junk, no unit or too long. */
bool   simjob_dur(const char *s, size_t n, uint64_t *out_ms);

#endif
