/* scheduler.h -- gridpool-scheduler: jobs, attempts and job events in
 * PostgreSQL, the job API (gp.api.<tenant>.job.*, gp.admin.job.list) and
 * the event outbox to the JetStream stream JOBS.  Shared by the
 * scheduler's own files only.  Loop thread only. */
#ifndef SCHEDULER_H
#define SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/app.h"
#include "gp/epoch.h"
#include "gp/limits.h"
#include "gp/shard.h"
#include "msg_gen.h"
#include "plan/fair.h"
#include "plan/place.h"
#include "reserve.h"
#include "plan/snapshot.h"
#include "plan/validate.h"

struct pg_result;

typedef struct scheduler_cfg {
    gp_common_cfg common;
    unsigned      outbox_ms;         /* how often unpublished job events are looked for */
    unsigned      outbox_grace_ms;   /* age of an unpublished event before the outbox resends it */
    unsigned      tenant_cache_ms;   /* how long a tenant the registry confirmed is trusted */
    unsigned      gauge_ms;          /* how often jobs are counted by state */
    unsigned      signal_timeout_ms; /* deadline of a stop signal to an agent */
    /* placement (feed.c, queue.c, dispatch.c, preempt_run.c) */
    unsigned      feed_ms;           /* how often the registry's inventory is reloaded */
    unsigned      bookings_ms;       /* how often the snapshot's bookings are synced */
    unsigned      place_ms;          /* placement pass period (also kicked) */
    unsigned      place_batch;       /* pending jobs claimed per pass */
    unsigned      claim_ms;          /* how long a claim keeps other instances off a job */
    unsigned      usage_ms;          /* how often tenant usage is read for fair share */
    unsigned      explain_max_nodes; /* walk_all for exact reasons only up to this fleet size */
    unsigned      dispatch_timeout_ms; /* RunAttempt deadline: no answer = failed to start */
    unsigned      dispatch_max;      /* dispatches in flight, at most */
    unsigned      preempt_grace_ms;  /* checkpoint request -> stop */
    unsigned      instance_drain_notice_ms;   /* a draining node's instances: notice -> move */
    unsigned      attempt_lease_ms;  /* lease_ms sent in RunAttempt (0: the agent's own) */
    char          checkpoint_root[192]; /* checkpoint_dir = <root>/<job> */
    char          checkpoint_shared_root[101]; /* "shared:" = file://<root>/<tenant>/<job> */
    char          secret_key[129];   /* secrets.c: never logged (a GP_CFG_SECRET_STR) */
    char          secret_key_file[256];
    unsigned      fair_half_life_ms; /* fair.h: usage decay */
    unsigned      hold_after_ms;     /* fair.h: a big job waiting this long is held */
    unsigned      hold_gpus;         /* fair.h: a big job asks at least this many GPUs */
    /* attempts, leases, fencing (attempts.c, lease.c, reconcile.c) */
    unsigned      heartbeat_ms;      /* handed to agents in a lease reply (as the registry's) */
    unsigned      lease_ms;          /* attempt lease handed to agents (as the registry's) */
    unsigned      maxrun_ms;         /* how often max run time is checked */
    unsigned      reconcile_ms;      /* how often Redis reservations are reconciled */
    unsigned      reconcile_grace_ms;/* unbacked and booked this long before the truth: orphan */
    unsigned      fence_margin_ms;   /* fence.c: after a node's last grant + lease, before replacing */
    unsigned      max_platform_retries; /* end.h: requeues after platform faults before a job fails */
} scheduler_cfg;

extern const gp_cfg_opt scheduler_cfg_opts[];     /* config.c */
extern const gp_migration scheduler_migrations[];   /* migrate.c */
extern const gp_grant scheduler_db_grants[];    /* dbgrants.c */

/* Tenants the registry confirmed recently (a small direct-mapped cache:
 * a collision only costs one more registry call). */
#define SCHED_TENANT_SLOTS 256
typedef struct sched_tenant_slot {
    char     id[GP_MAX_ID + 1];
    uint64_t until_mono;             /* gp_mono_ms after which it is asked again */
    char     asking[GP_MAX_ID + 1];  /* the tenant a registry call is out for, or "" */
    void    *waiters;                /* submits of it waiting on that call (jobs.c) */
} sched_tenant_slot;

#define SCHED_END_STATES 9

/* preempted_by of an attempt a node's evacuation moves (no job: its GPUs
 * are released, not held); preempt_run.c marks it, end.c's SQL reads it. */
#define SCHED_EVAC_BY "node-evacuation"

/* A preemption this instance started, until its preempt_until would pass
 * (preempt_run.c): the claim's "preempting" reads PostgreSQL, which may
 * not have the record yet when the next pass claims the job again. */
#define SCHED_PREEMPTORS 64
typedef struct sched_preemptor {
    char     job[GP_MAX_ID + 1];
    uint64_t until_mono;
} sched_preemptor;

typedef struct sched {
    gp_app              *app;
    const scheduler_cfg *cfg;
    sched_tenant_slot    tenants[SCHED_TENANT_SLOTS];
    bool                 outbox_busy;     /* an outbox pass is still publishing */
    unsigned             outbox_inflight; /* its publishes not yet confirmed */
    uint64_t            *m_submits[6];    /* by outcome (jobs.c: SUBMIT_*) */
    uint64_t            *m_cancels[4];    /* by outcome (jobs.c: CANCEL_*) */
    uint64_t            *m_events_published, *m_event_publish_failures, *m_outbox_resent;
    uint64_t            *m_tenant_consumers[2];   /* made, failed (events.c) */
    uint64_t            *m_event_batches;   /* attempt events: statements of 2+ */
    uint64_t            *m_signal_failures;
    double              *m_jobs[6];       /* jobs by state (msg_job_state_names) */
    /* The placement engine.  snap: this instance's view of the fleet (fed
     * by feed.c from the registry's replies and events and by this
     * instance's own bookings); res: the atomic reservations in Redis, the
     * only authority on who holds a GPU; fair: the pending queue's order. */
    snap                 snap;
    fair                 fair;
    sched_reserve       *res;
    /* feed.c / queue.c / dispatch.c / preempt_run.c state */
    struct sched_feed   *feed;
    struct sched_queue  *queue;
    gp_task             *place_task;
    bool                 fed;             /* the first full inventory load is done */
    unsigned             dispatching;     /* RunAttempt rounds in flight */
    struct dround       *retiring;        /* dispatch.c: failed starts waiting for their fence */
    sched_preemptor      preemptors[SCHED_PREEMPTORS];
    uint64_t            *m_placements, *m_unplaced, *m_preemptions, *m_claim_lost,
                        *m_evacuations;
    uint64_t            *m_failed_start[3];   /* refused, timeout, other (dispatch.c) */
    double              *m_queue_depth;
    gp_hist             *m_place_latency;
    /* attempts, leases, fencing */
    bool                 maxrun_busy, reconcile_busy;
    /* reconcile.c: the (job, attempt) pairs its pass read as live, as
     * PostgreSQL array literals, for the re-check after a rebuild */
    gp_buf               recon_jobs, recon_attempts;
    uint64_t             recon_truth_ms;        /* Redis's clock just before that read */
    uint64_t            *m_attempt_events[6];   /* by AttemptEvent.event */
    uint64_t            *m_attempt_event_errors;
    uint64_t            *m_leases[5];     /* by outcome (lease.c: LEASE_*) */
    uint64_t            *m_lease_kills;   /* attempts a lease reply told a node to kill */
    uint64_t            *m_release_failures, *m_timed_out, *m_replaced;
    uint64_t            *m_reconcile_runs[3];   /* done, skipped (another instance), failed */
    double              *m_reconcile_last[3];   /* removed, rebuilt, conflicts of the last pass */
    uint64_t            *m_ends[SCHED_END_STATES]; /* end.c: node rows ended, by state */
    /* secrets.c: the key of tenant secrets ("" : secrets are off) */
    char                 secret_key[129];
    uint64_t            *m_secrets[5];    /* by outcome (secrets.c: SECRET_*) */
    /* epoch.c: shards whose epoch Redis lacks (a script refused as stale),
     * waiting for their rebuild from PostgreSQL (the marks, the rounds and
     * gp_scheduler_redis_rebuilds_total: gp/epoch.h) */
    gp_epoch             epoch;
    gp_task             *epoch_task;
    uint64_t            *m_rebuilt_gpus, *m_rebuilt_grants, *m_stale_refusals;
} sched;

/* start.c: gp_app_main's init and free hooks (main.c). */
gp_err sched_init(gp_app *app, const void *cfg, void *state);
void   sched_free(void *state);

/* Counters may be NULL (gp_metrics_counter past GP_MAX_METRICS). */
static inline void
sched_count(uint64_t *c)
{
    if (c != NULL)
        (*c)++;
}

/* Capacity changed (a node became healthy, GPUs were released): run a
 * placement pass soon (queue.c's task; set by main before anything runs). */
static inline void
sched_place_kick(sched *s)
{
    if (s->place_task != NULL)
        gp_task_kick(s->place_task);
}

/* A script found shard's epoch missing (Redis lost its data): rebuild it
 * soon (epoch.c's task; fence.c and reserve.c's callback tell it). */
static inline void
sched_shard_stale(sched *s, unsigned shard)
{
    gp_epoch_mark(&s->epoch, shard);
    sched_count(s->m_stale_refusals);
    if (s->epoch_task != NULL)
        gp_task_kick(s->epoch_task);
}

/* ==== Layers ========================================================================
 *
 * Calls go one way, down this list (make lint checks there is no circle):
 *   flows   jobs.c (the API), queue.c (the placement pass), dispatch.c
 *           (RunAttempt), attempts.c (agents' events, max run time),
 *           lease.c, replace.c, reconcile.c, epoch.c, preempt_run.c, feed.c,
 *           facts.c;
 *           a flow hands work only to a flow below it in this order:
 *           jobs, queue -> preempt_run, feed, dispatch; reconcile -> feed
 *           -> preempt_run
 *   end     end.c: the only place an attempt ends (end.h)
 *   stores  booking.c, signal.c, events.c, rows.c, fence.c, reserve.c
 *   plan    plan/: snapshot, place, fair, preempt, validate: no I/O
 * The stores' and end's headers: booking.h, signal.h, end.h, reserve.h. */

/* ---- stores ---------------------------------------------------------------------- */

/* fence.c: grants stamped on Redis's clock (see there).  sched_fence_stamp:
 * before a RunAttempt, the node's grant moves to now + ahead_ms; CONFLICT
 * when (job, attempt) holds no GPU of the node, UNAVAIL before the
 * shard's rebuild (epoch.c).
 * sched_fence_lease: a renewal's keep (true) or kill per reported attempt,
 * and the stamp, in one atomic call; NOTFOUND when the node lacks the
 * registry's 'reg' mark.  sched_fence_replace: a lost node's attempts'
 * reservations removed once the fence opened (wait_ms 0), else how long
 * until it opens.  Callbacks exactly once when OK is returned. */
typedef void sched_fence_cb(void *arg, gp_err err);
typedef void sched_lease_cb(void *arg, gp_err err, const bool *keep, uint32_t n);
gp_err sched_fence_stamp(sched *s, const char *site, const char *node, const char *job,
                         uint32_t attempt, unsigned ahead_ms, sched_fence_cb *cb, void *arg);
gp_err sched_fence_lease(sched *s, const char *site, const char *node, const msg_lease_renew *q,
                         sched_lease_cb *cb, void *arg);
/* sched_fence_retire: an attempt a node may run though no answer said so
 * (its RunAttempt timed out; its placer died before sending it) ends on
 * that node without its reservation being freed first: the first call
 * marks it retired (every later renewal kills it, its GPUs stay booked),
 * and once its lease has surely run out on the node -- a fence window
 * after the mark, which comes after its last grant -- a call removes its
 * reservations there.  cb: wait_ms 0 when removed, else how long until
 * the fence opens.  Idempotent; any instance may call it. */
typedef void sched_retire_cb(void *arg, gp_err err, uint32_t wait_ms);
gp_err sched_fence_retire(sched *s, const char *site, const char *node, const char *job,
                          uint32_t attempt, sched_retire_cb *cb, void *arg);
gp_err sched_fence_replace(sched *s, const char *site, const char *node,
                           char (*job)[GP_MAX_ID + 1], const uint32_t *attempt, unsigned n,
                           sched_retire_cb *cb, void *arg);
void sched_fence_start(sched *s);

/* rows.c: result rows -> messages (columns named after the fields). */
gp_err sched_row_to_msg(const gp_msg_desc *d, const struct pg_result *res, int row, void *msg);
/* SELECT lists (table aliases j, a, e) in the form sched_row_to_msg reads. */
extern const char sched_job_cols[];
extern const char sched_attempt_cols[];
extern const char sched_event_cols[];

/* events.c: the outbox.  The event's row was committed with the change;
 * this publishes it (Nats-Msg-Id "<job>.<seq>") and marks it published. */
void sched_event_publish(sched *s, const msg_job_event *ev);
/* Publishes the job_events rows res holds (RETURNING the event columns);
 * tenant NULL: each row's "tenant" column. */
void sched_event_rows(sched *s, const char *tenant, const struct pg_result *res);
/* The "outbox" task: republishes events left unpublished for longer than
 * outbox-grace-ms (a crash or a failure between commit and publish). */
void sched_outbox_run(gp_app *app, void *arg);
extern const gp_stream_cfg sched_streams[];
void sched_events_start(sched *s);
/* Makes the tenant's durable consumer on JOBS (gp/tenant_events.h), or
 * makes it again alike: called when a submit learns the tenant exists. */
void sched_tenant_consumer(sched *s, const char *tenant);

/* ---- flows ----------------------------------------------------------------------- */

/* jobs.c: the job API */
extern const gp_route sched_job_routes[];
/* logs.c: gp.api.<t>.job.logs, fetched from the node that ran the attempt. */
extern const gp_route sched_logs_routes[];
void sched_jobs_start(sched *s);
/* The gauge task: counts jobs by state. */
void sched_jobs_count(gp_app *app, void *arg);

/* secrets.c: gp.api.<t>.secret.set|list|delete, and the secrets a job
 * names.  sched_secrets_start loads the key (secret-key, secret-key-file,
 * or $CREDENTIALS_DIRECTORY/secret-key); INVAL when one is given but
 * unusable.  sched_secrets_check (submit): every secret the spec names
 * exists and is the tenant's, seen under its role (cb: OK, NOTFOUND or
 * UNAVAIL with why).  sched_secrets_resolve (dispatch): their values,
 * decrypted, one item per use the spec names; cb owns v and must hand it
 * to sched_secrets_scrub.  Callbacks exactly once when OK is returned,
 * never inside the call (UNAVAIL without a key: sched_secrets_on); the
 * spec need outlive the call only. */
#define SCHED_SECRETS_MAX 3
#define SCHED_SECRETS_OFF "secrets are not configured on this control plane (the scheduler's secret-key)"
typedef void sched_secrets_cb(void *arg, gp_err err, const char *why, msg_attempt_secret *v,
                              unsigned n);
extern const gp_route sched_secret_routes[];
gp_err sched_secrets_start(sched *s);
bool   sched_secrets_on(const sched *s);
bool   sched_spec_names_secrets(const msg_job_spec *sp);
gp_err sched_secrets_check(sched *s, const char *tenant, const msg_job_spec *sp,
                           sched_secrets_cb *cb, void *arg);
gp_err sched_secrets_resolve(sched *s, const char *tenant, const msg_job_spec *sp,
                             sched_secrets_cb *cb, void *arg);
void   sched_secrets_scrub(msg_attempt_secret *v, unsigned n);

/* attempts.c: AttemptEvent from the stream ATTEMPTS (a durable route),
 * and the "maxrun" task (max run time). */
extern const gp_route sched_attempt_routes[];
extern const gp_durable sched_attempts_durable;
void sched_attempts_start(sched *s);
void sched_maxrun_run(gp_app *app, void *arg);

/* lease.c: gp.node.<site>.<node>.lease, served by the scheduler.  The
 * node's reservations are its grants: keep = the reported attempts that
 * hold one on that node, kill = the others. */
extern const gp_route sched_lease_routes[];
void sched_lease_start(sched *s);

/* replace.c: gp.int.sched.replace, a lost node's attempts once the fence
 * opens (recovery asks). */
extern const gp_route sched_replace_routes[];
void sched_replace_start(sched *s);

/* facts.c: gp.int.sched.attempt: an attempt's tenant, product and state. */
extern const gp_route sched_facts_routes[];

/* epoch.c: the "epoch" task: shards whose Redis keys were lost rebuilt
 * from PostgreSQL's live attempts (reservations, grants), then their epoch
 * written.  Every shard is marked at start. */
void sched_epoch_start(sched *s);
void sched_epoch_run(gp_app *app, void *arg);

/* reconcile.c: the "reconcile" task (Redis reservations against
 * PostgreSQL's live attempts, one instance a pass by a Redis lock). */
void sched_reconcile_start(sched *s);
void sched_reconcile_run(gp_app *app, void *arg);

/* queue.c: the "place" task: claim pending jobs, order, place, reserve,
 * write the attempt, dispatch. */
gp_err sched_queue_start(sched *s);
void   sched_queue_free(sched *s);
void   sched_place_run(gp_app *app, void *arg);

/* feed.c: the snapshot from the registry (bus only) and the live bookings
 * of this and other instances' attempts (PostgreSQL, at start). */
gp_err sched_feed_start(sched *s);
void   sched_feed_free(sched *s);
void   sched_feed_run(gp_app *app, void *arg);     /* the "feed" task */
/* The feed's tenants, pools and products again after a new site or node
 * (at most once a second; the placement pass calls it). */
void   sched_feed_refresh(sched *s);
void   sched_bookings_run(gp_app *app, void *arg); /* the "bookings" task (feed.c) */
/* Fetches a tenant the snapshot lacks (feed.c); the answer kicks placement. */
void   sched_feed_tenant(sched *s, const char *tenant);
/* The evacuation of every draining or quarantined node of the snapshot. */
void   sched_evacuate_sweep(sched *s);

/* preempt_run.c: a job that cannot be placed may evict interruptible
 * lower-priority attempts (checkpoint, grace, stop).  True when a
 * preemption was started for it. */
bool   sched_preempt_try(sched *s, const msg_job *job, const place_params *pp);
/* A preemption this instance started for job still runs (its grace and a
 * stop's round): no second one for it, and its placement takes what the
 * victims hand over. */
bool   sched_preempt_running(sched *s, const char *job);
/* The interruptible attempts on a draining or quarantined node are
 * checkpointed, stopped after the grace and requeued (one instance does
 * it; a call with nothing left to move does nothing). */
void   sched_evacuate(sched *s, const char *node, const char *state);

/* dispatch.c: RunAttempt to every node of a committed attempt; on refusal
 * or timeout the attempt failed to start (end.h). */
typedef struct sched_placed {
    char     job[GP_MAX_ID + 1], tenant[GP_MAX_ID + 1], site[GP_MAX_ID + 1];
    uint32_t attempt, nnodes;
    char     node[8][GP_MAX_ID + 1];
    uint64_t gpus[8];
    uint64_t resume_ms;
    char     image_digest[72];    /* the job's pinned digest, "" before its first start */
    bool     has_step;            /* the job reported a checkpoint: resume from it */
    uint64_t resume_step;
    char     resume_id[128];
    msg_job_spec spec;            /* owned: cleared by dispatch */
} sched_placed;
void   sched_dispatch(sched *s, sched_placed *p);   /* takes p */
/* The periodic task that re-tries the retiring rounds whose fence may be
 * open, and their memory at exit (dispatch.c). */
void   sched_retire_sweep(gp_app *app, void *arg);
void   sched_dispatch_free(sched *s);

#endif
