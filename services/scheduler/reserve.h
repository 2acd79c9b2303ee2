/* reserve.h -- atomic GPU reservations in Redis: two instances never book one
 * GPU, and a booking is an attempt's grant (fencing).
 *
 * Layout (Redis Cluster ready, like the registry's; N = gp_shard_of(site),
 * so every node of a site and its live hash are in the site's slot):
 *   gp:{N}:res:<node>   hash: GPU index -> "<job>:<attempt>:<reserved_ms>",
 *                       reserved_ms = Redis's clock (TIME in the script, on
 *                       the shard's master) when the GPU was booked
 *   gp:{N}:resnodes     set: the shard's nodes holding at least one
 *                       reservation (a reconcile walks it; no SCAN)
 *   gp:{N}:node:<id>    the registry's live hash, read only ('state', 'reg')
 * Scripts: reserve_scripts.h.  Every key a script touches is in its KEYS,
 * and the keys of one call share {N}: one call books nodes of ONE site.
 *
 * Rules:
 *   - Epoch: every book call also names the shard's epoch key
 *     (reserve_scripts.h); without it Redis lost its data and the book is
 *     refused (ERROR, UNAVAIL) until the scheduler rebuilt the shard from
 *     PostgreSQL (epoch.c), and the on_stale callback says which shard.
 *   - Book: one script books every GPU of every node asked or none.  It
 *     refuses (BUSY) when a GPU is held by another (job, attempt), naming
 *     the node, GPU and holder; and (UNHEALTHY) when a node's live hash
 *     lacks the registry's 'reg' mark or its state is not "healthy" (suspect,
 *     lost, draining, cordoned...), naming the state.  So two scheduler instances never
 *     book the same GPU, and a suspect, lost or cordoned node is never booked.
 *     Booking again what the same (job, attempt) holds is OK (idempotent:
 *     the first booking's time is kept).
 *   - Release: removes only fields whose value is that (job, attempt)'s, so
 *     attempt 1 can never free attempt 2's GPUs (the attempt number is the
 *     fencing token); idempotent.
 *   - Hand over (a preempted attempt's release): each GPU freed is held
 *     for the preemptor ("<job>:0:<ms>"); the book script lets only that
 *     job book it until the hold is SCHED_RES_HOLD_MS old, and a booking
 *     of that job frees the node's other GPUs held for it.  The reconcile
 *     removes a hold past its grace like any reservation no attempt backs.
 *   - Reconcile, against PostgreSQL's live attempts (the caller reads them;
 *     this module never reads PostgreSQL): (a) a reservation no live
 *     attempt backs is removed if it was booked at least a grace period
 *     before the truth was read, on Redis's clock (an instance may have
 *     booked and not yet written its attempt row; and a booking made after
 *     the read cannot be in it, however long the pass takes), and only if
 *     it still holds the value read; (b) a GPU
 *     PostgreSQL gives an attempt and Redis has free is booked again for
 *     it (after FLUSHALL or a restart without persistence); one held by
 *     another holder is never overwritten and is counted as a conflict.
 *     Orphans go first, so a GPU whose stale holder is removed is rebuilt
 *     for its rightful one in the same pass.  The truth is a snapshot: an
 *     attempt that ended after it was read may be rebuilt, and is removed
 *     again by the next reconcile past the grace.  So the grace must exceed
 *     the longest time from a booking to its attempt row's commit.  Every
 *     change is re-checked by a script, so two instances reconciling at
 *     once (or one racing bookings) never undo each other's bookings.
 *
 * Callbacks run on the loop thread, exactly once for every call that
 * returned OK, never from inside the call.  A call that returns another
 * code has no callback.  Counters (gp/metrics.h):
 *   gp_scheduler_reservations_total{result="ok|busy|unhealthy|error"}
 *   gp_scheduler_reserved_gpus_total, gp_scheduler_releases_total{result},
 *   gp_scheduler_released_gpus_total,
 *   gp_scheduler_reconcile_removed_total, ..._rebuilt_total,
 *   ..._conflicts_total, ..._kept_fresh_total. */
#ifndef SCHED_RESERVE_H
#define SCHED_RESERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"
#include "gp/kv.h"
#include "gp/limits.h"
#include "gp/metrics.h"

/* Nodes of one book/release call: one job's nodes at one site. */
#define SCHED_RES_MAX_NODES 64
/* GPU indexes are 0..63 (schemas/job/Attempt.json): a mask is a uint64_t. */
#define SCHED_RES_MAX_GPU   63

typedef struct sched_reserve sched_reserve;

/* One node of a call.  gpus: bit i = GPU index i.  Release only: 0 = every
 * GPU this (job, attempt) holds on the node. */
typedef struct sched_res_node {
    const char *node;
    uint64_t    gpus;
} sched_res_node;

typedef enum sched_res_status {
    SCHED_RES_OK = 0,          /* booked / released */
    SCHED_RES_BUSY,            /* a GPU is held by another (job, attempt) */
    SCHED_RES_UNHEALTHY,       /* a node is not healthy or not registered */
    SCHED_RES_ERROR,           /* Redis did not answer, or answered an error */
} sched_res_status;

typedef struct sched_res_result {
    sched_res_status status;
    gp_err           err;      /* ERROR: TIMEOUT, UNAVAIL, INTERNAL (Redis error reply) */
    unsigned         gpus;     /* OK: GPUs newly booked / freed */
    /* BUSY and UNHEALTHY: the node refused; BUSY: the GPU and its holder */
    char             node[GP_MAX_ID + 1];
    int              gpu;
    char             holder_job[GP_MAX_ID + 1];
    uint32_t         holder_attempt;
    uint64_t         holder_ms;
    char             state[32];   /* UNHEALTHY: "suspect", "lost", "draining", "unregistered"... */
} sched_res_result;

typedef void sched_res_cb(void *arg, const sched_res_result *res);

/* One reservation as stored. */
typedef struct sched_res_entry {
    char     node[GP_MAX_ID + 1];
    int      gpu;
    char     job[GP_MAX_ID + 1];
    uint32_t attempt;
    uint64_t reserved_ms;          /* Redis's clock */
} sched_res_entry;

/* err OK: e[0..n) (n may be 0); otherwise n is 0.  e is valid during the call. */
typedef void sched_res_read_cb(void *arg, gp_err err, const sched_res_entry *e, size_t n);

/* One live attempt's GPUs on one node, from PostgreSQL. */
typedef struct sched_res_live {
    const char *job;
    uint32_t    attempt;
    const char *site;
    const char *node;
    uint64_t    gpus;
} sched_res_live;

typedef struct sched_res_reconciled {
    gp_err   err;                  /* OK, or the first failure (the rest went on) */
    unsigned failed;               /* Redis calls that failed (their part undone) */
    unsigned removed;              /* orphans removed */
    unsigned kept_fresh;           /* orphans younger than the grace, kept */
    unsigned rebuilt;              /* GPUs booked again from the truth */
    unsigned conflicts;            /* truth GPUs held by another holder */
    sched_res_entry first_conflict;   /* its holder (job, attempt) in Redis */
    char     conflict_job[GP_MAX_ID + 1];   /* ... and the attempt PostgreSQL names */
    uint32_t conflict_attempt;
} sched_res_reconciled;

typedef void sched_res_reconcile_cb(void *arg, const sched_res_reconciled *res);

/* Told of a shard whose book calls are refused for want of its epoch. */
typedef void sched_res_stale_cb(void *arg, unsigned shard);

/* kv must outlive r; m may be NULL (counters kept inside only).  Scripts are
 * sent as EVAL until their SHA1 is known (gp/kvscript.h). */
gp_err sched_reserve_new(gp_kv *kv, gp_metrics *m, sched_reserve **out);
/* Only when no call is in flight (e.g. after gp_kv_free ran their
 * callbacks).  NULL is a no-op. */
void   sched_reserve_free(sched_reserve *r);
/* cb (may be NULL) is called on the loop, once for each book refused as
 * stale, before the call's own callback. */
void   sched_reserve_on_stale(sched_reserve *r, sched_res_stale_cb *cb, void *arg);
/* SCRIPT LOAD of every script (optional; again after a reconnect). */
void   sched_reserve_load(sched_reserve *r);

/* Book nodes[0..n) of site for (job, attempt), all or nothing.  INVAL: an
 * id that is not gp_id_ok, n 0 or past SCHED_RES_MAX_NODES, a node with no
 * GPU, a node twice; UNAVAIL/TOOBIG: not sent. */
gp_err sched_reserve_book(sched_reserve *r, const char *site, const char *job, uint32_t attempt,
                          const sched_res_node *nodes, size_t n, sched_res_cb *cb, void *arg);
/* Free what (job, attempt) holds of nodes[0..n) of site; result.gpus = freed. */
gp_err sched_reserve_release(sched_reserve *r, const char *site, const char *job,
                             uint32_t attempt, const sched_res_node *nodes, size_t n,
                             sched_res_cb *cb, void *arg);
/* Release, but hold every GPU freed for heir's next attempt (attempt 0 in
 * Redis, "<heir>:0:<ms>"): only heir may book it, for SCHED_RES_HOLD_MS
 * (reserve_scripts.h).  A preempted attempt's GPUs go to its preemptor so
 * no instance gives them to lower-priority work first; result.gpus = the
 * GPUs handed over. */
gp_err sched_reserve_handover(sched_reserve *r, const char *site, const char *job,
                              uint32_t attempt, const sched_res_node *nodes, size_t n,
                              const char *heir, sched_res_cb *cb, void *arg);
/* The reservations of one node (to refresh a free-GPU mask after BUSY). */
gp_err sched_reserve_read(sched_reserve *r, const char *site, const char *node,
                          sched_res_read_cb *cb, void *arg);
/* Every reservation of one shard (0..GP_SHARDS-1): the index, then each
 * node's hash (not one snapshot: a node booked meanwhile may be missing). */
gp_err sched_reserve_list(sched_reserve *r, unsigned shard, sched_res_read_cb *cb, void *arg);
/* Redis's clock (TIME), ms: read it before reading the live attempts, and
 * hand it to the reconcile as truth_ms.  In a cluster it is one master's
 * clock (keyless: any master), and the masters are slewed by NTP: a few ms
 * apart, well within any grace.  err OK: ms is set. */
typedef void sched_res_clock_cb(void *arg, gp_err err, uint64_t ms);
gp_err sched_reserve_clock(sched_reserve *r, sched_res_clock_cb *cb, void *arg);
/* Reconcile every shard against live[0..n) (copied), read at truth_ms on
 * Redis's clock (sched_reserve_clock, before the read began): an unbacked
 * reservation booked later than truth_ms - grace_ms is kept.  One at a
 * time: CONFLICT while one runs. */
gp_err sched_reserve_reconcile(sched_reserve *r, const sched_res_live *live, size_t n,
                               uint64_t truth_ms, uint64_t grace_ms,
                               sched_res_reconcile_cb *cb, void *arg);

/* Parses "<job>:<attempt>:<ms>"; false when malformed. */
bool   sched_res_parse(const char *val, size_t len, sched_res_entry *e);

#endif
