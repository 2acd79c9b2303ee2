/* place_test -- the snapshot and the placement engine on hand-built
 * fleets: every filter's reason and count, the rights rule, the latency
 * model, multi-node all-or-nothing, packing, the score breakdown, index
 * consistency after updates, and the candidate bound on 100,000 nodes
 * (counted in nodes examined, not timed). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../../services/scheduler/plan/place.h"
#include "test.h"

#define R(x) MSG_PENDING_REASON_REASON_##x

/* ---- builders ---------------------------------------------------------------- */

static void tenant(snap *s, const char *id, const char *parent)
{
    msg_tenant t;
    memset(&t, 0, sizeof t);
    snprintf(t.id, sizeof t.id, "%s", id);
    snprintf(t.parent, sizeof t.parent, "%s", parent);
    T_OK(snap_tenant_upsert(s, &t) == 0);
}

static int site(snap *s, const char *id, const char *owner, const char *region, double lat,
                double lon, int tier, double rtt)
{
    static msg_power_price pp[2] = {{0, 0, 100000}, {0, 480, 300000}};  /* 0.10, 0.30 /kWh */
    msg_site m;
    memset(&m, 0, sizeof m);
    snprintf(m.id, sizeof m.id, "%s", id);
    snprintf(m.tenant, sizeof m.tenant, "%s", owner);
    snprintf(m.region, sizeof m.region, "%s", region);
    snprintf(m.currency, sizeof m.currency, "EUR");
    m.lat = lat;
    m.lon = lon;
    m.latency_tier = tier;
    m.pue_milli = 1200;
    m.uplink_rtt_ms = rtt;
    GP_SET_HAS(&m, MSG_SITE__UPLINK_RTT_MS);
    m.power_prices.v = pp;
    m.power_prices.n = 2;
    return snap_site_upsert(s, &m);
}

static void pool(snap *s, const char *id, const char *owner, int scope, const char *where,
                 const char *model)
{
    char models[1][32];
    msg_pool m;
    memset(&m, 0, sizeof m);
    snprintf(m.id, sizeof m.id, "%s", id);
    snprintf(m.tenant, sizeof m.tenant, "%s", owner);
    m.scope = scope;
    if (scope == MSG_POOL_SCOPE_REGION) snprintf(m.region, sizeof m.region, "%s", where);
    if (scope == MSG_POOL_SCOPE_SITE) snprintf(m.site, sizeof m.site, "%s", where);
    if (model) {
        snprintf(models[0], 32, "%s", model);
        m.models.v = models;
        m.models.n = 1;
    }
    T_OK(snap_pool_upsert(s, &m) == 0);
}

static void product(snap *s, const char *id, const char *pool_id, const char *model,
                    int64_t price, const char *cur, const char *at)
{
    msg_product m;
    memset(&m, 0, sizeof m);
    snprintf(m.id, sizeof m.id, "%s", id);
    snprintf(m.pool, sizeof m.pool, "%s", pool_id);
    snprintf(m.gpu_model, sizeof m.gpu_model, "%s", model);
    snprintf(m.currency, sizeof m.currency, "%s", cur);
    snprintf(m.site, sizeof m.site, "%s", at);
    m.price_micros_per_gpu_hour = price;
    T_OK(snap_product_upsert(s, &m) == 0);
}

static int node(snap *s, const char *id, const char *at, int ngpu, const char *model,
                uint32_t vram, int state)
{
    msg_gpu g[16];
    msg_node m;
    memset(&m, 0, sizeof m);
    memset(g, 0, sizeof g);
    snprintf(m.id, sizeof m.id, "%s", id);
    snprintf(m.site, sizeof m.site, "%s", at);
    for (int i = 0; i < ngpu; i++) {
        g[i].index = i;
        snprintf(g[i].model, sizeof g[i].model, "%s", model);
        g[i].vram_mb = vram;
    }
    m.gpus.v = g;
    m.gpus.n = (uint32_t)ngpu;
    m.state = state;
    GP_SET_HAS(&m, MSG_NODE__STATE);
    return snap_node_upsert(s, &m);
}

static msg_job_spec job(int g)
{
    msg_job_spec j;
    memset(&j, 0, sizeof j);
    snprintf(j.command, sizeof j.command, "sim:run=1s");
    j.gpus_per_node = g;
    return j;
}

static void job_models(msg_job_spec *j, char (*m)[32], const char *model)
{
    snprintf(m[0], 32, "%s", model);
    j->gpu_models.v = m;
    j->gpu_models.n = 1;
}

static void job_origin(msg_job_spec *j, double lat, double lon, uint32_t bound)
{
    j->origin_lat = lat;
    j->origin_lon = lon;
    GP_SET_HAS(j, MSG_JOB_SPEC__ORIGIN_LAT);
    GP_SET_HAS(j, MSG_JOB_SPEC__ORIGIN_LON);
    if (bound) {
        j->max_latency_ms = bound;
        GP_SET_HAS(j, MSG_JOB_SPEC__MAX_LATENCY_MS);
    }
}

static void job_price(msg_job_spec *j, int64_t max, const char *cur)
{
    j->max_price_micros_per_gpu_hour = max;
    GP_SET_HAS(j, MSG_JOB_SPEC__MAX_PRICE_MICROS_PER_GPU_HOUR);
    snprintf(j->currency, sizeof j->currency, "%s", cur);
}

/* The small fleet:
 *   op (operator) -> sop (site operator) -> cust (customer); op -> sib; lonely (root)
 *   ber (Berlin, eu-de, sop), muc (Munich, eu-de, tier 1), par (Paris, eu-fr, sib)
 *   pools: global (op), ber_only (sop, site ber), fr (sib, region eu-fr),
 *          h100s (op, global, model H100)
 *   products: p_h100 (global, H100, 2.00 EUR), p_a100 (global, A100, 1.00 USD)
 *   nodes: ber-1 8xH100/80G, ber-2 2xH100/80G, ber-3 4xA100/40G,
 *          muc-1 8xH100 stale, muc-2 8xH100 draining, muc-3 4xH100,
 *          par-1 8xL4/24G */
static void fleet(snap *s)
{
    T_OK(snap_init(s, NULL) == 0);
    tenant(s, "op", "");
    tenant(s, "sop", "op");
    tenant(s, "cust", "sop");
    tenant(s, "sib", "op");
    tenant(s, "lonely", "");
    T_OK(site(s, "ber", "sop", "eu-de", 52.52, 13.405, 0, 2.0) == 0);
    T_OK(site(s, "muc", "sop", "eu-de", 48.137, 11.575, 1, 3.0) == 0);
    T_OK(site(s, "par", "sib", "eu-fr", 48.857, 2.352, 0, 2.0) == 0);
    pool(s, "global", "op", MSG_POOL_SCOPE_GLOBAL, NULL, NULL);
    pool(s, "ber_only", "sop", MSG_POOL_SCOPE_SITE, "ber", NULL);
    pool(s, "fr", "sib", MSG_POOL_SCOPE_REGION, "eu-fr", NULL);
    pool(s, "h100s", "op", MSG_POOL_SCOPE_GLOBAL, NULL, "H100");
    product(s, "p_h100", "global", "H100", 2000000, "EUR", "");
    product(s, "p_a100", "global", "A100", 1000000, "USD", "");
    T_OK(node(s, "ber-1", "ber", 8, "H100", 81920, SNAP_HEALTHY) == 0);
    T_OK(node(s, "ber-2", "ber", 2, "H100", 81920, SNAP_HEALTHY) == 0);
    T_OK(node(s, "ber-3", "ber", 4, "A100", 40960, SNAP_HEALTHY) == 0);
    T_OK(node(s, "muc-1", "muc", 8, "H100", 81920, SNAP_SUSPECT) == 0);
    T_OK(node(s, "muc-2", "muc", 8, "H100", 81920, SNAP_DRAINING) == 0);
    T_OK(node(s, "muc-3", "muc", 4, "H100", 81920, SNAP_HEALTHY) == 0);
    T_OK(node(s, "par-1", "par", 8, "L4", 24576, SNAP_HEALTHY) == 0);
    T_OK(snap_check(s) == 0);
}

static place_params all_nodes(void)
{
    place_params p;
    place_params_default(&p);
    p.walk_all = true;
    return p;
}

static uint32_t sum_reasons(const place_result *r)
{
    uint32_t n = 0;
    for (int i = 0; i < PLACE_REASONS; i++) n += r->reasons[i];
    return n;
}

/* considered = feasible + every reason (single-node jobs) */
static void balanced(const place_result *r)
{
    T_EQ_INT(r->considered, r->feasible + sum_reasons(r));
}

/* ---- tests ------------------------------------------------------------------------ */

/* The fair-share weight comes with the tenant: 1 unless given. */
static void test_tenant_weight(void)
{
    snap s;
    T_OK(snap_init(&s, NULL) == 0);
    msg_tenant t;
    memset(&t, 0, sizeof t);
    snprintf(t.id, sizeof t.id, "w1");
    T_OK(snap_tenant_upsert(&s, &t) == 0);
    T_EQ_INT(s.tenant[snap_tenant_find(&s, "w1")].weight, 1);
    t.fair_share_weight = 3;
    T_OK(snap_tenant_upsert(&s, &t) == 0);              /* an update changes it */
    T_EQ_INT(s.tenant[snap_tenant_find(&s, "w1")].weight, 3);
    snap_free(&s);
}

static void test_rights(void)
{
    snap s;
    fleet(&s);
    const snap_pool *global = &s.pool[snap_pool_find(&s, "global")];
    const snap_pool *ber = &s.pool[snap_pool_find(&s, "ber_only")];
    const snap_pool *fr = &s.pool[snap_pool_find(&s, "fr")];
    T_OK(place_may_use(&s, "sop", ber));        /* own pool */
    T_OK(place_may_use(&s, "cust", ber));       /* parent's pool */
    T_OK(place_may_use(&s, "cust", global));    /* grandparent's (operator) pool */
    T_OK(!place_may_use(&s, "cust", fr));       /* a sibling of its parent */
    T_OK(!place_may_use(&s, "sib", ber));       /* sibling's pool */
    T_OK(!place_may_use(&s, "op", ber));        /* a descendant's pool */
    T_OK(!place_may_use(&s, "lonely", global)); /* another tree */

    place_params p = all_nodes();
    place_result r;
    msg_job_spec j = job(1);
    snprintf(j.pool, sizeof j.pool, "fr");
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_INVALID);
    T_EQ_INT(r.job_reason, R(NO_RIGHTS));
    snprintf(j.pool, sizeof j.pool, "nosuch");
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_INVALID);
    T_EQ_INT(r.job_reason, R(POOL));
    j = job(1);
    snprintf(j.product, sizeof j.product, "nosuch");
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_INVALID);
    T_EQ_INT(r.job_reason, R(PRODUCT));
    T_EQ_INT(place(&s, "ghost", &j, &p, &r), PLACE_INVALID);
    T_EQ_INT(r.job_reason, R(NO_RIGHTS));

    /* A tenant with no pool: every node fails on no_rights. */
    j = job(1);
    T_EQ_INT(place(&s, "lonely", &j, &p, &r), PLACE_NONE);
    T_EQ_INT(r.considered, 7);
    T_EQ_INT(r.reasons[R(NO_RIGHTS)], 7);
    /* sib: global and fr pools; its own fr pool holds par-1 only, and it
     * may use the operator's global pool: placed. The site operator's ber
     * pool is not its own, but ber nodes are in global: placed anyway. */
    T_EQ_INT(place(&s, "sib", &j, &p, &r), PLACE_OK);
    /* cust in its parent's site pool: only ber nodes. */
    snprintf(j.pool, sizeof j.pool, "ber_only");
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_EQ_INT(r.reasons[R(POOL)], 4);
    for (uint32_t i = 0; i < r.nchoices; i++) T_OK(!strcmp(r.choice[i].site, "ber"));
    snap_free(&s);
}

static void test_filters(void)
{
    snap s;
    fleet(&s);
    place_params p = all_nodes();
    place_result r;
    char m[1][32];

    /* base: unhealthy and draining */
    msg_job_spec j = job(1);
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_EQ_INT(r.considered, 7);
    T_EQ_INT(r.reasons[R(UNHEALTHY)], 1);
    T_EQ_INT(r.reasons[R(DRAINING)], 1);
    T_EQ_INT(r.feasible, 5);
    balanced(&r);
    /* cordoned counts as draining */
    T_OK(snap_node_cordon(&s, "ber-2", true) == 0);
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(DRAINING)], 2);
    T_OK(snap_node_cordon(&s, "ber-2", false) == 0);

    /* pool: the H100 pool leaves out the A100 and L4 nodes */
    snprintf(j.pool, sizeof j.pool, "h100s");
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(POOL)], 2);
    T_EQ_INT(r.reasons[R(UNHEALTHY)], 1);
    T_EQ_INT(r.feasible, 3);
    balanced(&r);

    /* product pinned to a site */
    product(&s, "p_muc", "global", "H100", 1500000, "EUR", "muc");
    j = job(1);
    snprintf(j.product, sizeof j.product, "p_muc");
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(PRODUCT)], 4);
    T_EQ_INT(r.feasible, 1);
    T_OK(!strcmp(r.choice[0].node[0], "muc-3"));
    T_EQ_INT(r.choice[0].price_micros, 1500000);
    T_OK(!strcmp(r.choice[0].currency, "EUR"));
    balanced(&r);

    /* model */
    j = job(1);
    job_models(&j, m, "H100");
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(MODEL)], 2);
    balanced(&r);
    job_models(&j, m, "B200");                 /* a model nobody has */
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_NONE);
    T_EQ_INT(r.reasons[R(MODEL)], 7);

    /* vram */
    j = job(1);
    j.min_vram_mb = 50000;
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(VRAM)], 2);
    balanced(&r);

    /* gpus: 4 per node leaves out the 2-GPU node */
    j = job(4);
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(GPUS)], 1);
    T_EQ_INT(r.feasible, 4);
    balanced(&r);

    /* price and currency: H100 at 2.00 EUR > 1.50; A100 only in USD; L4 unpriced */
    j = job(1);
    job_price(&j, 1500000, "EUR");
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(PRICE)], 3);          /* ber-1, ber-2, par-1 */
    T_EQ_INT(r.reasons[R(CURRENCY)], 1);       /* ber-3 */
    T_EQ_INT(r.feasible, 1);                   /* muc-3: p_muc at 1.50 */
    T_OK(!strcmp(r.choice[0].node[0], "muc-3"));
    T_EQ_INT(r.choice[0].price_micros, 1500000);
    balanced(&r);
    job_price(&j, 2000000, "EUR");
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_EQ_INT(r.feasible, 3);
    T_EQ_INT(r.choice[0].price_micros, 2000000);

    /* latency: from Berlin within 10 ms: Munich is ~13 ms, Paris ~11 ms */
    j = job(1);
    job_origin(&j, 52.52, 13.405, 10);
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(LATENCY)], 2);        /* muc-3, par-1 */
    T_EQ_INT(r.feasible, 3);
    balanced(&r);
    /* origin missing */
    j = job(1);
    j.max_latency_ms = 10;
    GP_SET_HAS(&j, MSG_JOB_SPEC__MAX_LATENCY_MS);
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_INVALID);
    T_EQ_INT(r.job_reason, R(ORIGIN));

    /* reserved: ber-2's two GPUs booked */
    T_OK(snap_book(&s, "ber-2", 0x3, "j1", 1, 100, true) == 0);
    T_OK(snap_book(&s, "ber-2", 0x1, "j2", 1, 100, true) < 0);   /* taken */
    j = job(2);
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(RESERVED)], 1);
    balanced(&r);
    /* claimed for a held job: reserved for others, open to the claimant */
    T_OK(snap_node_claim(&s, "ber-1", true) == 0);
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(RESERVED)], 2);
    p.claimant = true;
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(RESERVED)], 1);
    /* a site newer than the feed's pools and products: none of its nodes
     * is placed on until they are loaded (an unpriced attempt otherwise) */
    p.claimant = false;
    T_OK(snap_node_claim(&s, "ber-1", false) == 0);
    uint32_t unhealthy = 0;
    place(&s, "cust", &j, &p, &r);
    unhealthy = r.reasons[R(UNHEALTHY)];
    s.site[snap_site_find(&s, "ber")].waiting = true;
    place(&s, "cust", &j, &p, &r);
    T_OKM(r.reasons[R(UNHEALTHY)] > unhealthy, "waiting site: %u nodes not ready (was %u)",
          r.reasons[R(UNHEALTHY)], unhealthy);
    for (uint32_t i = 0; i < r.nchoices; i++)
        T_OK(strcmp(r.choice[i].site, "ber") != 0);
    s.site[snap_site_find(&s, "ber")].waiting = false;
    place(&s, "cust", &j, &p, &r);
    T_EQ_INT(r.reasons[R(UNHEALTHY)], (int)unhealthy);
    snap_free(&s);
}

static void test_latency_model(void)
{
    snap s;
    fleet(&s);
    double km = place_distance_km(52.52, 13.405, 48.137, 11.575);
    T_OKM(km > 500 && km < 508, "Berlin-Munich %.1f km", km);
    const snap_site *muc = &s.site[snap_site_find(&s, "muc")];
    double ms = place_latency_ms(muc, 52.52, 13.405);
    /* 504 km / 100 km per ms + 3 ms RTT + 5 ms (tier 1) */
    T_OKM(fabs(ms - (km / 100.0 + 3.0 + 5.0)) < 1e-9 && ms > 13.0 && ms < 13.1, "muc %.3f ms", ms);
    const snap_site *ber = &s.site[snap_site_find(&s, "ber")];
    T_OKM(fabs(place_latency_ms(ber, 52.52, 13.405) - 2.0) < 1e-9, "ber = its RTT");
    /* tier 3 adds 40 ms */
    T_OK(site(&s, "far", "sop", "eu-de", 52.52, 13.405, 3, 0.0) == 0);
    T_OKM(fabs(place_latency_ms(&s.site[snap_site_find(&s, "far")], 52.52, 13.405) - 40.0) < 1e-9,
          "tier 3 = 40 ms");
    /* the bounded walk uses the geographic index and finds the same */
    place_params p;
    place_params_default(&p);
    place_result r;
    msg_job_spec j = job(1);
    job_origin(&j, 52.52, 13.405, 3);          /* cells within 300 km: Berlin's */
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_EQ_INT(r.index, PLACE_IX_GEO);
    T_EQ_INT(r.index_size, 3);
    for (uint32_t i = 0; i < r.nchoices; i++) {
        T_OK(!strcmp(r.choice[i].site, "ber"));
        T_OK(r.choice[i].latency_ms <= 3.0);
    }
    /* power price now: 08:00-24:00 UTC step 0.30 x PUE 1.2 = 360,000 */
    T_EQ_INT(place_power_now(ber, 9ull * 3600000), 360000);
    T_EQ_INT(place_power_now(ber, 1ull * 3600000), 120000);
    /* local time: UTC+2 at 07:00 UTC is 09:00 there (dear); UTC-2 at 09:00
     * UTC is 07:00 there (cheap) */
    s.site[snap_site_find(&s, "ber")].timezone_min = 120;
    T_EQ_INT(place_power_now(ber, 7ull * 3600000), 360000);
    s.site[snap_site_find(&s, "ber")].timezone_min = -120;
    T_EQ_INT(place_power_now(ber, 9ull * 3600000), 120000);
    T_EQ_INT(place_power_now(ber, 1ull * 3600000), 360000);   /* 23:00 yesterday */
    snap_free(&s);
}

static void test_packing_and_scores(void)
{
    snap s;
    fleet(&s);
    place_params p;
    place_params_default(&p);
    place_result r;
    char m[1][32];
    msg_job_spec j = job(2);
    job_models(&j, m, "H100");
    snprintf(j.pool, sizeof j.pool, "ber_only");
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_EQ_INT(r.nchoices, 2);
    T_OK(!strcmp(r.choice[0].node[0], "ber-2"));          /* fills it */
    T_EQ_INT(r.choice[0].score.packing, 1000 * PLACE_W_PACKING);
    T_EQ_INT(r.choice[1].score.packing, 250 * PLACE_W_PACKING);
    T_EQ_INT(r.choice[0].gpus[0], 0x3);
    const place_score *sc = &r.choice[0].score;
    T_EQ_INT(sc->total, sc->latency + sc->price + sc->packing + sc->reliability + sc->thermal);
    /* ber_only has no product: unpriced, so the power cost at the site now:
     * 00:00 UTC, 0.10/kWh x PUE 1.2 = 120,000 micros -> 880 */
    T_OK(!r.choice[0].priced);
    T_EQ_INT(sc->price, (1000 - 120) * PLACE_W_PRICE);
    T_EQ_INT(sc->thermal, 500 * PLACE_W_THERMAL);                    /* unknown temp */
    T_EQ_INT(sc->reliability, 1000 * PLACE_W_RELIAB);
    /* in the global pool the H100 product prices it: 2.00 -> 800 */
    j.pool[0] = 0;
    place(&s, "cust", &j, &p, &r);
    T_OK(r.choice[0].priced);
    T_EQ_INT(r.choice[0].price_micros, 2000000);
    T_EQ_INT(r.choice[0].score.price, (1000 - 2000000 / 10000) * PLACE_W_PRICE);
    snprintf(j.pool, sizeof j.pool, "ber_only");

    /* failures and heat move the choice to the other node */
    T_OK(snap_node_fault(&s, "ber-2", 1000) == 0);
    T_OK(snap_node_fault(&s, "ber-2", 1000) == 0);
    T_OK(snap_node_fault(&s, "ber-2", 1000) == 0);
    T_OK(snap_node_temp(&s, "ber-2", 85) == 0);
    p.now_mono_ms = 1000;
    place(&s, "cust", &j, &p, &r);
    T_OK(!strcmp(r.choice[0].node[0], "ber-1"));
    T_EQ_INT(r.choice[1].score.reliability, 250 * PLACE_W_RELIAB);
    T_EQ_INT(r.choice[1].score.thermal, 100 * PLACE_W_THERMAL);
    /* a half-life later half the failures are forgotten */
    p.now_mono_ms = 1000 + s.cfg.fail_half_life_ms;
    T_EQ_INT(snap_node_failures_milli(&s, &s.node[snap_node_find(&s, "ber-2")], p.now_mono_ms), 1500);

    /* latency part with an origin */
    j = job(1);
    job_origin(&j, 52.52, 13.405, 0);
    place(&s, "cust", &j, &p, &r);
    T_OK(r.choice[0].score.latency > 0);
    snap_free(&s);
}

/* A retry avoids the nodes where the job's earlier attempts failed to
 * start or were lost, whatever their score, but still lands there when
 * nothing else fits. */
static void test_avoid(void)
{
    snap s;
    fleet(&s);
    place_params p;
    place_params_default(&p);
    place_result r;
    char m[1][32];
    msg_job_spec j = job(2);
    job_models(&j, m, "H100");
    snprintf(j.pool, sizeof j.pool, "ber_only");
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_OK(!strcmp(r.choice[0].node[0], "ber-2"));          /* the best fit */
    static const char avoid[2][SNAP_ID_LEN] = {"xx-9", "ber-2"};
    p.avoid = avoid;
    p.navoid = 2;
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_EQ_INT(r.nchoices, 2);
    T_OK(!strcmp(r.choice[0].node[0], "ber-1"));          /* goes elsewhere */
    T_OK(!strcmp(r.choice[1].node[0], "ber-2"));          /* kept as the fallback */
    T_OK(r.choice[1].score.total > r.choice[0].score.total);
    /* when the avoided node is the only fit, it is still chosen */
    j = job(8);
    job_models(&j, m, "H100");
    snprintf(j.pool, sizeof j.pool, "ber_only");
    static const char avoid1[1][SNAP_ID_LEN] = {"ber-1"};
    p.avoid = avoid1;
    p.navoid = 1;
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);    /* only ber-1 has 8 */
    T_EQ_INT(r.nchoices, 1);
    T_OK(!strcmp(r.choice[0].node[0], "ber-1"));
    snap_free(&s);
}

/* Equal nodes are ordered by a hash of the node id and the instance's
 * seed: one seed always picks the same node, different seeds spread
 * over the equal ones (instances do not race for one node). */
static void test_seed_ties(void)
{
    snap s;
    T_OK(snap_init(&s, NULL) == 0);
    tenant(&s, "op", "");
    T_OK(site(&s, "tw", "op", "eu-de", 52.52, 13.405, 0, 2.0) == 0);
    pool(&s, "global", "op", MSG_POOL_SCOPE_GLOBAL, NULL, NULL);
    for (int i = 0; i < 16; i++) {
        char id[16];
        snprintf(id, sizeof id, "tw-%d", i);
        T_OK(node(&s, id, "tw", 4, "H100", 81920, SNAP_HEALTHY) == 0);
    }
    place_params p;
    place_params_default(&p);
    place_result r;
    msg_job_spec j = job(1);
    char first[8][SNAP_ID_LEN];
    int distinct = 0;
    for (uint32_t k = 0; k < 8; k++) {
        p.seed = 0x9e3779b9u * (k + 1);
        T_EQ_INT(place(&s, "op", &j, &p, &r), PLACE_OK);
        snprintf(first[k], SNAP_ID_LEN, "%s", r.choice[0].node[0]);
        bool seen = false;
        for (uint32_t i = 0; i < k; i++) seen |= !strcmp(first[i], first[k]);
        distinct += !seen;
        T_EQ_INT(place(&s, "op", &j, &p, &r), PLACE_OK);      /* same seed, same pick */
        T_OK(!strcmp(r.choice[0].node[0], first[k]));
        T_OK(r.nchoices < 2 || r.choice[1].tie > r.choice[0].tie);
    }
    T_OKM(distinct >= 4, "8 seeds picked %d distinct nodes of 16 equal ones", distinct);
    snap_free(&s);
}

/* A preempted attempt's GPUs handed over to its preemptor (snap_handover):
 * free to the heir only, never to other work; the heir's booking drops
 * the hold. */
static void test_heir_hold(void)
{
    snap s;
    fleet(&s);
    place_params p;
    place_params_default(&p);
    place_result r;
    char m[1][32];
    msg_job_spec j = job(8);
    job_models(&j, m, "H100");
    snprintf(j.pool, sizeof j.pool, "ber_only");
    T_OK(snap_book(&s, "ber-1", 0xff, "victim", 3, 10, true) == 0);
    T_OK(place(&s, "cust", &j, &p, &r) != PLACE_OK);      /* only ber-1 has 8 */
    T_OK(snap_handover(&s, "ber-1", "victim", 3, "pre") == 0);
    T_OK(snap_handover(&s, "ber-1", "victim", 3, "pre") < 0);   /* nothing left */
    int32_t ni = snap_node_find(&s, "ber-1");
    T_EQ_INT(s.node[ni].heir_holds, 1);
    T_EQ_INT(s.node[ni].free_mask & 0xff, 0);
    p.heir = "someone-else";
    T_OK(place(&s, "cust", &j, &p, &r) != PLACE_OK);      /* held: not theirs */
    p.heir = "pre";
    p.heir_walk = true;
    /* the node claimed for a held job (the victim, requeued and held in
     * the same pass) stays open to the heir, and only to it */
    T_OK(snap_node_claim(&s, "ber-1", true) == 0);
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_OK(!strcmp(r.choice[0].node[0], "ber-1"));
    p.heir = "someone-else";
    T_OK(place(&s, "cust", &j, &p, &r) != PLACE_OK);
    p.heir = "pre";
    T_OK(snap_node_claim(&s, "ber-1", false) == 0);
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_OK(!strcmp(r.choice[0].node[0], "ber-1"));
    T_EQ_INT(r.choice[0].gpus[0], 0xff);
    T_OK(snap_book(&s, "ber-1", 0xff, "pre", 1, 500, false) == 0);   /* takes the hold */
    T_EQ_INT(s.node[ni].heir_holds, 0);
    T_OK(snap_check(&s) == 0);
    snap_free(&s);
}

static void test_multi_node(void)
{
    snap s;
    fleet(&s);
    T_OK(site(&s, "hub", "sop", "eu-de", 50.11, 8.68, 0, 1.0) == 0);
    T_OK(node(&s, "hub-1", "hub", 8, "H100", 81920, SNAP_HEALTHY) == 0);
    T_OK(node(&s, "hub-2", "hub", 8, "H100", 81920, SNAP_HEALTHY) == 0);
    T_OK(node(&s, "hub-3", "hub", 8, "H100", 81920, SNAP_HEALTHY) == 0);
    place_params p = all_nodes();
    place_result r;
    char m[1][32];
    msg_job_spec j = job(8);
    job_models(&j, m, "H100");
    j.nodes = 3;
    GP_SET_HAS(&j, MSG_JOB_SPEC__NODES);
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_EQ_INT(r.nchoices, 1);
    T_OK(!strcmp(r.choice[0].site, "hub"));
    T_EQ_INT(r.choice[0].nnodes, 3);
    T_OK(strcmp(r.choice[0].node[0], r.choice[0].node[1]) && strcmp(r.choice[0].node[1], r.choice[0].node[2]));
    T_EQ_INT(r.choice[0].gpus[2], 0xff);
    /* ber: 1 fitting node, muc: 0 fitting (stale, draining, 4 GPUs), par: none */
    T_EQ_INT(r.reasons[R(SITE_NODES)], 3);
    T_EQ_INT(r.reasons[R(GPUS)], 2);            /* ber-2, muc-3 */

    /* one GPU of hub-3 booked: 3 nodes no longer fit anywhere: nothing placed */
    T_OK(snap_book(&s, "hub-3", 0x80, "x", 1, 50, true) == 0);
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_NONE);
    T_EQ_INT(r.nchoices, 0);
    T_EQ_INT(r.reasons[R(SITE_NODES)], 4);
    T_EQ_INT(r.reasons[R(RESERVED)], 1);
    /* two nodes still fit at the hub; the bounded walk finds them too */
    j.nodes = 2;
    place_params_default(&p);
    T_EQ_INT(place(&s, "cust", &j, &p, &r), PLACE_OK);
    T_OK(!strcmp(r.choice[0].site, "hub"));
    T_EQ_INT(r.choice[0].nnodes, 2);
    for (uint32_t k = 0; k < 2; k++) T_OK(strcmp(r.choice[0].node[k], "hub-3"));
    snap_free(&s);
}

static void test_index_updates(void)
{
    snap s;
    fleet(&s);
    int32_t h100 = snap_model_find(&s, "H100"), a100 = snap_model_find(&s, "A100");
    uint32_t h = s.by_model[h100].count;
    T_EQ_INT(h, 5);
    /* regpu a node: H100 -> A100 */
    T_OK(node(&s, "ber-2", "ber", 2, "A100", 40960, SNAP_HEALTHY) == 0);
    T_EQ_INT(s.by_model[h100].count, h - 1);
    T_EQ_INT(s.by_model[a100].count, 2);
    T_OK(snap_check(&s) == 0);
    /* bookings move it between free buckets; an upsert keeps them */
    T_OK(snap_book(&s, "ber-1", 0x0f, "j", 1, 10, true) == 0);
    T_EQ_INT(s.node[snap_node_find(&s, "ber-1")].key[SNAP_IX_FREE], 4);
    T_OK(node(&s, "ber-1", "ber", 8, "H100", 81920, SNAP_HEALTHY) == 0);
    T_EQ_INT(s.node[snap_node_find(&s, "ber-1")].key[SNAP_IX_FREE], 4);
    T_OK(snap_check(&s) == 0);
    T_OK(snap_unbook(&s, "ber-1", "j", 1) == 0);
    T_OK(snap_unbook(&s, "ber-1", "j", 1) < 0);
    T_EQ_INT(s.node[snap_node_find(&s, "ber-1")].key[SNAP_IX_FREE], 8);
    /* move a node to another site; region and cell counts follow */
    int32_t de = snap_region_find(&s, "eu-de"), fr = snap_region_find(&s, "eu-fr");
    T_EQ_INT(s.by_region[de].nodes, 6);
    T_OK(node(&s, "ber-3", "par", 4, "A100", 40960, SNAP_HEALTHY) == 0);
    T_EQ_INT(s.by_region[de].nodes, 5);
    T_EQ_INT(s.by_region[fr].nodes, 2);
    T_OK(snap_check(&s) == 0);
    /* move a site to another region and place */
    T_OK(site(&s, "par", "sib", "eu-de", 48.857, 2.352, 0, 2.0) == 0);
    T_EQ_INT(s.by_region[de].nodes, 7);
    T_EQ_INT(s.by_region[fr].nodes, 0);
    T_OK(site(&s, "par", "sib", "eu-fr", 40.0, -3.7, 0, 2.0) == 0);   /* moved to Madrid */
    T_EQ_INT(s.cell[snap_geo_cell(40.0, -3.7)].nodes, 2);
    T_EQ_INT(s.cell[snap_geo_cell(48.857, 2.352)].nodes, 0);
    T_OK(snap_check(&s) == 0);
    /* removal: a site with nodes stays; nodes go with their bookings */
    T_OK(snap_site_remove(&s, "par") < 0);
    T_OK(snap_book(&s, "par-1", 0x1, "k", 2, 10, false) == 0);
    T_OK(snap_node_remove(&s, "par-1") == 0);
    T_OK(snap_node_remove(&s, "ber-3") == 0);
    T_OK(snap_node_remove(&s, "ber-3") < 0);
    T_OK(snap_site_remove(&s, "par") == 0);
    T_EQ_INT(s.nodes, 5);
    T_OK(snap_check(&s) == 0);
    /* slots are reused, the map still finds everything */
    T_OK(node(&s, "ber-9", "ber", 1, "L4", 24576, SNAP_HEALTHY) == 0);
    T_OK(snap_node_find(&s, "ber-9") >= 0 && snap_node_find(&s, "par-1") < 0);
    T_OK(node(&s, "nowhere-1", "nosite", 1, "L4", 24576, SNAP_HEALTHY) < 0);
    T_OK(snap_check(&s) == 0);
    /* node state from the registry's event */
    msg_node_state ns;
    memset(&ns, 0, sizeof ns);
    snprintf(ns.node, sizeof ns.node, "ber-9");
    ns.state = MSG_NODE_STATE_STATE_QUARANTINED;
    T_OK(snap_node_state(&s, &ns) == 0);
    T_EQ_INT(s.node[snap_node_find(&s, "ber-9")].state, SNAP_QUARANTINED);
    snap_free(&s);
}

/* ---- 100,000 nodes ---------------------------------------------------------------- */

/* 12,500 sites x 8 nodes x 8 GPUs over Europe; 1 node in 100 has A100s. */
static void big_fleet(snap *s)
{
    T_OK(snap_init(s, NULL) == 0);
    tenant(s, "op", "");
    pool(s, "global", "op", MSG_POOL_SCOPE_GLOBAL, NULL, NULL);
    int bad = 0;
    for (int i = 0; i < 12500; i++) {
        char sid[32], nid[48];
        snprintf(sid, sizeof sid, "s%05d", i);
        double lat = 36.0 + (i % 125) * 0.2, lon = -9.0 + (i / 125) * 0.4;
        bad += site(s, sid, "op", i % 2 ? "eu-a" : "eu-b", lat, lon, i % 4, 2.0) != 0;
        for (int k = 0; k < 8; k++) {
            snprintf(nid, sizeof nid, "%s-n%d", sid, k);
            int a = (i * 8 + k) % 100 == 0;
            bad += node(s, nid, sid, 8, a ? "A100" : "H100", a ? 40960 : 81920, SNAP_HEALTHY) != 0;
        }
    }
    T_EQ_INT(bad, 0);
    T_EQ_INT(s->nodes, 100000);
}

static void test_bound(void)
{
    snap s;
    big_fleet(&s);
    T_OK(snap_check(&s) == 0);
    place_params p;
    place_params_default(&p);
    place_result r;
    msg_job_spec j = job(1);

    /* 5% of 100,000 is 5,000, capped at k_max: 300 feasible found, no more examined */
    T_EQ_INT(place(&s, "op", &j, &p, &r), PLACE_OK);
    T_EQ_INT(r.index_size, 100000);
    T_EQ_INT(r.considered, 300);
    T_EQ_INT(r.nchoices, 8);
    /* no cap: 5% */
    p.k_max = 0;
    place(&s, "op", &j, &p, &r);
    T_EQ_INT(r.considered, 5000);
    /* a k_min above the cap wins (an explicit ask for more) */
    p.k_max = 300;
    p.k_min = 400;
    place(&s, "op", &j, &p, &r);
    T_EQ_INT(r.considered, 400);
    /* percentage 0: k_min */
    p.pct = 0;
    p.k_min = 50;
    place(&s, "op", &j, &p, &r);
    T_EQ_INT(r.considered, 50);

    /* A100: the model index holds 1,000 nodes; only those are examined */
    char m[1][32];
    job_models(&j, m, "A100");
    place(&s, "op", &j, &p, &r);
    T_EQ_INT(r.index, PLACE_IX_MODEL);
    T_EQ_INT(r.index_size, 1000);
    T_EQ_INT(r.considered, 50);
    p.k_min = 100000;                        /* no bound: still only the index */
    place(&s, "op", &j, &p, &r);
    T_EQ_INT(r.considered, 1000);
    T_EQ_INT(r.feasible, 1000);
    T_EQ_INT(r.index_skipped, 99000);

    /* latency-bounded: only cells near the origin */
    j = job(1);
    job_origin(&j, 48.0, 2.0, 3);            /* 3 ms: tier 0 sites within 100 km */
    place(&s, "op", &j, &p, &r);
    T_EQ_INT(r.index, PLACE_IX_GEO);
    T_OKM(r.considered < 10000 && r.considered == r.index_size,
          "geo examined %u of 100000", r.considered);
    T_OK(r.feasible > 0 && r.status == PLACE_OK);
    for (uint32_t i = 0; i < r.nchoices; i++) T_OK(r.choice[i].latency_ms <= 3.0);

    /* bookings on many nodes keep the indexes right */
    char nid[48];
    for (int i = 0; i < 100000; i += 3) {
        snprintf(nid, sizeof nid, "s%05d-n%d", i / 8, i % 8);
        if (snap_book(&s, nid, 0x7f, "big", 1, 10, true) < 0) T_OKM(0, "book %s", nid);
    }
    T_OK(snap_check(&s) == 0);
    j = job(2);
    p.k_min = 50;
    place(&s, "op", &j, &p, &r);
    T_EQ_INT(r.index, PLACE_IX_FREE);
    T_OK(r.index_size < 100000);
    T_EQ_INT(r.considered, 50);
    snap_free(&s);
}

int main(void)
{
    test_tenant_weight();
    test_rights();
    test_filters();
    test_latency_model();
    test_packing_and_scores();
    test_avoid();
    test_seed_ties();
    test_heir_hold();
    test_multi_node();
    test_index_updates();
    test_bound();
    return T_DONE();
}
