/* recovery.h -- gridpool-recovery: what to do when nodes and sites die.
 *
 * Policy only: it follows every NodeState (every instance, no queue
 * group, so each sees the whole fleet), turns most of a site's nodes lost
 * within a short window into ONE site event (and its return into another,
 * with the cause: power when the nodes came back rebooted, uplink when
 * they kept running), freezes rescheduling when so many sites go silent
 * at once that the fault must be the control plane's own, and asks the
 * scheduler (gp.int.sched.replace) to replace a lost node's attempts, at
 * a limited rate per site and region.  The scheduler holds the fence: it
 * ends the attempts only once their leases have surely expired.  Lost
 * nodes waiting for replacement are rows in PostgreSQL (recovery_nodes),
 * so a restarted or killed instance loses none and any instance carries
 * on (rows are claimed with SKIP LOCKED).  Loop thread only. */
#ifndef RECOVERY_H
#define RECOVERY_H

#include <stdbool.h>
#include <stdint.h>

#include "gp/app.h"
#include "gp/bus.h"
#include "gp/inventory.h"
#include "gp/limits.h"
#include "msg_gen.h"

typedef struct recovery_cfg {
    gp_common_cfg common;
    unsigned      replace_ms;          /* replace task period */
    unsigned      replace_batch;       /* lost nodes claimed per pass */
    unsigned      site_rate;           /* node replacements per site and minute */
    unsigned      region_rate;         /* ... per region and minute */
    unsigned      sites_ms;            /* how often the site inventory is reloaded */
    unsigned      site_window_ms;      /* losses within this window make one site event */
    unsigned      site_share_pct;      /* share of a site's nodes lost that is a site event */
    unsigned      isolation_pct;       /* share of all sites unreachable that freezes */
    unsigned      isolation_window_ms; /* ... when they went silent within this window */
    unsigned      isolation_min_sites; /* ... and at least this many (a small fleet) */
    unsigned      thaw_ms;             /* after a freeze, replacements are rate-limited this long */
    unsigned      thaw_rate;           /* ... to this many nodes a minute, fleet-wide */
    char          leafz_urls[1024];    /* the hub servers' monitoring URLs, comma-separated */
    unsigned      leafz_ms;            /* how often they are read */
    unsigned      leaf_dead_ms;        /* how long the hub may take to see a dead leaf link */
} recovery_cfg;

extern const gp_cfg_opt recovery_cfg_opts[];       /* config.c */
extern const gp_migration recovery_migrations[];
extern const gp_grant recovery_db_grants[];    /* dbgrants.c */

/* A leaf connection's key: "<hub>|<ip>|<port>". */
#define RLEAF_CONN 96

/* A token bucket: rate per minute, capacity 10 s of it (at least 1). */
typedef struct rbucket {
    double   tokens;
    uint64_t at_ms;                 /* gp_mono_ms of the last refill */
} rbucket;

typedef struct rsite {
    char     id[GP_MAX_ID + 1];
    char     region[GP_MAX_ID + 1];
    uint32_t nodes;                 /* in the inventory (the registry's site, gp/inventory.h) */
    uint32_t seen;                  /* nodes this instance has seen a state of */
    uint32_t lost;                  /* its nodes lost now */
    uint64_t first_lost_ms;         /* wall ms: when lost went from 0 to 1 */
    uint64_t first_lost_mono;       /* the same on the monotonic clock (leaf.c's wait) */
    uint64_t unreachable_ms;        /* wall ms: when the share was reached */
    uint32_t rtt_n;                 /* this episode's lost nodes with a last uplink RTT */
    double   rtt_sum, rtt_max;
    bool     unreachable;           /* a site event is open */
    uint64_t since_ms;
    uint32_t rebooted, resumed, restarted;   /* how its nodes came back since */
    bool     announced;             /* its unreachable event went out (it may wait: leaf.c) */
    bool     leaf_seen;             /* its agents were ever seen behind a leaf link */
    bool     leaf_up;
    uint64_t leaf_at_ms;            /* wall ms: the link's last change */
    char     leaf_conn[RLEAF_CONN];  /* the hub connection its subjects came over */
    rbucket  bucket;
} rsite;

typedef struct rnode {
    char     id[GP_MAX_ID + 1];
    int32_t  site;                  /* index in sites */
    bool     lost;
} rnode;

/* id -> index, open addressing (power-of-two slots, linear probing). */
typedef struct rmap {
    int32_t *slot;                  /* -1 empty */
    uint32_t cap;
} rmap;

struct recovery;

/* The calls up into sites.c from the files below it.  Calls go one way:
 * main.c -> sites.c -> leaf.c, replace.c -> fleet.c -> map.c; where a
 * lower file needs sites.c it calls through these, which
 * recovery_sites_start sets before any task runs. */
typedef struct recovery_up {
    /* leaf.c: a site turned unreachable that waited for the leaf verdict
     * gets its unreachable event (leaf_evidence: leaf.c's own words when
     * it decided the cause, NULL: what the link says now) */
    void (*site_announce)(struct recovery *r, rsite *s, int32_t cause,
                          const char *leaf_evidence);
} recovery_up;

typedef struct recovery {
    gp_app             *app;
    recovery_up         up;          /* set by recovery_sites_start */
    const recovery_cfg *cfg;
    rsite              *sites;
    uint32_t            nsites, capsites;
    rmap                site_ix;
    rnode              *nodes;
    uint32_t            nnodes, capnodes;
    rmap                node_ix;
    struct rregion {
        char    id[GP_MAX_ID + 1];
        rbucket bucket;
    }                  *regions;     /* few: found by a linear search */
    uint32_t            nregions;
    gp_inventory       *inv;         /* the registry's sites, followed (sites.c) */
    uint32_t            sites_last;  /* sites at the last complete load (logged when it changes) */
    bool                frozen;
    uint64_t            thaw_until;  /* gp_mono_ms */
    rbucket             thaw_bucket;
    bool                replace_busy;
    uint64_t            pending_next_ms; /* gp_mono_ms of the next pending-gauge count */
    unsigned            inflight;    /* replace calls out */
    gp_bus_sub         *state_sub;
    struct rleaf       *leaf;        /* leaf.c; NULL when leafz-urls is empty */
    uint64_t           *m_site_events[2], *m_isolation_events[2];
    uint64_t           *m_replaced, *m_waits, *m_deferred, *m_replace_errors, *m_lost_seen;
    double             *m_frozen, *m_pending, *m_unreachable;
} recovery;

/* map.c */
int32_t rmap_find(const rmap *m, const void *base, size_t stride, const char *id);
int     rmap_put(rmap *m, const void *base, size_t stride, const char *id, int32_t ix);
void    rmap_free(rmap *m);
double  rbucket_take(rbucket *b, unsigned per_min, uint64_t now_ms);

/* fleet.c: the in-memory view of sites and nodes */
/* A site by id (NULL when the inventory lacks it), and its region's
 * bucket (NULL when it has none). */
rsite   *recovery_site(recovery *r, const char *id);
rbucket *recovery_region_bucket(recovery *r, const rsite *s);
/* A site's record, a node's (at site index site), a region: added when
 * new (the records: NULL without memory). */
rsite   *recovery_site_get(recovery *r, const char *id);
rnode   *recovery_node_get(recovery *r, const char *id, int32_t site);
void     recovery_region_add(recovery *r, const char *region);
/* A node PostgreSQL still has lost (at start): counted, no event. */
void     recovery_mark_lost(recovery *r, const char *site, const char *node);

/* sites.c: the inventory of sites (followed: gp/inventory.h), node
 * states, site events, isolation.  A site turned unreachable announces it
 * now or, behind a leaf link that is still up, once leaf.c can tell
 * (up.site_announce). */
gp_err recovery_sites_start(recovery *r);
void   recovery_sites_free(recovery *r);

/* leaf.c: the sites' NATS leaf links (nats-server's /leafz) as evidence */
gp_err recovery_leaf_start(recovery *r);
void   recovery_leaf_run(gp_app *app, void *arg);
void   recovery_leaf_free(recovery *r);
/* For a site just unreachable: true when the verdict can wait for the
 * leaf link (the site is behind one and it is still up). */
bool   recovery_leaf_wait(recovery *r, const rsite *s);
/* The leaf evidence of s, for an event ("" when there is none). */
void   recovery_leaf_evidence(recovery *r, const rsite *s, char *out, size_t n);

/* start.c: gp_app_main's hooks (state: a recovery).  start loads the lost
 * nodes once serving starts; stop cancels the /leafz reads. */
gp_err recovery_init(gp_app *app, const void *cfg, void *state);
void   recovery_start(gp_app *app, void *state);
void   recovery_stop(gp_app *app, void *state);
void   recovery_free(void *state);

/* replace.c: lost nodes in PostgreSQL, replaced through the scheduler */
void recovery_replace_start(recovery *r);
void recovery_replace_run(gp_app *app, void *arg);
/* A node was lost (at_ms: the transition's time) or came back. */
void recovery_node_lost(recovery *r, const char *site, const char *node, uint64_t at_ms,
                        const char *reason);
void recovery_node_back(recovery *r, const char *node, uint64_t at_ms);
/* At start: the nodes PostgreSQL still has lost, into the in-memory view. */
void recovery_load_lost(recovery *r);

#endif
