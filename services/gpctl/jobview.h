/* jobview.h -- how gpctl shows jobs: table rows of jobs and attempts, the
 * "why it waits" sentence, one line per job event, and the summary's job
 * arithmetic.  Pure: rows go into a table, text into buffers. */
#ifndef GPCTL_JOBVIEW_H
#define GPCTL_JOBVIEW_H

#include <stddef.h>
#include <stdint.h>

#include "msg_gen.h"
#include "output.h"

#define JOB_REASON_COLS 40      /* REASON is cut to this many columns */
#define JOB_NSTATES     6       /* msg_job_state_names */

extern const char *const job_heads[];
extern const char *const attempt_heads[];

/* Name of an enum value of a field, "?" when out of range. */
const char *enum_text(const gp_msg_desc *d, int field, int32_t v);

/* "2x4" (nodes x GPUs per node; nodes default 1). */
void job_gpus(const msg_job *j, char *buf, size_t n);
/* The last attempt row (highest attempt, then rank 0), or NULL. */
const msg_attempt *job_latest_attempt(const msg_job *j);
/* ID, TENANT, STATE, GPUS, PRIO, AGE, ATTEMPTS, SITE/NODE, REASON. */
int  job_row(table *t, const msg_job *j, int64_t now_ms);
/* ATTEMPT, RANK, SITE, NODE, GPUS, STATE, CREATED, STARTED, ENDED, EXIT,
 * LATENCY, SCORE (total and latency/price/packing/reliability/thermal). */
int  attempt_row(table *t, const msg_attempt *a);

/* "2,911 nodes: 2,400 wrong model, 300 not enough free GPUs, 211 outside
 * the latency bound" from j->waiting (largest first); the total is
 * nodes_considered when given, else the sum. */
void job_why_waits(const msg_job *j, char *buf, size_t n);
/* The words of one PendingReason ("wrong model"). */
const char *pending_words(int32_t reason);

/* One line per event: "TIME TENANT/JOB #SEQ EVENT -> STATE attempt=...
 * site=... node=... exit=... reason=..." (absent parts left out). */
void job_event_line(const msg_job_event *e, char *buf, size_t n);

/* The summary's arithmetic over listed jobs. */
typedef struct job_tally {
    uint64_t by_state[JOB_NSTATES];
    uint64_t total;
    uint64_t gpus_booked;       /* starting and running jobs: nodes x GPUs per node */
} job_tally;

void   job_tally_add(job_tally *t, const msg_job *j);
/* Booked over healthy GPUs, percent; 0 when there are none. */
double job_util_pct(uint64_t booked, uint64_t healthy_gpus);

#endif
