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
 * the same one restarted, goes on from it. */
#ifndef METERING_H
#define METERING_H

#include <stdbool.h>
#include <stdint.h>

#include "gp/app.h"
#include "gp/kvscript.h"
#include "gp/limits.h"
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

typedef struct metering {
    gp_app             *app;
    const metering_cfg *cfg;
    gp_kvscript         beat, due, tick, close, ckpt, ack, review;
    bool                frozen;
    unsigned            publishing;
    unsigned            sweep_shard;      /* where the last sweep stopped */
    metering_facts     *facts;            /* METERING_FACTS_SLOTS, direct-mapped */
    uint64_t           *m_beats, *m_stale, *m_resets, *m_dropped, *m_implausible, *m_late;
    uint64_t           *m_records, *m_published, *m_publish_errors, *m_review;
    uint64_t           *m_closed_event, *m_closed_silent, *m_checkpoints, *m_final_waits;
    uint64_t           *m_facts_errors;
    double             *m_frozen, *m_publishing;
} metering;

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

/* outbox.c */
void   metering_outbox_start(metering *m);
void   metering_outbox_free(metering *m);
/* Publishes freshly written records (their claim is the caller's). */
void   metering_publish(metering *m, unsigned shard, const char *id);
/* Looks for records left unpublished (a crashed instance's, failed ones). */
void   metering_outbox_run(gp_app *app, void *arg);
/* The scheduler's facts of an attempt, from the cache or asked; cb once
 * (err NOTFOUND: the scheduler has no such attempt on that node). */
typedef void metering_facts_cb(void *arg, gp_err err, const msg_attempt_facts *f);
void   metering_facts_get(metering *m, const char *job, uint32_t att, const char *node,
                          bool need_ended, metering_facts_cb *cb, void *arg);

/* keys.c: key names (scripts.h's layout). */
#define METERING_KEY_LEN 256
void metering_key(char *out, unsigned shard, const char *what);
void metering_att_key(char *out, unsigned shard, char kind, const char *member);
void metering_member(char *out, size_t n, const char *job, uint32_t att, const char *node);

#endif
