/* gp/inventory.h -- one follower of the registry's inventory: its sites,
 * and its nodes when asked, kept in memory for a service that needs them
 * (alerting: a site's region; recovery: regions and sizes; billing: what
 * rating reads of a site; the scheduler: its snapshot of the fleet).
 *
 * How it stays right, whichever service starts first:
 *   - it subscribes to the registry's change events (SiteChange on
 *     gp.int.inventory.site.*, NodeChange on gp.int.inventory.node.*.*)
 *     before it reads anything, every instance (no queue group);
 *   - then it pages the full lists (gp.admin.site.list, gp.admin.node.list),
 *     retrying with gp/backoff.h (100 ms doubling to 5 s) until a load
 *     completes: NOROUTE or TIMEOUT while the registry is not up yet are
 *     normal, and cost a second at most once it is;
 *   - every record carries the registry's inventory revision (Site.rev,
 *     Node.rev: one PostgreSQL sequence over every write), and one is
 *     applied only over an older one: a page read before an event never
 *     undoes it, nor does a late event of another registry instance; a
 *     delete leaves a tombstone with its revision until a later complete
 *     load has passed it;
 *   - a complete load removes what neither it nor an event since its
 *     start has seen (deleted while no event reached us);
 *   - it reloads every resync_ms, and at once when the bus comes back
 *     after a disconnection (events may have been missed): the safety net.
 *
 * Callbacks tell the owner of each change as it is applied: a record put
 * (new, changed, or repeated by a reload: idempotent upserts) or deleted.
 * Nodes are put only after their site within one load; a complete load's
 * removals delete nodes before sites.
 *
 * Bad events (undecodable, an id that is no subject token, a change
 * without its record) are dropped and counted
 * (gp_inventory_bad_events_total); stale ones (an older revision) are
 * counted too (gp_inventory_stale_total).
 *
 * Loop thread only.  Owned by the caller; freed after the app (its task
 * and subscriptions go with the app; a call in flight is failed by the
 * app's shutdown while the follower still exists). */
#ifndef GP_INVENTORY_H
#define GP_INVENTORY_H

#include <stdbool.h>
#include <stdint.h>

#include "gp/app.h"
#include "gp/err.h"
#include "gp/limits.h"

struct msg_site;
struct msg_node;

typedef struct gp_inventory gp_inventory;

typedef struct gp_inv_price {
    int32_t start_min;                  /* minute of the day it starts at */
    int64_t micros_per_kwh;
} gp_inv_price;

/* A site as the follower keeps it (the fields services read). */
typedef struct gp_inv_site {
    char          id[GP_MAX_ID + 1];
    char          tenant[GP_MAX_ID + 1];   /* owner */
    char          region[GP_MAX_ID + 1];
    char          currency[4];
    double        lat, lon;
    int32_t       latency_tier;
    int32_t       pue_milli;
    int32_t       timezone_min;
    uint32_t      nodes, gpus;             /* as of its last write or reload */
    uint32_t      nprices;
    gp_inv_price *prices;                  /* nprices, ordered by start_min; owned */
    uint64_t      rev;
} gp_inv_site;

typedef struct gp_inv_node {
    char     id[GP_MAX_ID + 1];
    char     site[GP_MAX_ID + 1];
    uint32_t gpus;
    uint64_t rev;
} gp_inv_node;

typedef enum gp_inv_what { GP_INV_PUT, GP_INV_DEL } gp_inv_what;

/* site: the record as the registry sent it (a page's item or a
 * SiteChange's), valid during the call; NULL for DEL. */
typedef void gp_inv_site_fn(void *arg, gp_inv_what what, const char *id,
                            const struct msg_site *site);
/* node: likewise (with its GPUs); NULL for DEL.  site: the node's site. */
typedef void gp_inv_node_fn(void *arg, gp_inv_what what, const char *id, const char *site,
                            const struct msg_node *node);
/* After each complete load (first: the first one). */
typedef void gp_inv_loaded_fn(void *arg, bool first);

typedef struct gp_inventory_opts {
    bool              nodes;            /* follow nodes too (every node is paged) */
    unsigned          resync_ms;        /* full reload period; 0 = 60000 */
    unsigned          page_timeout_ms;  /* one page's deadline; 0 = 30000 (the registry
                                         * gives its list routes 30 s) */
    gp_inv_site_fn   *on_site;          /* each may be NULL */
    gp_inv_node_fn   *on_node;
    gp_inv_loaded_fn *on_loaded;
    void             *arg;
} gp_inventory_opts;

/* Subscribes and starts the first load on the loop's next turn (call it
 * from a service's init hook).  Registers its task "inventory" and its
 * metrics on app. */
gp_err gp_inventory_new(gp_app *app, const gp_inventory_opts *opts, gp_inventory **out);
/* After gp_app_free (NULL: no-op). */
void   gp_inventory_free(gp_inventory *inv);

/* true once a load has completed. */
bool     gp_inventory_ready(const gp_inventory *inv);
/* A site or node known now (not deleted), NULL otherwise; valid until the
 * loop runs again. */
const gp_inv_site *gp_inventory_site(const gp_inventory *inv, const char *id);
const gp_inv_node *gp_inventory_node(const gp_inventory *inv, const char *id);
uint32_t gp_inventory_nsites(const gp_inventory *inv);
uint32_t gp_inventory_nnodes(const gp_inventory *inv);
/* A full reload as soon as none is running. */
void     gp_inventory_reload(gp_inventory *inv);

#endif
