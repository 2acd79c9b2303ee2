/* validate.h -- a submitted JobSpec's meaning beyond the codec's types and
 * bounds, and its defaults.  Pure: no I/O (links without the bus or the
 * stores).  Any thread. */
#ifndef SCHED_VALIDATE_H
#define SCHED_VALIDATE_H

#include <stddef.h>

#include "gp/err.h"
#include "gp/limits.h"
#include "msg_gen.h"

/* On failure returns the typed error and writes "field: why" into msg,
 * the field named first. */
gp_err sched_spec_check(msg_job_spec *spec, char *msg, size_t n);
/* Sets the defaults (nodes 1, priority 100, max_attempts 3) and keeps
 * only the has-bits that change a spec's meaning, so two submissions
 * that mean the same job encode to the same bytes. */
void   sched_spec_normalize(msg_job_spec *spec);
/* "j-" + 16 lowercase hex digits from getrandom(). */
gp_err sched_job_id(char out[GP_MAX_ID + 1]);

#endif
