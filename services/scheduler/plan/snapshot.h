/* snapshot.h -- the scheduler's in-memory view of the fleet (pure: no I/O).
 *
 * The service feeds it from the registry's messages (msg_tenant, msg_site,
 * msg_pool, msg_product, msg_node, msg_node_state, msg_heartbeat) and from its
 * own bookings; place.c, preempt.c read it. Sized for 100,000 nodes x 16 GPUs:
 * every entity is found by id in a hash table, every update is O(1) in the
 * fleet (O(GPUs of the node), O(holds of the node)), never a scan.
 *
 * Indexes (each an intrusive doubly-linked list with a count, so a node is
 * moved between lists in O(1) when it changes):
 *   - nodes by site; sites by region; sites by geographic cell (1 x 1 degree
 *     lat/lon grid, 180 x 360 cells; each cell also counts its nodes);
 *   - nodes by GPU model: a node whose GPUs all have one model is in that
 *     model's list, a node with mixed models (or none) in model 0 ("mixed"),
 *     which placement always walks too;
 *   - nodes by VRAM class: floor(log2(largest GPU VRAM in MiB)), 0..20;
 *   - nodes by free-GPU count 0..16 (popcount of the free mask).
 *
 * GPU masks are by GPU *index* (bit i = the GPU whose index is i, 0..63), the
 * same numbers the Attempt message books. A GPU is free when it is not held by
 * a booking; state (healthy, draining...) is a node filter, not a mask.
 *
 * Removal rules that keep indexes right without scans: a site with nodes is
 * not removed (-1: remove its nodes first, as the registry does); a node
 * removal drops its bookings. Pools, products and tenants reference others by
 * id and are resolved when a job is placed (a job-level O(pools + products)
 * walk, never per node of the fleet).
 *
 * Not thread-safe: one loop owns a snapshot. place() stamps sites it visits
 * (a generation number) and so takes a non-const snapshot. */
#ifndef SCHED_SNAPSHOT_H
#define SCHED_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msg_gen.h"

#define SNAP_ID_LEN      64
#define SNAP_NODE_GPUS   16      /* MSG_NODE_GPUS_MAXITEMS */
#define SNAP_POOL_MODELS 8       /* MSG_POOL_MODELS_MAXITEMS */
#define SNAP_PRICES      48      /* MSG_SITE_POWER_PRICES_MAXITEMS */
#define SNAP_VRAM_CLASSES 21     /* log2(1 TiB in MiB) = 20 */
#define SNAP_GEO_LAT     180
#define SNAP_GEO_LON     360
#define SNAP_MAX_NAMES   4096    /* distinct GPU models, distinct regions */
#define SNAP_MODEL_MIXED 0       /* model id of a node with mixed or no GPUs */
#define SNAP_NONE        (-1)
#define SNAP_HEIR_ATTEMPT 0      /* a hold for a preemptor, not an attempt */

/* Node states (same numbers as MSG_NODE_STATE_*). */
enum { SNAP_UNKNOWN = 0, SNAP_HEALTHY = 1, SNAP_SUSPECT = 2, SNAP_DRAINING = 3,
       SNAP_QUARANTINED = 4, SNAP_LOST = 5, SNAP_CORDONED = 6 };

typedef struct snap_list { int32_t head; uint32_t count; } snap_list;
typedef struct snap_link { int32_t prev, next; } snap_link;

/* id -> slot, chained; entries pooled, buckets doubled as it grows. */
typedef struct snap_map_ent { char key[SNAP_ID_LEN]; int32_t val, next; } snap_map_ent;
typedef struct snap_map {
    int32_t *bucket; uint32_t nbucket;
    snap_map_ent *ent; uint32_t nent, cap; int32_t free_ent;
    uint32_t count;
} snap_map;

typedef struct snap_tenant {
    char id[SNAP_ID_LEN], parent[SNAP_ID_LEN];
    uint32_t weight;              /* fair share (Tenant.fair_share_weight), >= 1 */
    bool used;
} snap_tenant;

typedef struct snap_price { int32_t start_min; int64_t micros_per_kwh; } snap_price;

typedef struct snap_site {
    char id[SNAP_ID_LEN], tenant[SNAP_ID_LEN], currency[4];
    int32_t region;               /* name id; SNAP_NONE if empty */
    double lat, lon;
    int32_t latency_tier, pue_milli, timezone_min;
    double rtt_ms;                /* measured uplink RTT (mean of its nodes) */
    snap_price price[SNAP_PRICES]; uint32_t nprice;   /* sorted by start */
    snap_list nodes;
    snap_link rlink, glink;       /* in its region's list, its cell's list */
    int32_t cell;
    uint32_t visit_gen;           /* place(): visited in this walk */
    uint32_t waiting;             /* non-zero: new (or a new node of it) since the feed's
                                   * last load of pools and products (a product may price
                                   * it): not placed on yet; the feed's mark number */
    bool used;
} snap_site;

typedef struct snap_pool {
    char id[SNAP_ID_LEN], tenant[SNAP_ID_LEN], site[SNAP_ID_LEN];
    int32_t scope;                /* MSG_POOL_SCOPE_* */
    int32_t region;               /* name id */
    int32_t model[SNAP_POOL_MODELS]; uint32_t nmodel;   /* model ids; 0: all */
    bool used;
} snap_pool;

typedef struct snap_product {
    char id[SNAP_ID_LEN], pool[SNAP_ID_LEN], site[SNAP_ID_LEN], currency[4];
    int32_t model;                /* model id, SNAP_NONE: by VRAM class */
    uint32_t min_vram_mb;
    int64_t price;                /* micro-units per GPU-hour */
    bool used;
} snap_product;

typedef struct snap_gpu { int32_t index, model; uint32_t vram_mb; } snap_gpu;

/* A booking: GPUs of a node held by one attempt of one job. */
typedef struct snap_hold {
    char job[SNAP_ID_LEN];
    uint32_t attempt;
    int32_t priority;
    uint64_t mask;
    bool interruptible;
    bool evicting;                /* chosen as a victim: not chosen again */
    int32_t next;                 /* next hold of the node, or free list */
} snap_hold;

enum { SNAP_IX_SITE, SNAP_IX_MODEL, SNAP_IX_VRAM, SNAP_IX_FREE, SNAP_IX_N };

typedef struct snap_node {
    char id[SNAP_ID_LEN];
    int32_t site;
    snap_gpu gpu[SNAP_NODE_GPUS]; uint32_t ngpu;
    uint64_t all_mask, free_mask;
    int32_t state;
    bool cordoned;
    bool claimed;                 /* fair.h hold: kept for the held job */
    int32_t holds;                /* first hold, SNAP_NONE */
    uint32_t heir_holds;          /* holds of attempt SNAP_HEIR_ATTEMPT */
    uint32_t fail_milli;          /* failures x 1000 at fail_at_ms */
    uint64_t fail_at_ms;          /* monotonic */
    int32_t temp_c;               /* hottest GPU; INT32_MIN: unknown */
    int32_t key[SNAP_IX_N];       /* the list each index keeps it in */
    snap_link link[SNAP_IX_N];
    bool used;
} snap_node;

typedef struct snap_cell { snap_list sites; uint32_t nodes; } snap_cell;
typedef struct snap_region { snap_list sites; uint32_t nodes; } snap_region;

typedef struct snap_cfg {
    uint32_t fail_half_life_ms;   /* decay of failed starts and faults */
} snap_cfg;

typedef struct snap {
    snap_cfg cfg;
    snap_map tenant_ix, site_ix, pool_ix, product_ix, node_ix, model_ix, region_ix;
    snap_tenant *tenant; uint32_t ntenant, tenant_cap; int32_t tenant_free;
    snap_site *site; uint32_t nsite, site_cap; int32_t site_free;
    snap_pool *pool; uint32_t npool, pool_cap; int32_t pool_free;
    snap_product *product; uint32_t nproduct, product_cap; int32_t product_free;
    snap_node *node; uint32_t nnode, node_cap; int32_t node_free;
    snap_hold *hold; uint32_t nhold, hold_cap; int32_t hold_free;
    uint32_t nodes, sites;        /* live counts */
    char (*model_name)[32]; uint32_t nmodel;
    char (*region_name)[SNAP_ID_LEN]; uint32_t nregion;
    snap_list *by_model;          /* [nmodel] */
    snap_region *by_region;       /* [nregion] */
    snap_list by_vram[SNAP_VRAM_CLASSES];
    snap_list by_free[SNAP_NODE_GPUS + 1];
    snap_cell *cell;              /* [SNAP_GEO_LAT * SNAP_GEO_LON] */
    uint32_t visit_gen;
} snap;

/* Setup. 0 on success, -1 on allocation failure. */
int  snap_init(snap *s, const snap_cfg *cfg);   /* cfg NULL: 1 h half-life */
void snap_free(snap *s);

/* Feed from the registry. Each returns 0, or -1 (unknown reference: the
 * node's site; out of memory; a site that still has nodes). */
int snap_tenant_upsert(snap *s, const msg_tenant *t);
int snap_tenant_remove(snap *s, const char *id);
int snap_site_upsert(snap *s, const msg_site *m);
int snap_site_remove(snap *s, const char *id);
int snap_site_rtt(snap *s, const char *id, double rtt_ms);
int snap_pool_upsert(snap *s, const msg_pool *m);
int snap_pool_remove(snap *s, const char *id);
int snap_product_upsert(snap *s, const msg_product *m);
int snap_product_remove(snap *s, const char *id);
/* A node (inventory + state + telemetry if present). Its bookings survive
 * an upsert; GPUs that disappeared lose their bits. */
int snap_node_upsert(snap *s, const msg_node *m);
int snap_node_remove(snap *s, const char *id);
int snap_node_state(snap *s, const msg_node_state *m);
int snap_node_cordon(snap *s, const char *id, bool cordoned);
int snap_node_claim(snap *s, const char *id, bool claimed);
/* Hottest GPU temperature from a heartbeat, and its uplink RTT is ignored
 * (the site's RTT comes from snap_site_rtt / msg_site.uplink_rtt_ms). */
int snap_node_heartbeat(snap *s, const msg_heartbeat *hb);
int snap_node_temp(snap *s, const char *id, int32_t temp_c);
/* One failed start or GPU fault at now_ms (monotonic); decays by half-life. */
int snap_node_fault(snap *s, const char *id, uint64_t now_ms);

/* Bookings. book: the GPUs (by index) must be present and free, else -1. */
int snap_book(snap *s, const char *node, uint64_t mask, const char *job,
              uint32_t attempt, int32_t priority, bool interruptible);
int snap_unbook(snap *s, const char *node, const char *job, uint32_t attempt);
int snap_mark_evicting(snap *s, const char *node, const char *job, uint32_t attempt);
/* A preempted attempt's bookings on node become holds for its preemptor
 * (reserve.h's hand-over): attempt SNAP_HEIR_ATTEMPT, never a victim.  A
 * booking of the heir on that node drops them (snap_book). -1: none. */
int snap_handover(snap *s, const char *node, const char *job, uint32_t attempt,
                  const char *heir);
/* The GPUs of n held for job (0 when none or job NULL). */
uint64_t snap_held_for(const snap *s, const snap_node *n, const char *job);

/* Reads. */
int32_t snap_node_find(const snap *s, const char *id);
int32_t snap_site_find(const snap *s, const char *id);
int32_t snap_pool_find(const snap *s, const char *id);
int32_t snap_product_find(const snap *s, const char *id);
int32_t snap_tenant_find(const snap *s, const char *id);
int32_t snap_model_find(const snap *s, const char *name);
int32_t snap_region_find(const snap *s, const char *name);
uint32_t snap_node_failures_milli(const snap *s, const snap_node *n, uint64_t now_ms);
int32_t snap_geo_cell(double lat, double lon);
/* The id map, for other modules (fair.c). init: empty; put: key absent. */
void    snap_map_init(snap_map *m);
int32_t snap_map_get(const snap_map *m, const char *key);
int     snap_map_put(snap_map *m, const char *key, int32_t val);
void    snap_map_del(snap_map *m, const char *key);
void    snap_map_free(snap_map *m);

/* Walks every index and checks its counts and links against the nodes;
 * 0 when consistent (tests). O(fleet). */
int snap_check(const snap *s);

#endif
