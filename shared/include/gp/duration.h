/* gp/duration.h -- the one reader of written durations: "1500ms", "300s",
 * "0.5s", "5m", "2h" (fault scripts, alert rules, "sim:" commands).
 *
 * Grammar: DIGITS ["." DIGITS] UNIT, and nothing else (no sign, no
 * spaces, no exponent).  UNIT is ms, s, m or h; with GP_DUR_DAYS also d;
 * with GP_DUR_BARE_MS a number without a unit is milliseconds.  A
 * fraction is rounded to the nearest millisecond, half up ("1.5ms" = 2,
 * "0.0005s" = 1), and may have at most 9 decimals.  The result is an
 * integer number of milliseconds, computed without floating point and
 * checked against overflow and the caller's max_ms.
 *
 * Pure; any thread. */
#ifndef GP_DURATION_H
#define GP_DURATION_H

#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"

#define GP_DUR_BARE_MS 0x1u   /* "250" = 250 ms (the fault scripts' old grammar) */
#define GP_DUR_DAYS    0x2u   /* "2d" = 2 days */

/* Reads the n bytes at s (not NUL-terminated: pass strlen(s) for a
 * string) as a duration.  OK with *out_ms; INVAL when it does not follow
 * the grammar (empty, no unit, unknown unit, junk); RANGE when it is more
 * than max_ms (or past 2^64 ms).  *out_ms is written only on OK. */
gp_err gp_duration_parse(const char *s, size_t n, unsigned flags, uint64_t max_ms,
                         uint64_t *out_ms);

#endif
