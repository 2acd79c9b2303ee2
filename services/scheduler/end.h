/* end.h -- the only place an attempt ends and its job is requeued or
 * failed.
 *
 * Every path (what an agent reported, a lost node, a failed start, a
 * stale attempt, a cancel, a preempted node, the max run time) is one
 * call of the SQL function sched_attempt_end (migrate.c, step 9), which
 * holds the one retry rule: the job's own failure uses one of its
 * max_attempts; a platform fault does not (bounded apart by
 * max-platform-retries); a preemption does not; a cancel and the max run
 * time end the job.  This module sends the statement and, after its
 * commit, does what the rows it returned say: publishes the job events
 * (their rows were written with the change: the outbox), gives back the
 * GPUs of every node it ended (to the preemptor, for a preempted one) and
 * tells the nodes that may still run the attempt to stop.
 *
 * Callbacks run exactly once, on the loop thread, never from inside the
 * call, for every call that returned OK.  Loop thread only. */
#ifndef SCHED_END_H
#define SCHED_END_H

#include <stdbool.h>
#include <stdint.h>

#include "gp/err.h"
#include "gp/limits.h"
#include "msg_gen.h"

struct sched;
struct pg_result;

typedef void sched_end_cb(void *arg, gp_err err, const char *detail);

/* What agents reported (AttemptEvent: started and checkpointed too), in
 * their order, as one statement; a failure of one fails the whole (the
 * caller sends them again one by one). */
gp_err sched_end_reported(struct sched *s, const msg_attempt_event *const *ev, unsigned n,
                          sched_end_cb *cb, void *arg);

/* A lost node's attempts, once its fence opened (their lease has surely
 * run out there): a platform fault. */
gp_err sched_end_lost(struct sched *s, const char *site, const char *node,
                      char (*job)[GP_MAX_ID + 1], const uint32_t *attempt, unsigned n,
                      sched_end_cb *cb, void *arg);

/* An attempt that failed to start on node (RunAttempt refused or never
 * answered): every live node of it ends.  own: the node refused it because
 * of the job itself (its command or image), which uses one of its
 * attempts; else a platform fault. */
gp_err sched_end_failed_start(struct sched *s, const char *job, uint32_t attempt,
                              const char *node, bool own, const char *why, sched_end_cb *cb,
                              void *arg);

/* Attempts never dispatched (their placer stopped between its commit and
 * its RunAttempt), each past its fence on every node: a platform fault. */
gp_err sched_end_stale(struct sched *s, char (*job)[GP_MAX_ID + 1], const uint32_t *attempt,
                       unsigned n, const char *why, sched_end_cb *cb, void *arg);

/* A tenant's cancel of its job: the job and its live attempts end.  cb
 * gets the job's row after it (sched_job_cols; no row: no such job of
 * that tenant) and whether this call cancelled it (false: it had ended). */
typedef void sched_cancel_cb(void *arg, gp_err err, const struct pg_result *job,
                             bool cancelled, const char *detail);
gp_err sched_end_cancel(struct sched *s, const char *job, const char *tenant,
                        sched_cancel_cb *cb, void *arg);

/* One node of a preempted attempt stopped (its stop acked): that node's
 * row ends preempted and its GPUs are held for the preemptor; the job goes
 * back to pending once no node of the attempt runs.  Idempotent. */
void sched_end_preempted(struct sched *s, const char *job, uint32_t attempt, const char *node);

/* The max run time: up to limit jobs whose newest attempt ran longer than
 * their max_run_s (on the database's clock) end timed out.  cb gets how
 * many jobs ended. */
typedef void sched_overrun_cb(void *arg, gp_err err, int ended, const char *detail);
gp_err sched_end_overrun(struct sched *s, unsigned limit, sched_overrun_cb *cb, void *arg);

/* Metrics (gp_scheduler_attempt_ends_total{how}); at start. */
void sched_end_start(struct sched *s);

#endif
