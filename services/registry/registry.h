/* registry.h -- the registry service: inventory in PostgreSQL (tenants,
 * sites, nodes, GPUs, pools, products) and live node state in Redis.
 * Loop thread only. */
#ifndef REGISTRY_H
#define REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "gp/app.h"
#include "gp/backoff.h"
#include "gp/buf.h"
#include "gp/clock.h"
#include "gp/detect.h"
#include "gp/id.h"
#include "gp/kvscript.h"
#include "gp/limits.h"
#include "msg_gen.h"

typedef struct registry_cfg {
    gp_common_cfg common;
    unsigned      heartbeat_ms;      /* interval handed to agents */
    unsigned      detect_floor_ms;   /* failure detector (gp/detect.h); 0: from heartbeat-ms */
    unsigned      detect_ceiling_ms;
    unsigned      detect_k;
    unsigned      lost_ms;
    unsigned      q_xids;            /* quarantine: bad-GPU XIDs within q_window_ms */
    unsigned      q_window_ms;
    unsigned      q_dbe;             /* ... new uncorrectable ECC errors */
    unsigned      q_flaps;           /* ... returns from lost within q_flap_window_ms */
    unsigned      q_flap_window_ms;
    unsigned      lease_ms;          /* attempt lease handed to agents */
    unsigned      sweep_ms;          /* how often stale nodes are looked for */
    unsigned      history_days;      /* node_transitions older than this are deleted */
    unsigned      history_ms;        /* ... looked for this often */
    unsigned      hb_backlog;        /* Redis commands in flight past which beats are shed */
    unsigned      hb_max_wait_ms;    /* or the age of the oldest one */
    unsigned      hb_window;         /* heartbeat scripts in flight at most */
    unsigned      hb_pending_max;    /* nodes whose beat waits for the window, at most */
} registry_cfg;

/* config.c: the options; prepare: the detector's settings (r->detect and
 * the scripts' arguments), or exit 2 saying why they cannot work. */
extern const gp_cfg_opt registry_cfg_opts[];
int registry_prepare(void *cfg, void *state);
extern const gp_migration registry_migrations[];   /* migrate.c */
extern const gp_grant registry_db_grants[];    /* dbgrants.c */

/* A node state change waiting to be written to PostgreSQL: the node's
 * row, and a record in node_transitions. */
typedef struct state_change {
    char     node[GP_MAX_ID + 1];
    char     site[GP_MAX_ID + 1];
    char     reason[MSG_NODE_STATE_REASON_MAXLEN + 1];
    int32_t  prev;
    int32_t  state;
    uint64_t seq;                  /* queue order: the higher one is newer */
    uint64_t at_ms;                /* wall ms of the transition (NodeState.at_ms): the row
                                      takes it only when newer than its state_since */
} state_change;

/* A registration's update of an existing node (nodes.c one at a time,
 * regbatch.c many). */
#define REGISTRY_NODE_UPSERT_SET                                                            \
    " ON CONFLICT (id) DO UPDATE SET site = EXCLUDED.site, hostname = EXCLUDED.hostname,"   \
    " agent_version = EXCLUDED.agent_version, boot_id = EXCLUDED.boot_id,"                  \
    " cpu_cores = EXCLUDED.cpu_cores, mem_mb = EXCLUDED.mem_mb, state = 'healthy',"          \
    " state_since = CASE WHEN nodes.state = 'healthy' THEN nodes.state_since"               \
    " ELSE EXCLUDED.state_since END,"                                                       \
    " registered_at = now()"

/* A node's keys to remove from a shard, kept until Redis confirmed it
 * (live.c: registry_live_forget). */
typedef struct live_forget {
    struct registry *r;
    char             site[GP_MAX_ID + 1];
    char             node[GP_MAX_ID + 1];
    int              st;                 /* FORGET_* in live.c */
    bool             again;              /* asked for again while in flight: resend */
    unsigned         fails;              /* failed tries so far */
    gp_backoff       backoff;
    uint64_t         not_before;         /* gp_mono_ms of the next try */
} live_forget;

typedef struct registry {
    gp_app             *app;
    const registry_cfg *cfg;
    gp_kvscript         hb_script, sweep_script, sweep_read_script, reseed_script, unlock_script;
    gp_kvscript         forget_script, contact_script, adm_script;
    gp_detect_cfg       detect;            /* the detector's settings, as the scripts get them: */
    char                detect_args[80];   /* "interval floor ceiling k lost" */
    char                sweep_frozen_args[84];  /* the same and " 1": nobody turns lost */
    bool                frozen;            /* gp:recovery:frozen was there at the last look */
    char                q_window[16], q_flap_window[16];   /* ms, for the hb script */
    uint64_t           *m_quarantines;
    live_forget        *forgets;           /* cleanups not yet confirmed (REGISTRY_FORGET_MAX) */
    unsigned            nforgets;          /* entries in use */
    struct sweep_chain *chains;            /* one per shard (live.c) */
    bool               *sweep_more;        /* per shard: its last read came back full */
    unsigned            sweeps_inflight;   /* chains of this tick not yet ended */
    unsigned            sweep_budget;      /* nodes this tick may still look at */
    bool                reseeding;         /* this instance holds the reseed lock or seeks it */
    unsigned            reseed_pending;    /* chunks of the reseed in flight (+1 while sending) */
    unsigned            reseed_bad;        /* chunks of the reseed that failed */
    int                 reseed_rows;
    gp_backoff          reseed_backoff;    /* after a failed reseed */
    uint64_t            reseed_not_before; /* gp_mono_ms */
    state_change       *changes;           /* batched nodes.state updates */
    unsigned            nchanges, capchanges;
    state_change       *inflight;          /* the batch PostgreSQL has not confirmed */
    unsigned            ninflight, capinflight;
    uint64_t            change_seq;
    bool                flushing;
    bool                stopping;          /* shutdown: flush at once, holding the drain */
    bool                holding;           /* a gp_app_hold is taken for the batch in flight */
    bool                overflow_logged;
    gp_backoff          flush_backoff;     /* after a failed batch write */
    uint64_t            flush_not_before;  /* gp_mono_ms */
    uint64_t           *m_hb, *m_hb_bad, *m_hb_shed, *m_transitions, *m_reseeds;
    uint64_t           *m_write_retries, *m_changes_dropped, *m_hb_unknown, *m_history_dropped;
    uint64_t           *m_register_again;
    struct hbq         *hbq;               /* beats waiting for the window (live.c) */
    struct regbatch    *regs;              /* registrations waiting to be written (regbatch.c) */
    unsigned            hb_inflight;       /* heartbeat scripts in flight */
    bool                hb_pumping;        /* hbq_pump is running: no re-entry */
    double             *m_hb_waiting;
    uint64_t            last_at_ms;        /* the last transition's time: the next is later */
    uint64_t           *m_reseed_failures, *m_contacts;
    uint64_t           *m_forget_failures, *m_forget_dropped;
    double             *m_forget_pending;
    double             *m_changes_pending;  /* queued + in flight, set at each scrape */
    /* Redis's clock, read every CLOCK_EVERY_MS (TIME) and carried on by the
     * monotonic clock: the time of state transitions (live.c) */
    uint64_t            clock_redis_ms, clock_mono_ms, clock_sent_mono;
    bool                clock_ok, clock_asking;
} registry;

/* now, wall clock, ms since the epoch */

/* true for a non-empty [A-Za-z0-9_-]* id: ids are NATS subject tokens */

/* admin.c: tenants, sites, pools, products */
extern const gp_route registry_admin_routes[];
/* nodes.c: register, heartbeat, lease, node admin */
extern const gp_route registry_node_routes[];
/* live.c: Redis scripts, the stale sweep and state publication */
void registry_live_start(registry *r);
void registry_live_cron(gp_app *app, void *arg);

/* states.c: state names (the schema's), and the queue of node state
 * changes written to PostgreSQL in batches. */
const char *registry_state_name(int32_t state);
int32_t registry_state_from_name(const char *s);
void registry_states_start(registry *r);
/* Queues one change (at_ms: the transition's time, registry_now_ms) and
 * writes it unless a batch is in flight or a retry backoff runs. */
void registry_states_queue(registry *r, const char *site, const char *node, int32_t prev,
                           int32_t state, const char *reason, uint64_t at_ms);
/* Writes what is queued if the backoff allows (the cron calls it). */
void registry_states_flush(registry *r);
/* The stop hook: writes the queued state changes at once (ignoring the
 * retry backoff) and holds the drain until PostgreSQL answers (bounded by
 * drain-ms); what is left unwritten is logged (node_state_unwritten). */
void registry_states_stop(gp_app *app, void *arg);
/* Deletes node_transitions older than history-days, a batch a run. */
void registry_history_trim(gp_app *app, void *arg);

void registry_live_transition(registry *r, const char *site, const char *node, int32_t prev,
                              int32_t state, const char *reason);
/* What a heartbeat says about the node's health (nodes.c reads it from
 * the decoded beat; live.c's script counts it over the window). */
typedef struct beat_health {
    unsigned bad_xids;              /* XIDs of a bad-GPU class (gp/xid.h) in this beat */
    uint64_t dbe;                   /* uncorrectable ECC errors, all GPUs, cumulative */
    char     fatal[96];             /* a GPU lost or fallen off the bus: why, else "" */
    char     last_xid[48];          /* the last bad XID seen, for the reason */
} beat_health;

/* Records a heartbeat (raw msgpack) in Redis; publishes a transition if
 * the node's state changed, and quarantines it when a rule says so. */
void registry_live_beat(registry *r, const char *site, const char *node, const void *raw,
                        size_t len, double rtt_ms, const beat_health *h);
/* Now, ms since the epoch, on Redis's clock (the clock of the live view)
 * as last read, carried on by the monotonic clock; the wall clock until
 * Redis has answered once.  The time of state transitions and of a
 * registration's state_since, so every instance stamps them alike. */
uint64_t registry_now_ms(registry *r);
/* Heartbeats wait for the window to Redis (live.c): the sweep turns nobody
 * lost while they do. */
bool     registry_live_behind(const registry *r);
void     registry_live_free_queue(registry *r);
/* Removes a node's keys from a site's shard (hash with its 'reg' mark,
 * index entry, RTT): after a delete, and in the old site after a move.
 * Checked: a failed removal is retried from the cron with backoff until
 * Redis confirms it (at most REGISTRY_FORGET_MAX pending; past that it is
 * sent once unchecked and counted). */
#define REGISTRY_FORGET_MAX 1024

/* Deadline of the admin list routes (a page of sites, pools, nodes...),
 * longer than request-timeout-ms: a pool's GPU counts join every GPU it
 * spans (~0.3 s a count at 100,000 nodes, seconds on a loaded machine),
 * and an inventory load that loses one page to a timeout starts over.
 * The scheduler's feed waits as long (feed.c). */
#define REGISTRY_LIST_TIMEOUT_MS 30000
void registry_live_forget(registry *r, const char *site, const char *node);
/* Marks a node healthy in Redis after registration (its 'reg' mark) and
 * publishes it; done is called exactly once (maybe at once) with OK once
 * Redis took the write, or the error: the registration ends there. */
typedef void registry_live_written_cb(void *arg, gp_err err);
/* how: the transition's reason ("registered", "registered: rebooted (new
 * boot id)", ...: recovery tells a power cut by it). */
void registry_live_register(registry *r, const char *site, const char *node, const char *how,
                            registry_live_written_cb *done, void *arg);

/* A lease renewal seen: contact for the failure detector (not waited for). */
void registry_live_contact(registry *r, const char *site, const char *node);
/* Sets a node's mode in Redis ('' clears it: healthy again unless suspect
 * or lost) after PostgreSQL took it, and publishes the transition with
 * reason; done gets OK with the states before and after, NOTFOUND (no
 * 'reg' mark) or the Redis error.  Not OK returned: done is not called. */
typedef void registry_live_adm_cb(void *arg, gp_err err, int32_t prev, int32_t state);
gp_err registry_live_adm(registry *r, const char *site, const char *node, const char *adm,
                         const char *reason, registry_live_adm_cb *done, void *arg);

/* changes.c: SiteChange and NodeChange, published after the commit with
 * the row's inventory revision.  verb is the admin verb ("create",
 * "update", "delete"); site or node is the row written (NULL for a
 * delete), only read. */
void registry_site_changed(registry *r, const char *verb, const char *id, uint64_t rev,
                           const msg_site *site);
void registry_node_changed(registry *r, int32_t change, const char *site, const char *id,
                           uint64_t rev, const msg_node *node);

/* nodes.c */
void registry_nodes_free(registry *r);
/* regbatch.c: registrations written to PostgreSQL in batches.  Its
 * caller (nodes.c) says how to write one registration on its own (the
 * fallback of a failed batch) and what follows the inventory's write (row
 * i of res: previous site, previous boot id, revision, region; -1: none). */
typedef struct regbatch_ops {
    gp_err (*one)(gp_req *req);
    void   (*row)(gp_req *req, const PGresult *res, int i);
} regbatch_ops;
void   registry_regbatch_add(registry *r, gp_req *req, const regbatch_ops *ops);
void   registry_regbatch_free(registry *r);

/* start.c: gp_app_main's init and free hooks (state: a registry). */
gp_err registry_init(gp_app *app, const void *cfg, void *state);
void   registry_free(void *state);

#endif
