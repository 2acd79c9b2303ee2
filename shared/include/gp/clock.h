/* gp/clock.h -- the two clocks, and which one to use for what.
 *
 * Monotonic (CLOCK_MONOTONIC): leases, deadlines, timeouts, usage
 * intervals, rates -- anything measured as a duration.  It never jumps
 * when NTP or an operator steps the date, so a forward step cannot expire
 * a lease early and a backward one cannot make an interval negative.
 * Its origin is arbitrary (boot): never store, send or show it.
 *
 * Wall (CLOCK_REALTIME): timestamps that are stored, sent or shown
 * ("seen at", "started at", log lines).  Never subtract two of them to
 * time something.
 *
 * libev's ev_now() is the WALL clock (ev_time() is CLOCK_REALTIME; only
 * its timers run on the monotonic clock): do not use it for durations.
 *
 * Pure functions; any thread. */
#ifndef GP_CLOCK_H
#define GP_CLOCK_H

#include <stdint.h>

uint64_t gp_mono_ms(void);
uint64_t gp_mono_ns(void);
double   gp_mono_s(void);

uint64_t gp_wall_ms(void);                 /* ms since the Unix epoch */
double   gp_wall_s(void);

#endif
