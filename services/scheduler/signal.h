/* signal.h -- AttemptSignal to an agent (checkpoint, stop): a store-level
 * call the flows and the end module use.  Loop thread only. */
#ifndef SCHED_SIGNAL_H
#define SCHED_SIGNAL_H

#include <stdint.h>

#include "gp/err.h"

struct sched;

/* cb (may be NULL) runs once with the agent's answer; a failure is counted
 * and logged here (the node's lease kill list stops the attempt later). */
typedef void sched_signal_cb(struct sched *s, const char *job, uint32_t attempt, gp_err err,
                             void *arg);
void sched_signal(struct sched *s, const char *site, const char *node, const char *job,
                  uint32_t attempt, int action, sched_signal_cb *cb, void *arg);

#endif
