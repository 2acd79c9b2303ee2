/* metering.h -- gridpool-metering: cumulative per-attempt counters (GPU-ms,
 * mJ) from every heartbeat and the agents' final attempt events become
 * usage records per fixed window with deterministic ids, published on the
 * JetStream stream USAGE for billing.
 *
 * Files: beat.c (heartbeats, node states, the freeze), close.c (attempt
 * events: checkpoints and final counters; the sweep that closes windows
 * and attempts gone silent), outbox.c (records to the stream, with the
 * scheduler's facts of each attempt), keys.c (the key names, below them
 * all).  Calls go one way: beat.c and close.c call outbox.c, and every file
 * calls keys.c.  The running state lives in Redis
 * (scripts.h), so an instance can die at any point and another one, or
 * the same one restarted, goes on from it.  Every record is also stored in
 * PostgreSQL before it is published (store.c: the outbox and the baselines
 * Redis is a cache of), so Redis may lose everything (epoch.c): an
 * attempt's state is taken up again from its last record, never counted
 * again from zero, and the sites' sequences go on where they were. */
#ifndef METERING_H
#define METERING_H

#include <stdbool.h>
#include <stdint.h>

#include "gp/app.h"
#include "gp/epoch.h"
#include "gp/kvscript.h"
#include "gp/limits.h"
#include "gp/shard.h"
#include "msg_gen.h"

typedef struct metering_cfg {
    gp_common_cfg common;
    unsigned      window_ms;        /* a record's window */
    unsigned      grace_ms;         /* a window is closed this long after its end */
    unsigned      claim_ms;         /* a record being published is left alone this long */
    unsigned      silent_ms;        /* an attempt this long without readings is asked after */
    unsigned      sweep_ms;
    unsigned      publish_max;      /* records being published at once */
    unsigned      facts_timeout_ms;
} metering_cfg;

#define METERING_FACTS_SLOTS 4096

typedef struct metering_facts {
    bool              valid;
    char              key[200];     /* job.att.node */
    msg_attempt_facts f;
} metering_facts;

struct metering_store;

typedef struct metering {
    gp_app             *app;
    const metering_cfg *cfg;
    gp_kvscript         beat, due, tick, close, ckpt, ack, review, seed, begin, requeue, seal;
    bool                frozen;
    unsigned            publishing;
    unsigned            sweep_shard;      /* where the last sweep stopped */
    metering_facts     *facts;            /* METERING_FACTS_SLOTS, direct-mapped */
    uint64_t           *m_beats, *m_stale, *m_resets, *m_dropped, *m_implausible, *m_late;
    uint64_t           *m_records, *m_published, *m_publish_errors, *m_review;
    uint64_t           *m_closed_event, *m_closed_silent, *m_checkpoints, *m_final_waits;
    uint64_t           *m_facts_errors;
    double             *m_frozen, *m_publishing;
    /* store.c: records to PostgreSQL, baselines from it */
    struct metering_store *store;
    uint64_t           *m_stored, *m_store_errors, *m_baselines[3];
    /* epoch.c: shards whose epoch Redis lacks, to be rebuilt (the marks,
     * the rounds and gp_metering_redis_rebuilds_total: gp/epoch.h) */
    gp_epoch            epoch;
    uint64_t           *m_requeued, *m_stale_refusals;
} metering;

/* A script found shard's epoch missing: Redis lost its data (epoch.c
 * rebuilds it once the writes in flight before the loss have landed). */
static inline void
metering_shard_stale(metering *m, unsigned shard)
{
    gp_epoch_mark(&m->epoch, shard);
    if (m->m_stale_refusals != NULL)
        (*m->m_stale_refusals)++;
}

/* config.c */
extern const gp_cfg_opt metering_cfg_opts[];

/* start.c: gp_app_main's init and free hooks (state: a metering). */
gp_err metering_init(gp_app *app, const void *cfg, void *state);
void   metering_free(void *state);

/* beat.c */
extern const gp_route metering_beat_routes[];
gp_err metering_beat_start(metering *m);

/* close.c */
extern const gp_route metering_attempt_routes[];
extern const gp_stream_cfg metering_streams[];
void metering_sweep_run(gp_app *app, void *arg);

extern const gp_migration metering_migrations[];   /* migrate.c */
extern const gp_grant     metering_db_grants[];    /* dbgrants.c */

/* outbox.c */
void   metering_outbox_start(metering *m);
void   metering_outbox_free(metering *m);
/* Stores and publishes a freshly written record (its claim is the
 * caller's); line NULL: read from the outbox first. */
void   metering_publish(metering *m, unsigned shard, const char *id, const char *line);
/* Every (id, line) pair of a script's array reply rep: metering_publish. */
struct redisReply;
void   metering_publish_all(metering *m, unsigned shard, const struct redisReply *rep);
/* Looks for records left unpublished (a crashed instance's, failed ones). */
void   metering_outbox_run(gp_app *app, void *arg);
/* The scheduler's facts of an attempt, from the cache or asked; cb once
 * (err NOTFOUND: the scheduler has no such attempt on that node). */
typedef void metering_facts_cb(void *arg, gp_err err, const msg_attempt_facts *f);
void   metering_facts_get(metering *m, const char *job, uint32_t att, const char *node,
                          bool need_ended, metering_facts_cb *cb, void *arg);

/* store.c: PostgreSQL.  metering_store: the record is inserted (once per
 * id; its site's last sequence number kept), cb (may be NULL) after the
 * commit.  metering_store_published: the stream took it.
 * metering_seed: an attempt's node Redis has no state for gets one from
 * its last stored record (or from zero); cb (may be NULL) after the seed
 * script.  Writes of one loop wake-up go in one statement. */
typedef void metering_stored_cb(void *arg, gp_err err);
gp_err metering_store_start(metering *m);
void   metering_store_free(metering *m);
void   metering_store(metering *m, const char *id, const char *line, metering_stored_cb *cb,
                      void *arg);
void   metering_store_published(metering *m, const char *id);
void   metering_seed(metering *m, const char *site, const char *node, const char *job,
                     uint32_t att, metering_stored_cb *cb, void *arg);
/* The "prune" task: published records past their keep, a batch a run. */
void   metering_prune_run(gp_app *app, void *arg);

/* epoch.c: the "epoch" task: stale shards rebuilt (see there). */
void   metering_epoch_start(metering *m);
void   metering_epoch_run(gp_app *app, void *arg);

/* keys.c: key names (scripts.h's layout), record lines. */
#define METERING_KEY_LEN 256
void metering_key(char *out, unsigned shard, const char *what);
void metering_att_key(char *out, unsigned shard, char kind, const char *member);
void metering_member(char *out, size_t n, const char *job, uint32_t att, const char *node);

/* A record line (scripts.h) as read; has_raw false for a line of an older
 * metering (no raw counters). */
typedef struct metering_line {
    char               job[64], node[64], site[64], end_event[24];
    unsigned           att, window_ms, resets;
    unsigned long long window, first_ms, last_ms, gpu_ms, energy_mj, from_gpu_ms,
                       from_energy_mj, dropped_gpu_ms, site_seq, ckpt_gpu_ms, ckpt_energy_mj,
                       raw_gpu_ms, raw_energy_mj;
    bool               final, has_raw;
} metering_line;
bool metering_line_read(const char *line, metering_line *l);

#endif
