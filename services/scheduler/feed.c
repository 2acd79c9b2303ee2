/* feed.c -- the scheduler's snapshot of the fleet, fed from the registry
 * over the bus only (never its tables), and this cluster's own bookings.
 *
 * Sites and nodes come from the shared inventory follower (gp/inventory.h,
 * nodes included): its callbacks upsert and remove them as its loads and
 * the registry's SiteChange and NodeChange events arrive, so a node that
 * registers is placed on at once and a new site is known within a second.
 * Tenants, pools and products are paged here every feed-ms with
 * gp/call.h, upserting each item; what a complete load did not see is
 * removed afterwards.  They have no change events, so a site or node new
 * to the snapshot (the follower's) marks them stale too: the placement
 * pass reloads them, at most once a second (FEED_REFRESH_MS), as a new
 * site's node registering is when its pools and products are needed.  A failed page abandons the load and keeps what was
 * seen: nothing is removed on a partial view.  A node's state follows the
 * registry's NodeState events; a node that becomes healthy kicks the
 * placement pass (capacity changed).
 *
 * At each load's end (this file's and the follower's) the snapshot's
 * bookings are synced with the live attempts in PostgreSQL (every
 * instance's): missing ones booked, ended ones dropped, so a restarted
 * instance knows what is taken and GPUs freed by another instance show
 * free again; placement waits for the first (s->fed), which needs both
 * loads (a booking needs its node).  The Redis reservation stays the
 * authority: a stale snapshot only costs a BUSY and a retry. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/dbarray.h"
#include "gp/inventory.h"
#include "gp/log.h"
#include "scheduler.h"

enum { K_TENANT, K_POOL, K_PRODUCT, K_N };

typedef struct feed_kind {
    const gp_msg_desc *list;
    const gp_msg_desc *item;
    uint32_t           limit;
} feed_kind;

typedef struct sched_feed {
    sched      *s;
    bool        busy;                 /* a load is running */
    bool        sync_busy;            /* a bookings sync is running */
    bool        tenant_busy;          /* a tenant fetch is running (one at a time) */
    int         kind;                 /* K_* being paged */
    char        after[GP_MAX_ID + 1];
    snap_map    seen[K_N];            /* ids seen by this load */
    gp_bus_sub *sub;                  /* NodeState events */
    gp_inventory *inv;                /* sites and nodes: the shared follower */
    bool        want_bookings;        /* this load ended before the follower's first */
    bool        again;                /* the first load was run again (load_done) */
    bool        stale;                /* a new site or node since this file's last load */
    uint64_t    run_ms;               /* gp_mono_ms when the last load started */
    uint32_t    marks, run_marks;     /* the last mark of a waiting site; the last before the load began */
    unsigned    fails;                /* loads failed in a row (logged at 1, 2, 4, 8...) */
    bool        owners_busy;          /* a site_owners write is running */
    uint64_t   *m_loads, *m_load_failures, *m_state_events;
} sched_feed;

static const feed_kind kinds[K_N] = {
    [K_TENANT] = {&msg_tenant_list_desc, &msg_tenant_desc, 1000},
    [K_POOL] = {&msg_pool_list_desc, &msg_pool_desc, 1000},
    [K_PRODUCT] = {&msg_product_list_desc, &msg_product_desc, 1000},
};

static const gp_op *
kind_op(int k)
{
    switch (k) {
    case K_TENANT:  return GP_OP_ADMIN_TENANT_LIST;
    case K_POOL:    return GP_OP_ADMIN_POOL_LIST;
    default:        return GP_OP_ADMIN_PRODUCT_LIST;
    }
}

static void page_request(sched_feed *f);

static void
seen_reset(sched_feed *f)
{
    for (int k = 0; k < K_N; k++) {
        snap_map_free(&f->seen[k]);
        snap_map_init(&f->seen[k]);
    }
}

static void
upsert(sched_feed *f, int k, const void *item)
{
    snap       *sn = &f->s->snap;
    const char *id = k == K_POOL ? ((const msg_pool *)item)->id
                   : k == K_PRODUCT ? ((const msg_product *)item)->id
                                    : ((const msg_tenant *)item)->id;
    int rc = k == K_TENANT ? snap_tenant_upsert(sn, item)
           : k == K_POOL ? snap_pool_upsert(sn, item) : snap_product_upsert(sn, item);

    if (rc != 0)
        GP_WARN("feed_upsert_failed", "kind=%d id=%s", k, id);
    if (snap_map_get(&f->seen[k], id) < 0)
        snap_map_put(&f->seen[k], id, 1);
}

/* Removes what a complete load did not see: O(snapshot) once a load.
 * (Sites and nodes: the follower's own loads.) */
static void
sweep_missing(sched_feed *f)
{
    snap *sn = &f->s->snap;

    for (uint32_t i = 0; i < sn->nproduct; i++)
        if (sn->product[i].used && snap_map_get(&f->seen[K_PRODUCT], sn->product[i].id) < 0)
            snap_product_remove(sn, sn->product[i].id);
    for (uint32_t i = 0; i < sn->npool; i++)
        if (sn->pool[i].used && snap_map_get(&f->seen[K_POOL], sn->pool[i].id) < 0)
            snap_pool_remove(sn, sn->pool[i].id);
    for (uint32_t i = 0; i < sn->ntenant; i++)
        if (sn->tenant[i].used && snap_map_get(&f->seen[K_TENANT], sn->tenant[i].id) < 0)
            snap_tenant_remove(sn, sn->tenant[i].id);
}

/* ---- live bookings (first load only) ---------------------------------------- */

static uint64_t
gpu_mask(const char *text)
{
    uint64_t m = 0;

    for (const char *p = text; *p != '\0';) {
        long g = strtol(p, (char **)&p, 10);

        if (g >= 0 && g <= SCHED_RES_MAX_GPU)
            m |= 1ull << g;
        p += *p == ',';
    }
    return m;
}

/* "<job>:<attempt>" on "<node>": one booking's key in the live set. */
static void
hold_key(char *out, size_t n, const char *job, const char *attempt, const char *node)
{
    snprintf(out, n, "%.63s:%.10s:%.63s", job, attempt, node);
}

/* Bookings the snapshot holds that PostgreSQL no longer has live (ended by
 * another instance, or by this one's attempt-end path) are dropped, so
 * freed GPUs show free again.  A booking made after the read is not in
 * it: dropping one costs only a BUSY from Redis and a refresh. */
static void
drop_ended(sched *s, const snap_map *live)
{
    snap *sn = &s->snap;

    for (uint32_t i = 0; i < sn->nnode; i++) {
        char     drop[SNAP_NODE_GPUS][SNAP_ID_LEN], key[200], att[16];
        uint32_t dropa[SNAP_NODE_GPUS], nd = 0;

        if (!sn->node[i].used)
            continue;
        for (int32_t h = sn->node[i].holds; h != SNAP_NONE && nd < SNAP_NODE_GPUS;
             h = sn->hold[h].next) {
            snprintf(att, sizeof(att), "%u", sn->hold[h].attempt);
            hold_key(key, sizeof(key), sn->hold[h].job, att, sn->node[i].id);
            if (snap_map_get(live, key) < 0) {
                snprintf(drop[nd], sizeof(drop[nd]), "%s", sn->hold[h].job);
                dropa[nd++] = sn->hold[h].attempt;
            }
        }
        for (uint32_t k = 0; k < nd; k++)
            snap_unbook(sn, sn->node[i].id, drop[k], dropa[k]);
    }
}

/* The snapshot's bookings made equal to PostgreSQL's live attempts (every
 * instance's): ended ones dropped, missing ones added.  Returns how many
 * were added. */
static int
bookings_apply(sched *s, const PGresult *res)
{
    snap_map live;
    char     key[200];
    int      booked = 0;

    snap_map_init(&live);
    for (int i = 0; i < PQntuples(res); i++) {
        hold_key(key, sizeof(key), PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
                 PQgetvalue(res, i, 2));
        snap_map_put(&live, key, 1);
    }
    drop_ended(s, &live);
    snap_map_free(&live);
    for (int i = 0; i < PQntuples(res); i++)    /* -1 when already booked: kept as is */
        booked += snap_book(&s->snap, PQgetvalue(res, i, 2), gpu_mask(PQgetvalue(res, i, 3)),
                            PQgetvalue(res, i, 0),
                            (uint32_t)strtoul(PQgetvalue(res, i, 1), NULL, 10),
                            atoi(PQgetvalue(res, i, 4)), PQgetvalue(res, i, 5)[0] == 't') == 0;
    return booked;
}

static void
bookings_loaded(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched_feed *f = arg;
    sched      *s = f->s;
    int         booked;

    f->busy = false;
    if (err != GP_EOK || nres != 1) {     /* the next load retries (placement waits if unfed) */
        GP_WARN("feed_bookings_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        sched_count(f->m_load_failures);
        return;
    }
    booked = bookings_apply(s, res[0]);
    if (!s->fed)
        GP_INFO("feed_ready", "nodes=%u sites=%u bookings=%d", s->snap.nodes, s->snap.sites,
                booked);
    s->fed = true;
    sched_place_kick(s);                  /* new nodes, freed GPUs: capacity may have changed */
}

static const char bookings_sql[] =
    "SELECT a.job_id, a.attempt, a.node, array_to_string(a.gpus, ','), j.priority,\n"
    "  j.interruptible FROM attempts a JOIN jobs j ON j.id = a.job_id\n"
    "WHERE a.state IN ('reserved','starting','running')";

static void
load_bookings(sched_feed *f)
{
    gp_err rc = gp_db_query(gp_app_db(f->s->app), bookings_sql, 0, NULL, 0, bookings_loaded, f);

    if (rc != GP_EOK) {
        f->busy = false;
        GP_WARN("feed_bookings_failed", "code=%s detail=\"not sent\"", gp_err_name(rc));
    }
}

static void
bookings_synced(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched_feed *f = arg;

    f->sync_busy = false;
    if (err != GP_EOK || nres != 1) {
        GP_WARN("bookings_sync_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    bookings_apply(f->s, res[0]);
    sched_place_kick(f->s);
}

/* Task "bookings" (every bookings-ms): an attempt another instance ended,
 * or a booking this instance learned from Redis (a BUSY refresh) that the
 * reconcile has since removed, would otherwise keep its GPUs taken in this
 * snapshot until the next inventory load (feed-ms), and placements on a
 * busy fleet came in bursts that far apart. */
void
sched_bookings_run(gp_app *app, void *arg)
{
    sched      *s = arg;
    sched_feed *f = s->feed;

    if (!s->fed || f == NULL || f->busy || f->sync_busy)
        return;
    if (gp_db_query(gp_app_db(app), bookings_sql, 0, NULL, 0, bookings_synced, f) == GP_EOK)
        f->sync_busy = true;
}

/* ---- site owners (row-level security, migration 8) --------------------------- */

/* Which tenant owns which site, from the registry's list, for the
 * policies that let a site partner see the jobs that ran on its sites.
 * Written after each load (a row changes only when its owner did, which
 * is rare; the statement is one round trip); a site that is gone
 * keeps its row: jobs that ran there still belong to its partner's view. */
static const char owners_sql[] =
    "INSERT INTO site_owners (site, owner) SELECT * FROM unnest($1::text[], $2::text[])\n"
    "ON CONFLICT (site) DO UPDATE SET owner = EXCLUDED.owner\n"
    "  WHERE site_owners.owner IS DISTINCT FROM EXCLUDED.owner";

static void
owners_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched_feed *f = arg;

    (void)res;
    (void)nres;
    f->owners_busy = false;
    if (err != GP_EOK)                      /* written again after the next load */
        GP_WARN("site_owners_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
}

static void
owners_sync(sched_feed *f)
{
    const snap *sn = &f->s->snap;
    gp_buf      sites = GP_BUF_INIT, owners = GP_BUF_INIT;
    gp_err      rc;

    if (f->owners_busy)
        return;
    rc = gp_pgarr_begin(&sites);
    rc = rc ? rc : gp_pgarr_begin(&owners);
    for (uint32_t i = 0; rc == GP_EOK && i < sn->nsite; i++) {
        if (!sn->site[i].used || sn->site[i].tenant[0] == '\0')
            continue;
        rc = gp_pgarr_add(&sites, sn->site[i].id);
        rc = rc ? rc : gp_pgarr_add(&owners, sn->site[i].tenant);
    }
    rc = rc ? rc : gp_pgarr_end(&sites);
    rc = rc ? rc : gp_pgarr_end(&owners);
    if (rc == GP_EOK) {
        const char *params[2] = {sites.p, owners.p};

        f->owners_busy = gp_db_query(gp_app_db(f->s->app), owners_sql, 2, params, 0,
                                     owners_written, f) == GP_EOK;
    }
    gp_buf_fini(&sites);
    gp_buf_fini(&owners);
}

/* ---- paging ---------------------------------------------------------------- */

/* The bookings are synced once the follower has loaded too (a booking
 * needs its node): at once, or at the follower's load (inv_loaded). */
/* A load begun after a site was marked waiting has its pools and
 * products: it is placed on from now.  A site marked since waits for the
 * next load (each mark has its number, so a fleet still registering does
 * not hold back the sites marked before the load began). */
static void
sites_ready(sched_feed *f)
{
    snap *sn = &f->s->snap;

    for (uint32_t i = 0; i < sn->nsite; i++)
        if (sn->site[i].waiting != 0 && sn->site[i].waiting <= f->run_marks)
            sn->site[i].waiting = 0;
}

/* The first load began before the follower's sites: it runs once more at
 * once, so the scheduler is not fed with every site still waiting (a job
 * submitted then waited a second, with a 'pending' event: place_test).
 * True when it did. */
static bool
first_load_again(sched_feed *f)
{
    if (f->s->fed || f->run_marks == f->marks || f->again)
        return false;
    f->again = true;
    f->busy = false;
    sched_feed_run(f->s->app, f->s);
    return true;
}

static void
load_done(sched_feed *f)
{
    sweep_missing(f);
    sites_ready(f);
    owners_sync(f);
    f->fails = 0;
    sched_count(f->m_loads);
    if (gp_inventory_ready(f->inv)) {
        if (first_load_again(f))
            return;
        load_bookings(f);
        return;
    }
    f->busy = false;
    f->want_bookings = true;
}

static void
page_answered(void *arg, gp_err err, const void *reply, const char *detail)
{
    sched_feed      *f = arg;
    const feed_kind *k = &kinds[f->kind];
    /* every *_list message starts {has, items, next, total} */
    const msg_node_list *page = reply;

    if (err != GP_EOK || page == NULL) {
        f->fails++;
        if ((f->fails & (f->fails - 1)) == 0)   /* retried every place-ms until the first load */
            GP_WARN("feed_load_failed", "kind=%d code=%s detail=\"%s\" in_a_row=%u", f->kind,
                    gp_err_name(err), detail, f->fails);
        sched_count(f->m_load_failures);
        f->busy = false;
        return;
    }
    for (uint32_t i = 0; i < page->items.n; i++)
        upsert(f, f->kind, (const char *)page->items.v + i * k->item->size);
    snprintf(f->after, sizeof(f->after), "%s", page->next);
    if (f->after[0] == '\0')
        f->kind++;
    if (f->kind == K_N)
        load_done(f);
    else
        page_request(f);
}

/* The registry gives its list routes 30 s (a pool's GPU counts join every
 * GPU it spans): a page is waited for as long, not request-timeout-ms,
 * or a large inventory's load is abandoned at its slowest page every time. */
enum { FEED_PAGE_MS = 30000 };

static unsigned
page_timeout_ms(const sched_feed *f)
{
    unsigned t = gp_app_cfg(f->s->app)->request_timeout_ms;

    return t > FEED_PAGE_MS ? t : FEED_PAGE_MS;
}

static void
page_request(sched_feed *f)
{
    msg_list_request q = {.limit = kinds[f->kind].limit};
    char             subj[GP_MAX_SUBJECT];
    gp_err           rc = gp_op_subject(kind_op(f->kind), subj, sizeof(subj), NULL);

    snprintf(q.after, sizeof(q.after), "%s", f->after);
    if (rc == GP_EOK)
        rc = gp_call(gp_app_bus(f->s->app), subj, &msg_list_request_desc, &q, kinds[f->kind].list,
                     page_timeout_ms(f), page_answered, f);
    if (rc != GP_EOK)
        page_answered(f, rc, NULL, "not sent");
}

void
sched_feed_run(gp_app *app, void *arg)
{
    sched_feed *f = ((sched *)arg)->feed;

    (void)app;
    if (f->busy || (f->want_bookings && !f->s->fed))   /* loaded: waiting for the follower */
        return;
    f->busy = true;
    f->stale = false;
    f->run_ms = gp_mono_ms();
    f->run_marks = f->marks;
    f->kind = K_TENANT;
    f->after[0] = '\0';
    seen_reset(f);
    page_request(f);
}

/* Tenants, pools and products once more when a new site or node may need
 * ones created since the last load (their creation publishes nothing):
 * the placement pass calls it, so a registering fleet costs one load a
 * second at most. */
enum { FEED_REFRESH_MS = 1000 };

void
sched_feed_refresh(sched *s)
{
    sched_feed *f = s->feed;

    if (f != NULL && f->stale && !f->busy && gp_mono_ms() - f->run_ms >= FEED_REFRESH_MS)
        sched_feed_run(s->app, s);
}

/* A NodeState missed (an instance down when it was published) must not
 * leave interruptible work on a draining or quarantined node: every
 * reconcile-ms each instance asks again for the nodes its snapshot holds
 * in those states (sched_evacuate marks each attempt once, whoever asks). */
void
sched_evacuate_sweep(sched *s)
{
    for (uint32_t i = 0; i < s->snap.nnode; i++) {
        const snap_node *n = &s->snap.node[i];

        if (n->used && (n->state == SNAP_DRAINING || n->state == SNAP_QUARANTINED))
            sched_evacuate(s, n->id, msg_node_state_state_names[n->state]);
    }
}

/* ---- NodeState events ------------------------------------------------------ */

/* A tenant the snapshot does not know (created since the last load) is
 * fetched when a job of it is placed, so its jobs do not wait for the next
 * load (feed-ms) on no_rights: the placement pass asks, and the answer
 * kicks the next pass.  One fetch at a time; a job whose tenant is still
 * unknown is asked for again by the next pass. */
typedef struct tenant_fetch {
    sched_feed *f;
} tenant_fetch;

static void
tenant_fetched(void *arg, gp_err err, const void *reply, const char *detail)
{
    tenant_fetch *tf = arg;
    sched_feed   *f = tf->f;

    free(tf);
    f->tenant_busy = false;
    if (err != GP_EOK || reply == NULL) {
        GP_DEBUG("feed_tenant_get_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    if (snap_tenant_upsert(&f->s->snap, reply) == 0)
        sched_place_kick(f->s);
}

void
sched_feed_tenant(sched *s, const char *tenant)
{
    sched_feed    *f = s->feed;
    msg_id_request q = {0};
    char           subj[GP_MAX_SUBJECT];
    tenant_fetch  *tf;
    gp_err         rc;

    if (f == NULL || f->tenant_busy || (tf = calloc(1, sizeof(*tf))) == NULL)
        return;
    tf->f = f;
    f->tenant_busy = true;
    snprintf(q.id, sizeof(q.id), "%s", tenant);
    rc = gp_op_subject(GP_OP_ADMIN_TENANT_GET, subj, sizeof(subj), NULL);
    if (rc == GP_EOK)
        rc = gp_call(gp_app_bus(s->app), subj, &msg_id_request_desc, &q, &msg_tenant_desc,
                     gp_app_cfg(s->app)->request_timeout_ms, tenant_fetched, tf);
    if (rc != GP_EOK)
        tenant_fetched(tf, rc, NULL, "not sent");
}

static void
on_node_state(void *arg, const gp_bus_msg *m)
{
    sched_feed    *f = arg;
    msg_node_state st = {0};
    int32_t        ix;
    int32_t        was = SNAP_UNKNOWN;

    if (gp_msg_decode(&msg_node_state_desc, m->data, m->len, &st, NULL, 0) != GP_EOK)
        return;
    sched_count(f->m_state_events);
    /* a node registered since is known already: its NodeChange came
     * first, on the registry's same connection (the follower) */
    ix = snap_node_find(&f->s->snap, st.node);
    if (ix >= 0)
        was = f->s->snap.node[ix].state;
    if (ix >= 0 && snap_node_state(&f->s->snap, &st) == 0 && st.state == SNAP_HEALTHY &&
        was != SNAP_HEALTHY)
        sched_place_kick(f->s);
    /* no new work there, and the interruptible work moves off now */
    if ((st.state == MSG_NODE_STATE_STATE_DRAINING ||
         st.state == MSG_NODE_STATE_STATE_QUARANTINED) && st.prev != st.state)
        sched_evacuate(f->s, st.node, msg_node_state_state_names[st.state]);
    gp_msg_clear(&msg_node_state_desc, &st);
}

/* ---- sites and nodes: the follower's callbacks ----------------------------- */

static void
on_site(void *arg, gp_inv_what what, const char *id, const struct msg_site *m)
{
    sched_feed *f = arg;
    bool        fresh = snap_site_find(&f->s->snap, id) < 0;

    if (what == GP_INV_DEL) {
        if (snap_site_remove(&f->s->snap, id) != 0)     /* unknown, or nodes still there */
            GP_DEBUG("feed_remove_failed", "kind=site id=%s", id);
        return;
    }
    if (snap_site_upsert(&f->s->snap, m) != 0) {
        GP_WARN("feed_upsert_failed", "kind=site id=%s", id);
    } else if (fresh) {
        /* its pools and products may be new too: not placed on until the
         * next load has them (an unpriced attempt is a record billing
         * refuses: billing fault_test) */
        f->s->snap.site[snap_site_find(&f->s->snap, id)].waiting = ++f->marks;
        f->stale = true;
    }
}

/* A node new to the snapshot is capacity: the placement pass is kicked. */
static void
on_node(void *arg, gp_inv_what what, const char *id, const char *site, const struct msg_node *m)
{
    sched_feed *f = arg;
    bool        fresh = snap_node_find(&f->s->snap, id) < 0;

    if (what == GP_INV_DEL) {
        snap_node_remove(&f->s->snap, id);
        return;
    }
    if (snap_node_upsert(&f->s->snap, m) != 0) {
        GP_WARN("feed_upsert_failed", "kind=node id=%s site=%s", id, site);
        return;
    }
    if (fresh)
        f->stale = true;
    if (fresh && f->s->fed) {
        /* A node joining a fed scheduler makes its site wait again for a
         * load begun after it: an operator (the simulator too) creates a
         * site, then its pools and products, then installs its nodes, so
         * the load the site's appearance began may have predated the
         * products (streams_test saw a job placed unpriced there, 4
         * records billing refused).  A node of the first load is no news:
         * its site waits as any new site does. */
        f->s->snap.site[f->s->snap.node[snap_node_find(&f->s->snap, id)].site].waiting = ++f->marks;
        sched_place_kick(f->s);
    }
}

/* After each of the follower's loads: the site owners (its sites), and the
 * bookings a load of this file left waiting for it. */
static void
inv_loaded(void *arg, bool first)
{
    sched_feed *f = arg;

    (void)first;
    owners_sync(f);
    if (f->want_bookings && !f->busy) {
        f->want_bookings = false;
        if (first_load_again(f))
            return;
        f->busy = true;
        load_bookings(f);
    }
}

/* At exit, after the app (and with it the bus and its subscription) is
 * freed. */
void
sched_feed_free(sched *s)
{
    sched_feed *f = s->feed;

    if (f == NULL)
        return;
    for (int k = 0; k < K_N; k++)
        snap_map_free(&f->seen[k]);
    gp_inventory_free(f->inv);
    free(f);
    s->feed = NULL;
}

gp_err
sched_feed_start(sched *s)
{
    sched_feed *f = calloc(1, sizeof(*f));
    gp_metrics *m = gp_app_metrics(s->app);
    char        pat[GP_MAX_SUBJECT];
    gp_err      rc;

    if (f == NULL)
        return GP_ENOMEM;
    f->s = s;
    s->feed = f;
    for (int k = 0; k < K_N; k++)
        snap_map_init(&f->seen[k]);
    f->m_loads = gp_metrics_counter(m, "gp_scheduler_feed_loads_total", NULL,
                                    "Complete inventory loads from the registry");
    f->m_load_failures = gp_metrics_counter(m, "gp_scheduler_feed_load_failures_total", NULL,
                                            "Inventory loads abandoned (a page failed)");
    f->m_state_events = gp_metrics_counter(m, "gp_scheduler_node_state_events_total", NULL,
                                           "NodeState events received");
    const char *any[2] = {NULL, NULL};     /* site, node: every one */

    rc = gp_op_pattern(GP_OP_NODE_STATE, pat, sizeof(pat), any);
    if (rc == GP_EOK)   /* every instance follows every node: no queue group */
        rc = gp_bus_sub_new(gp_app_bus(s->app), pat, NULL, on_node_state, f, &f->sub);
    if (rc == GP_EOK)
        rc = gp_inventory_new(s->app,
                              &(gp_inventory_opts){.nodes = true,
                                                   .resync_ms = s->cfg->feed_ms,
                                                   .page_timeout_ms = page_timeout_ms(f),
                                                   .on_site = on_site, .on_node = on_node,
                                                   .on_loaded = inv_loaded, .arg = f},
                              &f->inv);
    /* the first load of tenants, pools and products is started by the
     * placement pass, which retries it every place-ms until it succeeds
     * (the bus may not be up yet); the follower retries its own */
    return rc;
}
