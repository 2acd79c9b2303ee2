/* place.h -- where a job goes (pure: reads a snapshot, writes a result).
 *
 * TENANT RIGHTS RULE. A tenant may use a pool owned by itself or by any
 * ancestor on its parent chain (the network operator's pools are open to every
 * tenant under it; a site operator's pools to its own customers), never a
 * pool of a sibling, a cousin or a descendant. A product is usable iff its
 * pool is. A node is in a pool by scope (global: every site; region: the
 * node's site.region == pool.region; site: the node's site == pool.site) and
 * by the pool's model list (empty: every model; else only GPUs of a listed
 * model count). A job naming a pool or a product uses only that pool; a job
 * naming neither may use every pool the tenant has rights on (a GPU counts
 * when one such pool holds it). The parent chain is followed at most
 * PLACE_MAX_DEPTH steps (a cycle in bad data ends there).
 *
 * PRICE of a node for a job: the job's product price; else the cheapest
 * usable product (of the job's pool, or of every pool the tenant may use)
 * whose pool holds the node, whose site is empty or the node's site, and that
 * matches at least gpus_per_node of the job's fitting GPUs (model equal, or
 * no model and min_vram_mb <= the GPU's VRAM). With a job currency, products
 * in that currency are preferred. A job with a max price drops a node with no
 * price (price), a price in another currency (currency), or a higher price
 * (price).
 *
 * LATENCY MODEL. estimate_ms = great-circle distance origin -> site
 * (haversine, Earth radius 6371 km) / 100 km per ms (light in fibre runs
 * ~200,000 km/s, i.e. 200 km per ms one way, 100 km per ms counted there and
 * back) + the site's measured uplink RTT + a tier penalty (latency tier 0, 1,
 * 2, 3: 0, 5, 15, 40 ms; above 3: 40). Berlin -> Munich, 504 km: 5.04 ms +
 * RTT + tier. A job with max_latency_ms keeps sites whose estimate <= bound
 * (latency); without origin_lat/lon the whole job fails on origin. Only the
 * geographic cells that can hold a site within bound * 100 km are visited.
 *
 * FILTERS, in this fixed order; a node counts once, under the FIRST it fails
 * (result.reasons[MSG_PENDING_REASON_REASON_*]):
 *   no_rights  the node is in no pool the tenant may use (job without pool)
 *   pool       the node is not in the job's pool (or product's pool)
 *   product    the product is pinned to another site
 *   model      no GPU of an acceptable model (job list, product, pool list)
 *   vram       GPUs of the model, none with enough VRAM
 *   gpus       fewer fitting GPUs than gpus_per_node (the node is too small)
 *   unhealthy  state is not healthy (unknown, suspect, lost, quarantined)
 *   draining   draining or cordoned
 *   price      no price with a max price, or a higher price
 *   currency   priced only in other currencies
 *   latency    estimate above max_latency_ms
 *   reserved   enough fitting GPUs, but not enough free now (or the node is
 *              claimed for a held big job, fair.h)
 *   site_nodes (multi-node) a site with fewer than `nodes` passing nodes:
 *              counted per SITE; its passing nodes count under no reason.
 * Job-level failures do not walk nodes; they return PLACE_INVALID with the
 * reason in result.job_reason: no_rights (unknown tenant, pool or product of
 * a tenant without rights), pool (unknown pool), product (unknown product),
 * origin (max_latency_ms without origin).
 *
 * INDEX AND BOUND. place() sizes every index the job can use (the product's
 * or pool's site; the pool's region; the geographic cells within the latency
 * bound; the lists of the acceptable models (+ mixed nodes); VRAM classes >=
 * the job's; free-GPU buckets >= gpus_per_node) and walks the smallest. Nodes
 * the index leaves out are not examined (result.index_skipped). The walk
 * stops when it has found max(k_min, pct% of the index's size) feasible
 * nodes, capped at k_max (Kubernetes' percentageOfNodesToScore, Nomad's
 * candidate limit): at most that many are scored; result.considered counts
 * nodes examined. The cap is what keeps a placement's cost flat as the
 * fleet grows: 5% of 100,000 nodes is 5,000 nodes (~1 ms of CPU) a job,
 * which alone would bound one instance under 1,000 placements/s; 300
 * feasible nodes still leave the score a wide choice (Nomad looks at
 * log2(n) for a service job, 2 for a batch job).
 * With walk_all (explaining a pending job, and tests) every node is examined.
 * Multi-node jobs: when a node of a not yet visited site is met, the whole
 * site is examined once; feasible sites are counted instead of nodes.
 *
 * SCORE (integers; higher is better; each part 0..1000 times its weight):
 *   latency     x4  1000 - 10 per ms of estimate (0 from 100 ms); 0 w/o origin
 *   price       x2  priced: 1000 - 1 per 10,000 micros/GPU-h (0 from 10.0);
 *                   unpriced: power at the site now (schedule at the site's
 *                   local time x PUE): 1000 - 1 per 1,000 micros/kWh
 *   packing     x3  1000 * gpus_per_node / free GPUs of the node (best fit:
 *                   a node the job fills scores 1000; whole free nodes kept)
 *   reliability x3  1000 - 250 per recent failure (decayed, snapshot.h)
 *   thermal     x1  1000 at <= 40 C, -20 per C above, 0 from 90 C; 500 unknown
 * A multi-node choice scores the mean of its nodes. Ties: fewer GPUs left.
 *
 * The result keeps up to max_choices ranked choices so the caller falls back
 * to the next one when the atomic Redis reservation loses a race. No memory
 * is allocated; a placement takes O(pools + products + cells + examined). */
#ifndef SCHED_PLACE_H
#define SCHED_PLACE_H

#include "snapshot.h"

#define PLACE_MAX_CHOICES 16
#define PLACE_MAX_NODES   8        /* MSG_JOB_SPEC_NODES_MAX */
#define PLACE_MAX_POOLS   256      /* usable pools per job considered */
#define PLACE_MAX_PRODUCTS 256     /* usable products per job considered */
#define PLACE_MAX_DEPTH   16       /* parent chain */
#define PLACE_REASONS     15       /* PendingReason enum size */
#define PLACE_MAX_AVOID   16       /* nodes a retry avoids */

#define PLACE_W_LATENCY 4
#define PLACE_W_PRICE   2
#define PLACE_W_PACKING 3
#define PLACE_W_RELIAB  3
#define PLACE_W_THERMAL 1

enum { PLACE_OK = 0, PLACE_NONE = 1, PLACE_INVALID = 2 };

/* Which index the walk used. */
enum { PLACE_IX_ALL, PLACE_IX_SITE, PLACE_IX_REGION, PLACE_IX_GEO, PLACE_IX_MODEL,
       PLACE_IX_VRAM, PLACE_IX_FREE };

struct place_choice;

typedef struct place_params {
    uint32_t k_min;          /* always look for at least this many feasible (50) */
    uint32_t pct;            /* ... or pct% of the index's nodes (5) */
    uint32_t k_max;          /* ... but never more than this many (300; 0: no cap) */
    uint32_t max_choices;    /* <= PLACE_MAX_CHOICES (8) */
    uint64_t now_wall_ms;    /* the power price's time of day */
    uint64_t now_mono_ms;    /* failure decay */
    bool claimant;           /* the job is the held job: claimed nodes are its own */
    bool walk_all;           /* explain mode: examine every node, no bound, so
                              * every node counts under its first failed filter */
    bool ignore_free;        /* every present GPU counts as free (to find a
                              * held job's target, fair.h) */
    /* preempt.c: GPUs of bookings with priority < evict_below that are
     * interruptible and not evicting count as free; 0: off. */
    int32_t evict_below;
    /* Optional order of choices (preempt.c: the victims' cost): lower rank
     * first, then score; UINT64_MAX drops the choice. NULL: score only. */
    uint64_t (*rank)(void *arg, const snap *s, const struct place_choice *c);
    void *rank_arg;
    /* Nodes where the job's earlier attempts failed to start or were lost
     * (Nomad's reschedule penalty, made absolute): a choice that uses one
     * ranks after every choice that does not, so a retry goes elsewhere
     * when it can and still lands there when nothing else fits. */
    const char (*avoid)[SNAP_ID_LEN];
    uint32_t navoid;
    /* The job's id: GPUs held for it (a preemption it made handed them
     * over, snap_handover) count as free.  heir_walk: it may hold some now
     * (its preemption runs), so the walk does not use the free-count index,
     * which files a node by its GPUs free to everyone. */
    const char *heir;
    bool heir_walk;
    /* Breaks ties of rank, score and packing by a hash of the first node's
     * id mixed with this seed (one per instance): instances with the same
     * snapshot otherwise all raced for the same node and lost to each
     * other in Redis (two instances placed a third as fast as one). */
    uint32_t seed;
} place_params;

typedef struct place_score {
    int32_t total, latency, price, packing, reliability, thermal;
} place_score;

typedef struct place_choice {
    char site[SNAP_ID_LEN];
    int32_t site_ix;
    uint32_t nnodes;
    char node[PLACE_MAX_NODES][SNAP_ID_LEN];
    int32_t node_ix[PLACE_MAX_NODES];
    uint64_t gpus[PLACE_MAX_NODES];     /* GPU index mask per node */
    uint64_t fit[PLACE_MAX_NODES];      /* every usable fitting GPU (preempt.c) */
    place_score score;
    double latency_ms;                  /* 0 without origin */
    bool priced;
    int64_t price_micros;               /* per GPU-hour, the costliest node */
    char currency[4];
    char product[SNAP_ID_LEN];          /* the product the price came from */
    uint32_t left;                      /* free GPUs left on its nodes (tie) */
    uint64_t rank;                      /* from params.rank; 0 without */
    uint32_t tie;                       /* last tie-break (params.seed) */
} place_choice;

typedef struct place_result {
    int status;                         /* PLACE_OK / NONE / INVALID */
    int job_reason;                     /* PLACE_INVALID: MSG_PENDING_REASON_* */
    uint32_t considered;                /* nodes examined */
    uint32_t feasible;                  /* nodes (multi-node: sites) that passed */
    uint32_t reasons[PLACE_REASONS];    /* first failed filter, per node */
    int index;                          /* PLACE_IX_* walked */
    uint32_t index_size;                /* nodes in that index */
    uint32_t index_skipped;             /* live nodes it left out */
    uint32_t nchoices;
    place_choice choice[PLACE_MAX_CHOICES];   /* best first */
} place_result;

void place_params_default(place_params *p);

/* tenant: the submitting tenant's id. spec: as decoded (has-bits read for
 * nodes, pool, product, origin, max_latency_ms, max price, currency).
 * Returns r->status. */
int place(snap *s, const char *tenant, const msg_job_spec *spec,
          const place_params *p, place_result *r);

/* The latency model (above): estimate from origin to the site, ms. */
double place_latency_ms(const snap_site *st, double lat, double lon);
/* Great-circle distance, km. */
double place_distance_km(double lat1, double lon1, double lat2, double lon2);
/* Power price at the site at wall time now, x PUE, micro-units per kWh. */
int64_t place_power_now(const snap_site *st, uint64_t now_wall_ms);
/* The rights rule: may tenant use pool (by index)? */
bool place_may_use(const snap *s, const char *tenant, const snap_pool *pool);

#endif
