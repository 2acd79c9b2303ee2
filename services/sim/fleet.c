/* fleet.c -- the shape of a simulated EV-charging-style GPU network.
 *
 * One operator tenant and a few franchise partners; sites spread over 8
 * European regions; most sites have 1-4 nodes of 1-8 GPUs, about 1% are
 * hubs with 20-50 eight-GPU nodes.  Everything comes from one splitmix64
 * stream seeded by --seed, consumed in a fixed order, so the same seed
 * always gives the same fleet. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

const sim_region sim_regions[SIM_NREGIONS] = {
    {"eu-west", "Paris", 48.86, 2.35, 60, "EUR", 210000},
    {"eu-central", "Frankfurt", 50.11, 8.68, 60, "EUR", 320000},
    {"eu-north", "Stockholm", 59.33, 18.07, 60, "EUR", 110000},
    {"eu-south", "Milan", 45.46, 9.19, 60, "EUR", 280000},
    {"uk", "London", 51.51, -0.13, 0, "GBP", 260000},
    {"iberia", "Madrid", 40.42, -3.70, 60, "EUR", 190000},
    {"benelux", "Amsterdam", 52.37, 4.90, 60, "EUR", 300000},
    {"eu-east", "Warsaw", 52.23, 21.01, 60, "EUR", 200000},
};

/* Each partner franchises sites in one home region. */
const char *const sim_partner_ids[SIM_NPARTNERS] = {"fr-voltis", "de-ladepunkt", "it-ricarica",
                                                    "es-enchufe"};
static const int         partner_region[SIM_NPARTNERS] = {0, 1, 3, 5};
static const char *const partner_names[SIM_NPARTNERS] = {
    "Voltis Recharge SAS", "Ladepunkt Partner GmbH", "Ricarica Veloce Srl", "Enchufe Rapido SL"};
static const int         partner_share_bp[SIM_NPARTNERS] = {7000, 6500, 7200, 6800};

/* gpu_sim models: L4, L40S, RTX 4090, A100-80G, H100 (gpu_sim_model_name order). */
static const double  model_weight[] = {0.35, 0.25, 0.20, 0.12, 0.08};
static const char   *model_slug[] = {"l4", "l40s", "rtx4090", "a100-80g", "h100"};
static const int64_t model_price[] = {700000, 1400000, 900000, 2200000, 3500000}; /* per GPU-h */
static const int     gpus_choice[] = {1, 2, 4, 8};
static const double  gpus_weight[] = {0.25, 0.30, 0.30, 0.15};
static const int     nodes_choice[] = {1, 2, 3, 4};
static const double  nodes_weight[] = {0.15, 0.30, 0.27, 0.28};

static int
pick(uint64_t *rng, const double *w, int n)
{
    double u = gp_rng_unit(rng), acc = 0;

    for (int i = 0; i < n; i++)
        if (u < (acc += w[i]))
            return i;
    return n - 1;
}

static int
range(uint64_t *rng, int lo, int hi)
{
    return lo + (int)(gp_rng_unit(rng) * (hi - lo + 1));
}

static int
model_index(const char *m)
{
    for (int i = 0; i < gpu_sim_nmodels(); i++)
        if (strcmp(gpu_sim_model_name(i), m) == 0)
            return i;
    return 0;
}

static void
build_site(fleet *f, int i, bool hub, uint64_t *rng)
{
    sim_site *s = &f->sites[i];
    int       r = range(rng, 0, SIM_NREGIONS - 1);

    snprintf(s->id, sizeof(s->id), "s%04d", i + 1);
    s->region = r;
    s->hub = hub;
    s->lat = sim_regions[r].lat + (gp_rng_unit(rng) - 0.5) * 3.0;
    s->lon = sim_regions[r].lon + (gp_rng_unit(rng) - 0.5) * 4.0;
    s->pue_milli = hub ? range(rng, 1050, 1200) : range(rng, 1100, 1400);
    s->latency_tier = hub ? 1 : range(rng, 1, 3);
    s->rtt_ms = 4 + s->latency_tier * range(rng, 3, 20);
    snprintf(s->tenant, sizeof(s->tenant), "%s", SIM_OPERATOR);
    for (int p = 0; p < SIM_NPARTNERS && !hub; p++)
        if (partner_region[p] == r && gp_rng_unit(rng) < 0.35)
            snprintf(s->tenant, sizeof(s->tenant), "%s", sim_partner_ids[p]);
    s->nnodes = hub ? range(rng, 20, 50) : nodes_choice[pick(rng, nodes_weight, 4)];
}

static int
add_nodes(fleet *f, int si, uint64_t *rng)
{
    sim_site *s = &f->sites[si];
    int       m = s->hub ? 3 + range(rng, 0, 1) : pick(rng, model_weight, 5);
    int       g = s->hub ? 8 : gpus_choice[pick(rng, gpus_weight, 4)];
    sim_node *nn = realloc(f->nodes, sizeof(*nn) * (size_t)(f->nnodes + s->nnodes));

    if (nn == NULL)
        return -1;
    f->nodes = nn;
    s->first_node = f->nnodes;
    for (int k = 0; k < s->nnodes; k++) {
        sim_node *n = &f->nodes[f->nnodes++];

        memset(n, 0, sizeof(*n));
        snprintf(n->id, sizeof(n->id), "%s-n%02d", s->id, k + 1);
        n->site = si;
        n->model = gpu_sim_model_name(m);      /* a site buys one kind of box */
        n->ngpus = g;
        n->seed = gp_rng_next(rng) | 1;
        s->gpus += g;
    }
    f->ngpus += s->gpus;
    return 0;
}

static void
add_pool(fleet *f, const char *id, const char *tenant, int scope, int region, int site)
{
    sim_pool *p = &f->pools[f->npools++];

    memset(p, 0, sizeof(*p));
    snprintf(p->id, sizeof(p->id), "%s", id);
    snprintf(p->tenant, sizeof(p->tenant), "%s", tenant);
    p->scope = scope;
    p->region = region;
    p->site = site;
}

static bool
pool_has(const fleet *f, const sim_pool *p, int site)
{
    return p->scope == MSG_POOL_SCOPE_GLOBAL ||
           (p->scope == MSG_POOL_SCOPE_REGION && f->sites[site].region == p->region) ||
           (p->scope == MSG_POOL_SCOPE_SITE && p->site == site);
}

static int
build_pools(fleet *f)
{
    char id[48];
    int  nhubs = 0;

    for (int i = 0; i < f->nsites; i++)
        nhubs += f->sites[i].hub;
    if ((f->pools = calloc((size_t)(1 + SIM_NREGIONS + nhubs), sizeof(*f->pools))) == NULL)
        return -1;
    add_pool(f, "global", SIM_OPERATOR, MSG_POOL_SCOPE_GLOBAL, -1, -1);
    for (int r = 0; r < SIM_NREGIONS; r++) {
        snprintf(id, sizeof(id), "region-%s", sim_regions[r].id);
        add_pool(f, id, SIM_OPERATOR, MSG_POOL_SCOPE_REGION, r, -1);
    }
    for (int i = 0; i < f->nsites; i++)
        if (f->sites[i].hub) {
            snprintf(id, sizeof(id), "hub-%s", f->sites[i].id);
            add_pool(f, id, f->sites[i].tenant, MSG_POOL_SCOPE_SITE, -1, i);
        }
    for (int p = 0; p < f->npools; p++)
        for (int i = 0; i < f->nsites; i++)
            if (pool_has(f, &f->pools[p], i)) {
                const sim_site *s = &f->sites[i];

                f->pools[p].gpus += s->gpus;
                f->pools[p].models |= 1u << model_index(f->nodes[s->first_node].model);
            }
    return 0;
}

static int
cmp_node(const void *a, const void *b, void *arg)
{
    const fleet *f = arg;

    return strcmp(f->nodes[*(const int *)a].id, f->nodes[*(const int *)b].id);
}

int
fleet_build(fleet *f, int nsites, uint64_t seed)
{
    uint64_t rng = seed ^ 0x67726964706f6f6cull;     /* "gridpool" */
    int      nhubs = nsites / 100;

    memset(f, 0, sizeof(*f));
    f->seed = seed;
    f->nsites = nsites;
    if ((f->sites = calloc((size_t)nsites, sizeof(*f->sites))) == NULL)
        return -1;
    for (int h = 0; h < nhubs; h++)                    /* hubs: distinct, seeded picks */
        f->sites[(h * 100 + range(&rng, 0, 99)) % nsites].hub = true;
    for (int i = 0; i < nsites; i++) {
        build_site(f, i, f->sites[i].hub, &rng);
        if (add_nodes(f, i, &rng) != 0)
            return -1;
    }
    if (build_pools(f) != 0 || (f->by_id = malloc(sizeof(int) * (size_t)f->nnodes + 1)) == NULL)
        return -1;
    for (int i = 0; i < f->nnodes; i++)
        f->by_id[i] = i;
    qsort_r(f->by_id, (size_t)f->nnodes, sizeof(int), cmp_node, f);
    return 0;
}

void
fleet_free(fleet *f)
{
    free(f->sites);
    free(f->nodes);
    free(f->pools);
    free(f->by_id);
    memset(f, 0, sizeof(*f));
}

int
fleet_find_node(const fleet *f, const char *id)
{
    int lo = 0, hi = f->nnodes - 1;

    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(f->nodes[f->by_id[mid]].id, id);

        if (c == 0)
            return f->by_id[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

int
fleet_find_site(const fleet *f, const char *id)
{
    int n;

    /* "s0007" is site 7: ids are positional. */
    if (id[0] != 's' || sscanf(id + 1, "%d", &n) != 1 || n < 1 || n > f->nsites)
        return -1;
    return strcmp(f->sites[n - 1].id, id) == 0 ? n - 1 : -1;
}

int
fleet_write_inventory(const fleet *f, const char *path)
{
    FILE *o = fopen(path, "w");

    if (o == NULL)
        return -1;
    fprintf(o, "{\"sites\":[");
    for (int i = 0; i < f->nsites; i++)
        fprintf(o, "%s\n{\"id\":\"%s\",\"tenant\":\"%s\",\"region\":\"%s\",\"nodes\":%d,\"gpus\":%d}",
                i ? "," : "", f->sites[i].id, f->sites[i].tenant,
                sim_regions[f->sites[i].region].id, f->sites[i].nnodes, f->sites[i].gpus);
    fprintf(o, "],\n\"pools\":[");
    for (int i = 0; i < f->npools; i++)
        fprintf(o, "%s\n{\"id\":\"%s\",\"gpus\":%d}", i ? "," : "", f->pools[i].id,
                f->pools[i].gpus);
    fprintf(o, "],\n\"nodes\":%d,\"gpus\":%d}\n", f->nnodes, f->ngpus);
    return fclose(o) == 0 ? 0 : -1;
}

/* ---- admin API messages --------------------------------------------------- */

int
fleet_ntenants(void)
{
    return 1 + SIM_NPARTNERS;
}

void
fleet_tenant(int i, msg_tenant *t)
{
    memset(t, 0, sizeof(*t));
    if (i == 0) {
        snprintf(t->id, sizeof(t->id), SIM_OPERATOR);
        t->kind = MSG_TENANT_KIND_OPERATOR;
        snprintf(t->name, sizeof(t->name), "EuroCharge GPU Network");
        return;
    }
    snprintf(t->id, sizeof(t->id), "%s", sim_partner_ids[i - 1]);
    snprintf(t->parent, sizeof(t->parent), SIM_OPERATOR);
    t->kind = MSG_TENANT_KIND_PARTNER;
    snprintf(t->name, sizeof(t->name), "%s", partner_names[i - 1]);
    t->revenue_share_bp = partner_share_bp[i - 1];
    GP_SET_HAS(t, MSG_TENANT__REVENUE_SHARE_BP);
}

/* Night, day, evening peak, day again: what EV-charging tariffs look like. */
void
fleet_site(const fleet *f, int i, msg_site *o, msg_power_price *steps)
{
    const sim_site   *s = &f->sites[i];
    const sim_region *r = &sim_regions[s->region];
    static const int  start[4] = {0, 7 * 60, 17 * 60, 21 * 60};
    static const int  pct[4] = {60, 100, 150, 100};
    int               local = 90 + (int)((f->seed + (uint64_t)i * 7919) % 21); /* +-10 % */

    memset(o, 0, sizeof(*o));
    snprintf(o->id, sizeof(o->id), "%s", s->id);
    snprintf(o->tenant, sizeof(o->tenant), "%s", s->tenant);
    snprintf(o->region, sizeof(o->region), "%s", r->id);
    o->lat = s->lat;
    o->lon = s->lon;
    o->latency_tier = s->latency_tier;
    o->pue_milli = s->pue_milli;
    snprintf(o->currency, sizeof(o->currency), "%s", r->currency);
    for (int k = 0; k < 4; k++) {
        memset(&steps[k], 0, sizeof(steps[k]));
        steps[k].start_min = start[k];
        steps[k].price_micros_per_kwh = r->price_micros_kwh * pct[k] / 100 * local / 100;
    }
    o->power_prices.v = steps;
    o->power_prices.n = 4;
    snprintf(o->address, sizeof(o->address), "%s charging park %d, %s", s->hub ? "Hub" : "Station",
             i + 1, r->city);
    o->timezone_min = r->tz_min;
    GP_SET_HAS(o, MSG_SITE__TIMEZONE_MIN);
    o->uplink_rtt_ms = s->rtt_ms;
    o->nodes = (uint32_t)s->nnodes;
    o->gpus = (uint32_t)s->gpus;
}

void
fleet_pool(const fleet *f, int i, msg_pool *o)
{
    const sim_pool *p = &f->pools[i];

    memset(o, 0, sizeof(*o));
    snprintf(o->id, sizeof(o->id), "%s", p->id);
    snprintf(o->tenant, sizeof(o->tenant), "%s", p->tenant);
    o->scope = p->scope;
    if (p->scope == MSG_POOL_SCOPE_REGION)
        snprintf(o->region, sizeof(o->region), "%s", sim_regions[p->region].id);
    if (p->scope == MSG_POOL_SCOPE_SITE)
        snprintf(o->site, sizeof(o->site), "%s", f->sites[p->site].id);
    snprintf(o->description, sizeof(o->description), "%s",
             p->scope == MSG_POOL_SCOPE_GLOBAL ? "Every site of the network"
             : p->scope == MSG_POOL_SCOPE_REGION ? "Every site of one region"
                                                 : "One hub site");
}

/* Products: one per (pool, model present in it). */
static bool
product_at(const fleet *f, int k, int *pool, int *model)
{
    for (int p = 0; p < f->npools; p++)
        for (int m = 0; m < gpu_sim_nmodels(); m++)
            if ((f->pools[p].models & (1u << m)) && k-- == 0) {
                *pool = p;
                *model = m;
                return true;
            }
    return false;
}

int
fleet_nproducts(const fleet *f)
{
    int n = 0;

    for (int p = 0; p < f->npools; p++)
        n += __builtin_popcount(f->pools[p].models);
    return n;
}

void
fleet_product(const fleet *f, int i, msg_product *o)
{
    int             p = 0, m = 0;
    const sim_pool *pl;

    memset(o, 0, sizeof(*o));
    if (!product_at(f, i, &p, &m))
        return;
    pl = &f->pools[p];
    snprintf(o->id, sizeof(o->id), "%s-%s", pl->id, model_slug[m]);
    snprintf(o->pool, sizeof(o->pool), "%s", pl->id);
    snprintf(o->gpu_model, sizeof(o->gpu_model), "%s", gpu_sim_model_name(m));
    /* Pinned capacity is cheaper: no latency promise across the network. */
    o->price_micros_per_gpu_hour = model_price[m] * (pl->scope == MSG_POOL_SCOPE_SITE ? 90 : 100) / 100;
    snprintf(o->currency, sizeof(o->currency), "EUR");
    if (pl->scope == MSG_POOL_SCOPE_SITE)
        snprintf(o->site, sizeof(o->site), "%s", f->sites[pl->site].id);
    snprintf(o->description, sizeof(o->description), "%s in pool %s", gpu_sim_model_name(m),
             pl->id);
}
