/* sites.c -- what rating needs from outside a record: the site (owner,
 * currency, PUE, latency tier, power price by time of day), from the
 * registry's inventory as gp/inventory.h follows it (its change events,
 * a full reload every site-cache-ms), or asked of the registry
 * (gp.admin.site.get) when the follower does not know it yet; its owner's
 * revenue share (gp.admin.tenant.get), cached site-cache-ms; the price
 * book, billing's own table, reloaded every book-ms. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/call.h"
#include "gp/clock.h"
#include "gp/log.h"
#include "gp/shard.h"
#include "billing.h"

typedef struct site_call {
    billing         *b;
    bill_site        s;
    billing_site_cb *cb;
    void            *arg;
} site_call;

static void
call_end(site_call *c, gp_err err, const char *detail)
{
    c->cb(c->arg, err, err == GP_EOK ? &c->s : NULL, detail);
    free(c);
}

static void
share_set(bill_site *s, const billing_owner *o)
{
    s->partner = o->partner;
    s->share_bp = o->share_bp;
}

static void
owner_read(void *arg, gp_err err, const void *reply, const char *detail)
{
    site_call        *c = arg;
    const msg_tenant *t = reply;
    billing_owner    *o;

    if (err != GP_EOK) {
        call_end(c, err, detail);
        return;
    }
    o = &c->b->owners[gp_fnv1a(t->id) % BILLING_OWNER_SLOTS];
    snprintf(o->id, sizeof(o->id), "%s", t->id);
    o->partner = (t->kind == MSG_TENANT_KIND_PARTNER || t->kind == MSG_TENANT_KIND_SITE_OPERATOR) &&
                 t->revenue_share_bp > 0;
    o->share_bp = o->partner ? t->revenue_share_bp : 0;
    o->valid = true;
    o->loaded_ms = gp_mono_ms();
    share_set(&c->s, o);
    call_end(c, GP_EOK, "");
}

/* The owner's share, from the cache or the registry. */
static void
owner_get(site_call *c)
{
    billing_owner *o = &c->b->owners[gp_fnv1a(c->s.owner) % BILLING_OWNER_SLOTS];
    msg_id_request q = {0};
    char           subj[GP_MAX_SUBJECT];

    if (o->valid && strcmp(o->id, c->s.owner) == 0 &&
        gp_mono_ms() - o->loaded_ms < c->b->cfg->site_cache_ms) {
        share_set(&c->s, o);
        call_end(c, GP_EOK, "");
        return;
    }
    snprintf(q.id, sizeof(q.id), "%s", c->s.owner);
    if (gp_op_subject(GP_OP_ADMIN_TENANT_GET, subj, sizeof(subj), NULL) != GP_EOK ||
        gp_call(gp_app_bus(c->b->app), subj, &msg_id_request_desc, &q, &msg_tenant_desc, 5000,
                owner_read, c) != GP_EOK)
        call_end(c, GP_EUNAVAIL, "cannot ask the registry");
}

static void
site_from_inventory(bill_site *b, const gp_inv_site *s)
{
    snprintf(b->id, sizeof(b->id), "%s", s->id);
    snprintf(b->owner, sizeof(b->owner), "%s", s->tenant);
    snprintf(b->currency, sizeof(b->currency), "%s", s->currency);
    b->latency_tier = s->latency_tier;
    b->pue_milli = s->pue_milli > 0 ? s->pue_milli : 1000;
    b->tz_min = s->timezone_min;
    for (uint32_t i = 0; i < s->nprices && i < BILL_MAX_PRICES; i++) {
        b->price[i].start_min = s->prices[i].start_min;
        b->price[i].micros_per_kwh = s->prices[i].micros_per_kwh;
        b->nprices = i + 1;
    }
}

static void
site_read(void *arg, gp_err err, const void *reply, const char *detail)
{
    site_call             *c = arg;
    const msg_site        *m = reply;
    const msg_power_price *pp;

    if (err != GP_EOK) {
        call_end(c, err, detail);
        return;
    }
    snprintf(c->s.id, sizeof(c->s.id), "%s", m->id);
    snprintf(c->s.owner, sizeof(c->s.owner), "%s", m->tenant);
    snprintf(c->s.currency, sizeof(c->s.currency), "%s", m->currency);
    c->s.latency_tier = m->latency_tier;
    c->s.pue_milli = m->pue_milli > 0 ? m->pue_milli : 1000;
    c->s.tz_min = m->timezone_min;
    pp = m->power_prices.v;
    for (uint32_t i = 0; i < m->power_prices.n && i < BILL_MAX_PRICES; i++) {
        c->s.price[i].start_min = pp[i].start_min;
        c->s.price[i].micros_per_kwh = pp[i].price_micros_per_kwh;
        c->s.nprices = i + 1;
    }
    owner_get(c);
}

void
billing_site_get(billing *b, const char *site, billing_site_cb *cb, void *arg)
{
    const gp_inv_site *known = gp_inventory_site(b->inv, site);
    msg_id_request     q = {0};
    char               subj[GP_MAX_SUBJECT];
    site_call         *c;

    if ((c = calloc(1, sizeof(*c))) == NULL) {
        cb(arg, GP_ENOMEM, NULL, "out of memory");
        return;
    }
    c->b = b;
    c->cb = cb;
    c->arg = arg;
    if (known != NULL) {
        site_from_inventory(&c->s, known);
        owner_get(c);
        return;
    }
    /* not followed yet (a first load not done, an event missed): asked */
    snprintf(q.id, sizeof(q.id), "%s", site);
    if (gp_op_subject(GP_OP_ADMIN_SITE_GET, subj, sizeof(subj), NULL) != GP_EOK ||
        gp_call(gp_app_bus(b->app), subj, &msg_id_request_desc, &q, &msg_site_desc, 5000,
                site_read, c) != GP_EOK)
        call_end(c, GP_EUNAVAIL, "cannot ask the registry");
}

/* ---- the price book ------------------------------------------------------------------ */

bool
billing_price_at(const billing *b, const char *product, uint64_t t_ms, int64_t *micros,
                 char *currency)
{
    const billing_price *best = NULL;

    for (unsigned i = 0; i < b->nbook; i++)       /* ordered by product, from_ms */
        if (strcmp(b->book[i].product, product) == 0 && (uint64_t)b->book[i].from_ms <= t_ms)
            best = &b->book[i];
    if (best == NULL)
        return false;
    *micros = best->micros;
    memcpy(currency, best->currency, 4);
    return true;
}

static void
book_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    billing       *b = arg;
    billing_price *book;
    int            n;

    b->book_loading = false;
    if (err != GP_EOK || nres < 1) {
        GP_WARN("price_book_load_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    n = PQntuples(res[0]);
    if ((book = calloc((size_t)n + 1, sizeof(*book))) == NULL)
        return;
    for (int i = 0; i < n; i++) {
        snprintf(book[i].product, sizeof(book[i].product), "%s", PQgetvalue(res[0], i, 0));
        snprintf(book[i].currency, sizeof(book[i].currency), "%s", PQgetvalue(res[0], i, 1));
        book[i].micros = strtoll(PQgetvalue(res[0], i, 2), NULL, 10);
        book[i].from_ms = strtoll(PQgetvalue(res[0], i, 3), NULL, 10);
    }
    free(b->book);
    b->book = book;
    b->nbook = (unsigned)n;
}

void
billing_book_run(gp_app *app, void *arg)
{
    billing *b = arg;

    if (b->book_loading)
        return;
    if (gp_db_query(gp_app_db(app), "SELECT product, currency, micros_per_gpu_hour, from_ms"
                                    " FROM price_book ORDER BY product, from_ms",
                    0, NULL, 0, book_read, b) == GP_EOK)
        b->book_loading = true;
}

gp_err
billing_sites_start(billing *b)
{
    unsigned resync = b->cfg->site_cache_ms > 0 ? b->cfg->site_cache_ms : 60000;

    b->owners = calloc(BILLING_OWNER_SLOTS, sizeof(*b->owners));
    if (b->owners == NULL)
        return GP_ENOMEM;
    return gp_inventory_new(b->app, &(gp_inventory_opts){.resync_ms = resync}, &b->inv);
}

void
billing_sites_free(billing *b)
{
    gp_inventory_free(b->inv);
    free(b->owners);
    free(b->book);
    b->inv = NULL;
    b->owners = NULL;
    b->book = NULL;
}
