/* booking.h -- an attempt's GPUs: the reservation in Redis (reserve.h, the
 * authority) and this instance's booking in its snapshot, given back
 * together.  Loop thread only. */
#ifndef SCHED_BOOKING_H
#define SCHED_BOOKING_H

#include <stdint.h>

#include "gp/limits.h"

struct sched;

/* Gives back an attempt's GPUs on every node given (at most 8): Redis and
 * the snapshot, then a placement kick (capacity changed).  Fenced by
 * (job, attempt) and idempotent: a repeated release frees nothing, and
 * attempt 1 never frees attempt 2's GPUs.  A failure is counted and
 * logged: the reconcile removes the orphan past its grace. */
void sched_release(struct sched *s, const char *site, const char *job, uint32_t attempt,
                   char (*node)[GP_MAX_ID + 1], uint32_t n);
/* The same, but the GPUs are held for heir (a preempted attempt's
 * preemptor: reserve.h's hand-over) rather than freed; heir NULL: release. */
void sched_release_to(struct sched *s, const char *site, const char *job, uint32_t attempt,
                      char (*node)[GP_MAX_ID + 1], uint32_t n, const char *heir);

#endif
