/* inventory.c -- the follower of gp/inventory.h.
 *
 * Three parts, one way down: the I/O (the task that starts loads, the
 * pages, the event subscriptions) calls the rules (put, delete and sweep
 * by revision and load generation), which call the table (id -> entry).
 * The rules and the table do no I/O: tests/unit/shared/inventory_test.c
 * drives them without a bus.
 *
 * Load generations.  Each load takes the next generation; a page's item
 * and every event mark the entry they touch with the current one.  When a
 * load completes, an entry still marked older was neither listed nor
 * changed since the load began: it is gone (a live one is deleted, a
 * tombstone is dropped: the pages, read after its delete, no longer hold
 * it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/backoff.h"
#include "gp/bus.h"
#include "gp/call.h"
#include "gp/clock.h"
#include "gp/id.h"
#include "gp/inventory.h"
#include "gp/log.h"
#include "gp/shard.h"
#include "msg_gen.h"

enum { TICK_MS = 200, SITE_PAGE = MSG_SITE_LIST_ITEMS_MAXITEMS,
       NODE_PAGE = MSG_NODE_LIST_ITEMS_MAXITEMS };

/* ---- the table: id -> entry ----------------------------------------------------- */

/* Entries are dense (stride bytes each, the id at offset 0); slots index
 * them by FNV-1a with linear probing.  Nothing is removed but by a
 * compaction, which rebuilds the slots. */
typedef struct tab {
    char     *ents;
    size_t    stride;
    uint32_t  n, cap;
    int32_t  *slot;                   /* -1: empty */
    uint32_t  nslot;                  /* a power of two, >= 2 n */
} tab;

static void *
tab_at(const tab *t, uint32_t i)
{
    return t->ents + (size_t)i * t->stride;
}

static int32_t
tab_find(const tab *t, const char *id)
{
    uint32_t mask = t->nslot - 1;

    if (t->nslot == 0)
        return -1;
    for (uint32_t i = gp_fnv1a(id) & mask;; i = (i + 1) & mask) {
        int32_t ix = t->slot[i];

        if (ix < 0 || strcmp((const char *)tab_at(t, (uint32_t)ix), id) == 0)
            return ix;
    }
}

static void
tab_index(tab *t, uint32_t ix)
{
    uint32_t mask = t->nslot - 1, i = gp_fnv1a(tab_at(t, ix)) & mask;

    while (t->slot[i] >= 0)
        i = (i + 1) & mask;
    t->slot[i] = (int32_t)ix;
}

static int
tab_reslot(tab *t, uint32_t nslot)
{
    int32_t *s = malloc((size_t)nslot * sizeof(*s));

    if (s == NULL)
        return -1;
    free(t->slot);
    t->slot = s;
    t->nslot = nslot;
    memset(s, 0xff, (size_t)nslot * sizeof(*s));
    for (uint32_t i = 0; i < t->n; i++)
        tab_index(t, i);
    return 0;
}

/* A new zeroed entry with this id (not yet in the table: tab_find first). */
static void *
tab_add(tab *t, const char *id)
{
    void *e;

    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 64;
        char    *p = realloc(t->ents, (size_t)cap * t->stride);

        if (p == NULL)
            return NULL;
        t->ents = p;
        t->cap = cap;
    }
    if ((t->n + 1) * 2 > t->nslot && tab_reslot(t, t->nslot ? t->nslot * 2 : 128) != 0)
        return NULL;
    e = tab_at(t, t->n);
    memset(e, 0, t->stride);
    snprintf(e, GP_MAX_ID + 1, "%s", id);
    tab_index(t, t->n++);
    return e;
}

/* Keeps the entries keep() says, in order, and re-indexes them. */
static void
tab_compact(tab *t, bool (*keep)(void *ent, void *arg), void *arg)
{
    uint32_t k = 0;

    for (uint32_t i = 0; i < t->n; i++) {
        if (!keep(tab_at(t, i), arg))
            continue;
        if (k != i)
            memcpy(tab_at(t, k), tab_at(t, i), t->stride);
        k++;
    }
    t->n = k;
    if (t->nslot > 0 && tab_reslot(t, t->nslot) != 0)
        t->n = 0;             /* out of memory: forget all; the next load refills it */
}

static void
tab_free(tab *t)
{
    free(t->ents);
    free(t->slot);
    *t = (tab){.stride = t->stride};
}

/* ---- the follower's state --------------------------------------------------------- */

typedef struct site_ent {
    gp_inv_site s;                    /* first: the id at offset 0 */
    uint32_t    gen;
    bool        gone;                 /* a tombstone: deleted at s.rev */
} site_ent;

typedef struct node_ent {
    gp_inv_node n;
    uint32_t    gen;
    bool        gone;
} node_ent;

enum { C_LOADS, C_FAILS, C_CHANGES, C_STALE, C_BAD, C_N };
enum { L_IDLE, L_SITES, L_NODES };

struct gp_inventory {
    gp_app           *app;
    gp_inventory_opts o;
    tab               sites, nodes;
    uint32_t          nsites, nnodes;  /* live entries */
    uint32_t          gen;             /* the generation of the last load started */
    bool              ready;
    int               loading;         /* L_* */
    char              after[GP_MAX_ID + 1];
    uint64_t          next_ms;         /* gp_mono_ms of the next load */
    bool              want;            /* a reload asked for */
    bool              was_up;          /* the bus, at the last tick */
    unsigned          fails;           /* loads failed in a row */
    gp_backoff        backoff;
    gp_task          *task;
    gp_bus_sub       *site_sub, *node_sub;
    uint64_t         *c[C_N];
    uint64_t          own[C_N];        /* the counters without an app */
    double           *g_sites, *g_nodes, g_own[2];
};

enum { APPLY_STALE, APPLY_SAME, APPLY_NEW };

static site_ent *
site_find(const gp_inventory *inv, const char *id)
{
    int32_t ix = tab_find(&inv->sites, id);

    return ix >= 0 ? tab_at(&inv->sites, (uint32_t)ix) : NULL;
}

static node_ent *
node_find(const gp_inventory *inv, const char *id)
{
    int32_t ix = tab_find(&inv->nodes, id);

    return ix >= 0 ? tab_at(&inv->nodes, (uint32_t)ix) : NULL;
}

/* A new entry starts as a tombstone of revision 0: not live until put. */
static site_ent *
new_site(tab *t, const char *id)
{
    site_ent *e = tab_add(t, id);

    if (e != NULL)
        e->gone = true;
    return e;
}

static node_ent *
new_node(tab *t, const char *id)
{
    node_ent *e = tab_add(t, id);

    if (e != NULL)
        e->gone = true;
    return e;
}

static void
gauges(gp_inventory *inv)
{
    *inv->g_sites = inv->nsites;
    *inv->g_nodes = inv->nnodes;
}

/* ---- the rules: put, delete, sweep (no I/O) ---------------------------------------- */

/* rev older than the entry's: stale.  A tombstone also refuses its own
 * revision (nothing is written at a delete's revision). */
static bool
older(uint64_t rev, uint64_t have, bool gone)
{
    return rev < have || (gone && rev == have && have > 0);
}

static int
site_fill(gp_inv_site *s, const msg_site *m)
{
    const msg_power_price *pp = m->power_prices.v;
    gp_inv_price          *p = NULL;

    if (m->power_prices.n > 0 && (p = calloc(m->power_prices.n, sizeof(*p))) == NULL)
        return -1;
    for (uint32_t i = 0; i < m->power_prices.n; i++)
        p[i] = (gp_inv_price){pp[i].start_min, pp[i].price_micros_per_kwh};
    free(s->prices);
    s->prices = p;
    s->nprices = m->power_prices.n;
    snprintf(s->tenant, sizeof(s->tenant), "%s", m->tenant);
    snprintf(s->region, sizeof(s->region), "%s", m->region);
    snprintf(s->currency, sizeof(s->currency), "%s", m->currency);
    s->lat = m->lat;
    s->lon = m->lon;
    s->latency_tier = m->latency_tier;
    s->pue_milli = m->pue_milli;
    s->timezone_min = m->timezone_min;
    s->nodes = m->nodes;
    s->gpus = m->gpus;
    s->rev = m->rev;
    return 0;
}

static int
site_put(gp_inventory *inv, const msg_site *m)
{
    site_ent *e = site_find(inv, m->id);
    bool      was_live = e != NULL && !e->gone;

    if (e != NULL && older(m->rev, e->s.rev, e->gone)) {
        (*inv->c[C_STALE])++;
        return APPLY_STALE;
    }
    if (e == NULL && (e = new_site(&inv->sites, m->id)) == NULL)
        return APPLY_STALE;                   /* out of memory: the next load retries */
    if (site_fill(&e->s, m) != 0)
        return APPLY_STALE;
    e->gen = inv->gen;
    e->gone = false;
    inv->nsites += !was_live;
    return was_live ? APPLY_SAME : APPLY_NEW;
}

static int
site_del(gp_inventory *inv, const char *id, uint64_t rev)
{
    site_ent *e = site_find(inv, id);
    bool      was_live = e != NULL && !e->gone;

    if (e != NULL && older(rev, e->s.rev, e->gone)) {
        (*inv->c[C_STALE])++;
        return APPLY_STALE;
    }
    if (e == NULL && (e = new_site(&inv->sites, id)) == NULL)
        return APPLY_STALE;
    free(e->s.prices);
    memset(&e->s, 0, sizeof(e->s));
    snprintf(e->s.id, sizeof(e->s.id), "%s", id);
    e->s.rev = rev;
    e->gen = inv->gen;
    e->gone = true;
    inv->nsites -= was_live;
    return was_live ? APPLY_NEW : APPLY_SAME;
}

static int
node_put(gp_inventory *inv, const msg_node *m)
{
    node_ent *e = node_find(inv, m->id);
    bool      was_live = e != NULL && !e->gone;

    if (e != NULL && older(m->rev, e->n.rev, e->gone)) {
        (*inv->c[C_STALE])++;
        return APPLY_STALE;
    }
    if (e == NULL && (e = new_node(&inv->nodes, m->id)) == NULL)
        return APPLY_STALE;
    snprintf(e->n.site, sizeof(e->n.site), "%s", m->site);
    e->n.gpus = m->gpus.n;
    e->n.rev = m->rev;
    e->gen = inv->gen;
    e->gone = false;
    inv->nnodes += !was_live;
    return was_live ? APPLY_SAME : APPLY_NEW;
}

static int
node_del(gp_inventory *inv, const char *id, const char *site, uint64_t rev)
{
    node_ent *e = node_find(inv, id);
    bool      was_live = e != NULL && !e->gone;

    if (e != NULL && older(rev, e->n.rev, e->gone)) {
        (*inv->c[C_STALE])++;
        return APPLY_STALE;
    }
    if (e == NULL && (e = new_node(&inv->nodes, id)) == NULL)
        return APPLY_STALE;
    snprintf(e->n.site, sizeof(e->n.site), "%s", site);
    e->n.gpus = 0;
    e->n.rev = rev;
    e->gen = inv->gen;
    e->gone = true;
    inv->nnodes -= was_live;
    return was_live ? APPLY_NEW : APPLY_SAME;
}

/* A page's item: told to the owner unless stale (a reload repeats it). */
static void
page_site(gp_inventory *inv, const msg_site *m)
{
    if (site_put(inv, m) != APPLY_STALE && inv->o.on_site != NULL)
        inv->o.on_site(inv->o.arg, GP_INV_PUT, m->id, m);
}

static void
page_node(gp_inventory *inv, const msg_node *m)
{
    if (node_put(inv, m) != APPLY_STALE && inv->o.on_node != NULL)
        inv->o.on_node(inv->o.arg, GP_INV_PUT, m->id, m->site, m);
}

/* An event: told to the owner when it changed something. */
static void
site_change(gp_inventory *inv, const msg_site_change *ev)
{
    bool del = ev->change == MSG_SITE_CHANGE_CHANGE_DELETED;
    int  r = del ? site_del(inv, ev->id, ev->rev) : site_put(inv, &ev->site);

    if (r == APPLY_STALE)
        return;
    (*inv->c[C_CHANGES])++;
    if (inv->o.on_site != NULL && (r == APPLY_NEW || !del))
        inv->o.on_site(inv->o.arg, del ? GP_INV_DEL : GP_INV_PUT, ev->id,
                       del ? NULL : &ev->site);
}

static void
node_change(gp_inventory *inv, const msg_node_change *ev)
{
    bool del = ev->change == MSG_NODE_CHANGE_CHANGE_DELETED;
    int  r = del ? node_del(inv, ev->id, ev->site, ev->rev) : node_put(inv, &ev->node);

    if (r == APPLY_STALE)
        return;
    (*inv->c[C_CHANGES])++;
    if (inv->o.on_node != NULL && (r == APPLY_NEW || !del))
        inv->o.on_node(inv->o.arg, del ? GP_INV_DEL : GP_INV_PUT, ev->id, ev->site,
                       del ? NULL : &ev->node);
}

/* The generation a complete load keeps: its own (and newer events'). */
static bool
site_keep(void *ent, void *arg)
{
    site_ent *e = ent;
    bool      keep = e->gen >= *(const uint32_t *)arg;

    if (!keep)
        free(e->s.prices);
    return keep;
}

static bool
node_keep(void *ent, void *arg)
{
    return ((node_ent *)ent)->gen >= *(const uint32_t *)arg;
}

/* After a complete load: what it did not see and no event touched since
 * it began is deleted (nodes before sites), tombstones it passed dropped. */
static void
sweep(gp_inventory *inv)
{
    for (uint32_t i = 0; i < inv->nodes.n; i++) {
        node_ent *e = tab_at(&inv->nodes, i);

        if (e->gen >= inv->gen || e->gone)
            continue;
        inv->nnodes--;
        if (inv->o.on_node != NULL)
            inv->o.on_node(inv->o.arg, GP_INV_DEL, e->n.id, e->n.site, NULL);
    }
    tab_compact(&inv->nodes, node_keep, &inv->gen);
    for (uint32_t i = 0; i < inv->sites.n; i++) {
        site_ent *e = tab_at(&inv->sites, i);

        if (e->gen >= inv->gen || e->gone)
            continue;
        inv->nsites--;
        if (inv->o.on_site != NULL)
            inv->o.on_site(inv->o.arg, GP_INV_DEL, e->s.id, NULL);
    }
    tab_compact(&inv->sites, site_keep, &inv->gen);
    if (inv->sites.n == 0)
        inv->nsites = 0;                     /* a compaction out of memory forgot them */
    if (inv->nodes.n == 0)
        inv->nnodes = 0;
}

/* ---- events ------------------------------------------------------------------------- */

static bool
site_change_ok(const msg_site_change *ev)
{
    if (!gp_id_ok(ev->id))
        return false;
    if (ev->change == MSG_SITE_CHANGE_CHANGE_DELETED)
        return true;
    return GP_HAS(ev, MSG_SITE_CHANGE__SITE) && strcmp(ev->site.id, ev->id) == 0 &&
           ev->site.rev == ev->rev;
}

static bool
node_change_ok(const msg_node_change *ev)
{
    if (!gp_id_ok(ev->id) || !gp_id_ok(ev->site))
        return false;
    if (ev->change == MSG_NODE_CHANGE_CHANGE_DELETED)
        return true;
    return GP_HAS(ev, MSG_NODE_CHANGE__NODE) && strcmp(ev->node.id, ev->id) == 0 &&
           strcmp(ev->node.site, ev->site) == 0 && ev->node.rev == ev->rev;
}

static void
on_site_msg(void *arg, const gp_bus_msg *m)
{
    gp_inventory   *inv = arg;
    msg_site_change ev = {0};
    char            why[128] = "";

    if (gp_msg_decode(&msg_site_change_desc, m->data, m->len, &ev, why, sizeof(why)) != GP_EOK ||
        !site_change_ok(&ev)) {
        (*inv->c[C_BAD])++;
        GP_DEBUG("inventory_bad_event", "kind=site subject=%s why=\"%s\"", m->subject,
                 why[0] ? why : "id, record or revision inconsistent");
    } else {
        site_change(inv, &ev);
        gauges(inv);
    }
    gp_msg_clear(&msg_site_change_desc, &ev);
}

static void
on_node_msg(void *arg, const gp_bus_msg *m)
{
    gp_inventory   *inv = arg;
    msg_node_change ev = {0};
    char            why[128] = "";

    if (gp_msg_decode(&msg_node_change_desc, m->data, m->len, &ev, why, sizeof(why)) != GP_EOK ||
        !node_change_ok(&ev)) {
        (*inv->c[C_BAD])++;
        GP_DEBUG("inventory_bad_event", "kind=node subject=%s why=\"%s\"", m->subject,
                 why[0] ? why : "id, record or revision inconsistent");
    } else {
        node_change(inv, &ev);
        gauges(inv);
    }
    gp_msg_clear(&msg_node_change_desc, &ev);
}

/* ---- loads ---------------------------------------------------------------------------- */

static void page_request(gp_inventory *inv);

static void
load_begin(gp_inventory *inv)
{
    inv->gen++;
    inv->loading = L_SITES;
    inv->after[0] = '\0';
}

static void
load_end(gp_inventory *inv)
{
    bool first = !inv->ready;

    sweep(inv);
    gauges(inv);
    inv->loading = L_IDLE;
    inv->ready = true;
    (*inv->c[C_LOADS])++;
    if (first || inv->fails > 0)
        GP_INFO("inventory_loaded", "sites=%u nodes=%u after_failures=%u", inv->nsites,
                inv->nnodes, inv->fails);
    inv->fails = 0;
    gp_backoff_reset(&inv->backoff);
    inv->next_ms = gp_mono_ms() + inv->o.resync_ms;
    if (inv->o.on_loaded != NULL)
        inv->o.on_loaded(inv->o.arg, first);
}

/* A failed page abandons the load (nothing is swept on a partial view);
 * the next starts after the backoff. */
static void
load_failed(gp_inventory *inv, gp_err err, const char *detail)
{
    inv->loading = L_IDLE;
    inv->fails++;
    (*inv->c[C_FAILS])++;
    inv->next_ms = gp_mono_ms() + gp_backoff_next_ms(&inv->backoff);
    if ((inv->fails & (inv->fails - 1)) == 0)        /* 1, 2, 4, 8... in a row */
        GP_WARN("inventory_load_failed", "code=%s detail=\"%s\" in_a_row=%u ready=%d",
                gp_err_name(err), detail, inv->fails, inv->ready);
}

static void
page_answered(void *arg, gp_err err, const void *reply, const char *detail)
{
    gp_inventory *inv = arg;
    const char   *next;

    if (inv->loading == L_IDLE)
        return;                               /* cannot happen: one page at a time */
    if (err != GP_EOK || reply == NULL) {
        load_failed(inv, err, detail);
        return;
    }
    if (inv->loading == L_SITES) {
        const msg_site_list *p = reply;

        for (uint32_t i = 0; i < p->items.n; i++)
            page_site(inv, (const msg_site *)p->items.v + i);
        next = p->next;
    } else {
        const msg_node_list *p = reply;

        for (uint32_t i = 0; i < p->items.n; i++)
            page_node(inv, (const msg_node *)p->items.v + i);
        next = p->next;
    }
    snprintf(inv->after, sizeof(inv->after), "%s", next);
    if (inv->after[0] == '\0' && (inv->loading == L_NODES || !inv->o.nodes)) {
        load_end(inv);
        return;
    }
    if (inv->after[0] == '\0')
        inv->loading = L_NODES;
    page_request(inv);
}

static void
page_request(gp_inventory *inv)
{
    bool             sites = inv->loading == L_SITES;
    msg_list_request q = {.limit = sites ? SITE_PAGE : NODE_PAGE};
    char             subj[GP_MAX_SUBJECT];
    gp_err           rc = gp_op_subject(sites ? GP_OP_ADMIN_SITE_LIST : GP_OP_ADMIN_NODE_LIST,
                                        subj, sizeof(subj), NULL);

    snprintf(q.after, sizeof(q.after), "%s", inv->after);
    if (rc == GP_EOK)
        rc = gp_call(gp_app_bus(inv->app), subj, &msg_list_request_desc, &q,
                     sites ? &msg_site_list_desc : &msg_node_list_desc, inv->o.page_timeout_ms,
                     page_answered, inv);
    if (rc != GP_EOK)
        load_failed(inv, rc, "not sent");
}

/* Task "inventory" (every TICK_MS): a load when one is due, asked for, or
 * the bus came back (what was published meanwhile never reached us). */
static void
tick(gp_app *app, void *arg)
{
    gp_inventory *inv = arg;
    bool          up = gp_bus_is_connected(gp_app_bus(app));

    if (up && !inv->was_up && inv->ready)
        inv->want = true;
    inv->was_up = up;
    if (inv->loading != L_IDLE || (!inv->want && gp_mono_ms() < inv->next_ms))
        return;
    inv->want = false;
    load_begin(inv);
    page_request(inv);
}

/* ---- life ------------------------------------------------------------------------------ */

static gp_inventory *
inv_alloc(const gp_inventory_opts *opts)
{
    gp_inventory *inv = calloc(1, sizeof(*inv));

    if (inv == NULL)
        return NULL;
    inv->o = *opts;
    if (inv->o.resync_ms == 0)
        inv->o.resync_ms = 60000;
    if (inv->o.page_timeout_ms == 0)
        inv->o.page_timeout_ms = 30000;
    inv->sites.stride = sizeof(site_ent);
    inv->nodes.stride = sizeof(node_ent);
    for (int i = 0; i < C_N; i++)
        inv->c[i] = &inv->own[i];
    inv->g_sites = &inv->g_own[0];
    inv->g_nodes = &inv->g_own[1];
    gp_backoff_init(&inv->backoff, inv);
    return inv;
}

static void
metrics(gp_inventory *inv, gp_metrics *m)
{
    static const char *const names[C_N] = {
        "gp_inventory_loads_total", "gp_inventory_load_failures_total",
        "gp_inventory_changes_total", "gp_inventory_stale_total", "gp_inventory_bad_events_total"};
    static const char *const help[C_N] = {
        "Complete loads of the registry's inventory",
        "Inventory loads abandoned (a page failed; retried with backoff)",
        "SiteChange and NodeChange events applied",
        "Pages' items and events older than what was known (ignored)",
        "Inventory events dropped: undecodable or inconsistent"};
    double *g;

    for (int i = 0; i < C_N; i++) {
        uint64_t *c = gp_metrics_counter(m, names[i], NULL, help[i]);

        if (c != NULL)
            inv->c[i] = c;
    }
    if ((g = gp_metrics_gauge(m, "gp_inventory_sites", NULL, "Sites known")) != NULL)
        inv->g_sites = g;
    if ((g = gp_metrics_gauge(m, "gp_inventory_nodes", NULL, "Nodes known (when followed)")))
        inv->g_nodes = g;
}

static gp_err
subscribe(gp_inventory *inv)
{
    const char *any[2] = {NULL, NULL};
    char        pat[GP_MAX_SUBJECT];
    gp_err      rc = gp_op_pattern(GP_OP_INVENTORY_SITE, pat, sizeof(pat), any);

    /* every instance follows every change: no queue group */
    if (rc == GP_EOK)
        rc = gp_bus_sub_new(gp_app_bus(inv->app), pat, NULL, on_site_msg, inv, &inv->site_sub);
    if (rc == GP_EOK && inv->o.nodes)
        rc = gp_op_pattern(GP_OP_INVENTORY_NODE, pat, sizeof(pat), any);
    if (rc == GP_EOK && inv->o.nodes)
        rc = gp_bus_sub_new(gp_app_bus(inv->app), pat, NULL, on_node_msg, inv, &inv->node_sub);
    return rc;
}

gp_err
gp_inventory_new(gp_app *app, const gp_inventory_opts *opts, gp_inventory **out)
{
    gp_inventory *inv = inv_alloc(opts);
    gp_err        rc;

    *out = NULL;
    if (inv == NULL)
        return GP_ENOMEM;
    inv->app = app;
    metrics(inv, gp_app_metrics(app));
    rc = subscribe(inv);
    if (rc == GP_EOK && (inv->task = gp_app_every(app, "inventory", TICK_MS / 1000.0, tick,
                                                  inv)) == NULL)
        rc = GP_ENOMEM;
    if (rc != GP_EOK) {
        gp_inventory_free(inv);               /* subscriptions go with the bus */
        return rc;
    }
    inv->want = true;
    gp_task_kick(inv->task);                  /* the first load on the loop's next turn */
    *out = inv;
    return GP_EOK;
}

void
gp_inventory_free(gp_inventory *inv)
{
    if (inv == NULL)
        return;
    for (uint32_t i = 0; i < inv->sites.n; i++)
        free(((site_ent *)tab_at(&inv->sites, i))->s.prices);
    tab_free(&inv->sites);
    tab_free(&inv->nodes);
    free(inv);
}

/* ---- lookups ------------------------------------------------------------------------------ */

bool
gp_inventory_ready(const gp_inventory *inv)
{
    return inv != NULL && inv->ready;
}

const gp_inv_site *
gp_inventory_site(const gp_inventory *inv, const char *id)
{
    const site_ent *e = inv != NULL ? site_find(inv, id) : NULL;

    return e != NULL && !e->gone ? &e->s : NULL;
}

const gp_inv_node *
gp_inventory_node(const gp_inventory *inv, const char *id)
{
    const node_ent *e = inv != NULL ? node_find(inv, id) : NULL;

    return e != NULL && !e->gone ? &e->n : NULL;
}

uint32_t
gp_inventory_nsites(const gp_inventory *inv)
{
    return inv != NULL ? inv->nsites : 0;
}

uint32_t
gp_inventory_nnodes(const gp_inventory *inv)
{
    return inv != NULL ? inv->nnodes : 0;
}

void
gp_inventory_reload(gp_inventory *inv)
{
    if (inv == NULL)
        return;
    inv->want = true;
    if (inv->task != NULL)
        gp_task_kick(inv->task);
}
