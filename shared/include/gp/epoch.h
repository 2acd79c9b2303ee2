/* gp/epoch.h -- the driver of a service's per-shard rebuild after Redis
 * lost its data: which shards are marked, one round at a time, each
 * shard's begin, the round's one read of the truth, the shard's steps, its
 * result, and the round's log lines.  What the keys are, what is read and
 * what each step writes are the service's (its callbacks); the driver
 * knows no key name and sends nothing itself.
 *
 * A round (gp_epoch_run):
 *   1. every marked shard is taken (its mark cleared: a refusal from then
 *      on marks it again), gets a token "<instance>:<monotonic ms>" and
 *      its begin (ops->begin); a round with no mark does nothing;
 *   2. when every begin has answered, one read for the round (ops->read)
 *      if any shard answered "begun"; the read hands each begun shard its
 *      rows (gp_epoch_begun, gp_epoch_data) and ends in
 *      gp_epoch_read_done.  A failed read fails every begun shard;
 *   3. each begun shard then goes through its steps: ops->step sends the
 *      next call, first with rep NULL, then after each answer that is not
 *      a string (the service counts it);
 *   4. when every shard is through: "redis_rebuilt shards=N <ops->fields>"
 *      if one was done, "redis_rebuild_failed shards=N why=\"shard S step
 *      K: ...\"" (the first failure's) if one failed; ops->end; the next
 *      round may run, and ops->again is called if a shard was marked
 *      meanwhile.
 *
 * Every call the service sends answers to gp_epoch_answered (a gp_kv_cb,
 * arg the job).  An answer:
 *   - an error (or a Redis error reply): the shard failed;
 *   - "begun": it waits for the round's read;
 *   - "wait" (not settled yet): the shard leaves the round, marked again,
 *     counted nowhere;
 *   - "sealed": done; "present" (found whole: another sealed it): present;
 *     any other string ("lost", ...): failed;
 *   - not a string: ops->step (a failed send fails the shard).
 * A failed shard is marked again (the next run tries again) unless the
 * why is "lost": another rebuild or a second loss took it over.  Results
 * are counted in <ops->metric>{result="done|present|failed"} (shards).
 *
 * Loop thread only.  The gp_epoch is the caller's storage (zeroed: no
 * mark), and must outlive its rounds. */
#ifndef GP_EPOCH_H
#define GP_EPOCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"
#include "gp/limits.h"
#include "gp/metrics.h"
#include "gp/shard.h"

struct redisReply;

/* A shard's first step; a service numbers its own from GP_EPOCH_FIRST
 * (the step is named in a failure's why). */
enum { GP_EPOCH_BEGIN = 0, GP_EPOCH_FIRST = 1 };

typedef struct gp_epoch_round gp_epoch_round;

/* One shard of a round. */
typedef struct gp_epoch_job {
    gp_epoch_round *round;
    unsigned        shard;
    int             step;            /* GP_EPOCH_BEGIN, then the service's */
    bool            begun;           /* still in the round (the driver's) */
    char            token[GP_MAX_ID + 32];
    void           *data;            /* the service's: job_size bytes, zeroed */
} gp_epoch_job;

/* What the service does; svc is gp_epoch_init's. */
typedef struct gp_epoch_ops {
    const char *metric;              /* gp_<svc>_redis_rebuilds_total */
    size_t      round_size;          /* gp_epoch_data's, zeroed for each round */
    size_t      job_size;            /* each job's data, zeroed for each round */
    /* The begin script call of j (step GP_EPOCH_BEGIN); not OK: not sent. */
    gp_err (*begin)(void *svc, gp_epoch_job *j);
    /* The round's read; ends in gp_epoch_read_done (maybe at once). */
    void   (*read)(void *svc, gp_epoch_round *r);
    /* The next call of j after the read (rep NULL: its first, j->step is
     * GP_EPOCH_FIRST) or after a non-string answer rep; the service moves
     * j->step on.  Not OK: not sent, the shard failed. */
    gp_err (*step)(void *svc, gp_epoch_job *j, const struct redisReply *rep);
    /* j was sealed: its figures to the round's data (and the counters). */
    void   (*done)(void *svc, gp_epoch_job *j);
    /* The redis_rebuilt line's fields after shards=N, e.g. "sites=3". */
    void   (*fields)(void *svc, gp_epoch_round *r, char *buf, size_t len);
    /* The round is over: what the read kept is freed.  May be NULL. */
    void   (*end)(void *svc, gp_epoch_round *r);
    /* A round ended with a shard marked meanwhile (the service kicks its
     * task).  May be NULL: the task's period runs it. */
    void   (*again)(void *svc);
} gp_epoch_ops;

typedef struct gp_epoch {
    const gp_epoch_ops *ops;
    void               *svc;
    const char         *instance;     /* the tokens' prefix, not copied */
    bool                stale[GP_SHARDS];
    bool                stale_any, busy;
    uint64_t           *m_rebuilds[3];   /* done, present, failed (may be NULL) */
} gp_epoch;

/* The callbacks and the result counters; the marks are kept. */
void gp_epoch_init(gp_epoch *ep, const gp_epoch_ops *ops, void *svc, const char *instance,
                   gp_metrics *m);
/* A script found shard's epoch missing: the next run rebuilds it. */
void gp_epoch_mark(gp_epoch *ep, unsigned shard);
/* A start: every shard marked (one sealed already answers "present"). */
void gp_epoch_start(gp_epoch *ep);
/* The service's task: a round of the marked shards, unless one runs. */
void gp_epoch_run(gp_epoch *ep);
/* Every call's answer (a gp_kv_cb; arg: the gp_epoch_job). */
void gp_epoch_answered(void *arg, const struct redisReply *rep, gp_err err);

/* During the read: the round's shard sh if it is begun, else NULL. */
gp_epoch_job *gp_epoch_begun(gp_epoch_round *r, unsigned sh);
/* The round's data for the service (round_size bytes). */
void         *gp_epoch_data(gp_epoch_round *r);
/* The read is over: each begun shard had its rows (err OK) or fails with
 * detail (or err's name). */
void          gp_epoch_read_done(gp_epoch_round *r, gp_err err, const char *detail);

#endif
