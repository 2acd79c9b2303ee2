/* place.c -- see place.h for the rules. */
#include "place.h"

#include <math.h>
#include <string.h>

#include "gp/shard.h"

#define R_(x) MSG_PENDING_REASON_REASON_##x
#define PIN_UNKNOWN (-2)

/* The job, resolved once against the snapshot. */
typedef struct place_job {
    snap *s;
    const place_params *p;
    uint32_t g, n;
    bool any_model;
    int32_t model[MSG_JOB_SPEC_GPU_MODELS_MAXITEMS]; uint32_t nmodel;
    uint32_t min_vram;
    bool pool_named;
    int32_t pool[PLACE_MAX_POOLS]; uint32_t npool;
    int32_t pool_site[PLACE_MAX_POOLS]; /* a site pool's site, resolved once */
    int32_t product;                    /* the job's product, or SNAP_NONE */
    int32_t pin_site;                   /* product's site; SNAP_NONE: none */
    int32_t prod[PLACE_MAX_PRODUCTS]; uint32_t nprod;
    uint32_t prod_pool[PLACE_MAX_PRODUCTS];   /* position in pool[] */
    bool has_origin; double olat, olon;
    uint32_t bound;                     /* 0: none */
    bool has_max; int64_t max_price; char currency[4];
} place_job;

/* One node under the job. */
typedef struct node_view {
    uint64_t fit;       /* GPUs in pool, model, VRAM */
    uint64_t avail;     /* of those, usable now */
    bool priced; int64_t price; const char *currency; const char *product;
    double lat_ms;
    place_score score;
} node_view;

static uint32_t pop(uint64_t m) { return (uint32_t)__builtin_popcountll(m); }

static int32_t clamp1000(int64_t v) { return v < 0 ? 0 : v > 1000 ? 1000 : (int32_t)v; }

void place_params_default(place_params *p)
{
    memset(p, 0, sizeof *p);
    p->k_min = 50;
    p->pct = 5;
    p->k_max = 300;
    p->max_choices = 8;
}

/* ---- the models: distance, latency, power, rights --------------------------- */

double place_distance_km(double lat1, double lon1, double lat2, double lon2)
{
    const double rad = M_PI / 180.0;
    double dlat = (lat2 - lat1) * rad, dlon = (lon2 - lon1) * rad;
    double a = sin(dlat / 2) * sin(dlat / 2) +
               cos(lat1 * rad) * cos(lat2 * rad) * sin(dlon / 2) * sin(dlon / 2);
    return 2.0 * 6371.0 * asin(sqrt(a < 1.0 ? a : 1.0));
}

static double tier_ms(int32_t tier)
{
    static const double pen[4] = {0, 5, 15, 40};
    return tier <= 0 ? 0 : tier >= 3 ? pen[3] : pen[tier];
}

double place_latency_ms(const snap_site *st, double lat, double lon)
{
    return place_distance_km(lat, lon, st->lat, st->lon) / 100.0 + st->rtt_ms +
           tier_ms(st->latency_tier);
}

int64_t place_power_now(const snap_site *st, uint64_t now_wall_ms)
{
    if (!st->nprice) return -1;
    int64_t min = (int64_t)((now_wall_ms / 60000u) % 1440u) + st->timezone_min;
    min = ((min % 1440) + 1440) % 1440;
    /* the last step at or before the minute; before the first: yesterday's last */
    uint32_t k = st->nprice - 1;
    for (uint32_t i = 0; i < st->nprice && st->price[i].start_min <= min; i++) k = i;
    return st->price[k].micros_per_kwh * st->pue_milli / 1000;
}

bool place_may_use(const snap *s, const char *tenant, const snap_pool *pool)
{
    const char *id = tenant;
    for (int d = 0; d < PLACE_MAX_DEPTH && id && id[0]; d++) {
        if (!strcmp(pool->tenant, id)) return true;
        int32_t t = snap_tenant_find(s, id);
        id = t == SNAP_NONE ? NULL : s->tenant[t].parent;
    }
    return false;
}

/* ---- resolving the job ------------------------------------------------------- */

/* Is the site in the job's k-th pool? (site pools compare resolved indexes,
 * so no string compare per node) */
static bool pool_has_site(const place_job *j, uint32_t k, int32_t si)
{
    const snap_pool *p = &j->s->pool[j->pool[k]];
    switch (p->scope) {
    case MSG_POOL_SCOPE_GLOBAL: return true;
    case MSG_POOL_SCOPE_REGION: return p->region != SNAP_NONE && p->region == j->s->site[si].region;
    default:                    return j->pool_site[k] != SNAP_NONE && j->pool_site[k] == si;
    }
}

static void job_pool_sites(place_job *j)
{
    for (uint32_t k = 0; k < j->npool; k++) {
        const snap_pool *p = &j->s->pool[j->pool[k]];
        j->pool_site[k] = p->scope == MSG_POOL_SCOPE_SITE ? snap_site_find(j->s, p->site) : SNAP_NONE;
    }
}

static bool pool_has_model(const snap_pool *p, int32_t model)
{
    if (!p->nmodel) return true;
    for (uint32_t k = 0; k < p->nmodel; k++)
        if (p->model[k] == model) return true;
    return false;
}

static void job_products(place_job *j)
{
    snap *s = j->s;
    for (uint32_t i = 0; i < s->nproduct && j->nprod < PLACE_MAX_PRODUCTS; i++) {
        if (!s->product[i].used) continue;
        int32_t pi = snap_pool_find(s, s->product[i].pool);
        for (uint32_t k = 0; pi != SNAP_NONE && k < j->npool; k++) {
            if (j->pool[k] != pi) continue;
            j->prod[j->nprod] = (int32_t)i;
            j->prod_pool[j->nprod++] = k;
            break;
        }
    }
}

static void job_all_pools(place_job *j, const char *tenant)
{
    snap *s = j->s;
    for (uint32_t i = 0; i < s->npool && j->npool < PLACE_MAX_POOLS; i++)
        if (s->pool[i].used && place_may_use(s, tenant, &s->pool[i]))
            j->pool[j->npool++] = (int32_t)i;
}

static void job_models(place_job *j, const msg_job_spec *spec)
{
    const char (*names)[32] = spec->gpu_models.v;
    j->any_model = spec->gpu_models.n == 0;
    for (uint32_t k = 0; k < spec->gpu_models.n && j->nmodel < MSG_JOB_SPEC_GPU_MODELS_MAXITEMS; k++) {
        int32_t id = snap_model_find(j->s, names[k]);
        if (id != SNAP_NONE) j->model[j->nmodel++] = id;
    }
    j->min_vram = spec->min_vram_mb;
}

/* Product: its pool, model/VRAM class, price, pinned site. -1 or a reason. */
static int job_product(place_job *j, const char *tenant, const msg_job_spec *spec)
{
    snap *s = j->s;
    j->product = snap_product_find(s, spec->product);
    if (j->product == SNAP_NONE) return R_(PRODUCT);
    const snap_product *pr = &s->product[j->product];
    int32_t pi = snap_pool_find(s, pr->pool);
    if (pi == SNAP_NONE) return R_(POOL);
    if (!place_may_use(s, tenant, &s->pool[pi])) return R_(NO_RIGHTS);
    j->pool_named = true;
    j->pool[j->npool++] = pi;
    j->any_model = pr->model == SNAP_NONE;
    if (pr->model != SNAP_NONE) j->model[j->nmodel++] = pr->model;
    j->min_vram = pr->min_vram_mb;
    if (pr->site[0]) {
        j->pin_site = snap_site_find(s, pr->site);
        if (j->pin_site == SNAP_NONE) j->pin_site = PIN_UNKNOWN;
    }
    return -1;
}

/* Fills j from the spec; -1, or the job-level reason (no_rights is 0). */
static int job_resolve(place_job *j, snap *s, const char *tenant,
                       const msg_job_spec *spec, const place_params *p)
{
    memset(j, 0, sizeof *j);
    j->s = s;
    j->p = p;
    j->product = SNAP_NONE;
    j->pin_site = SNAP_NONE;
    j->g = spec->gpus_per_node > 0 ? (uint32_t)spec->gpus_per_node : 1;
    j->n = GP_HAS(spec, MSG_JOB_SPEC__NODES) && spec->nodes > 0 ? (uint32_t)spec->nodes : 1;
    if (j->n > PLACE_MAX_NODES) j->n = PLACE_MAX_NODES;
    if (snap_tenant_find(s, tenant) == SNAP_NONE) return R_(NO_RIGHTS);
    j->has_origin = GP_HAS(spec, MSG_JOB_SPEC__ORIGIN_LAT) && GP_HAS(spec, MSG_JOB_SPEC__ORIGIN_LON);
    j->olat = spec->origin_lat;
    j->olon = spec->origin_lon;
    j->bound = GP_HAS(spec, MSG_JOB_SPEC__MAX_LATENCY_MS) ? spec->max_latency_ms : 0;
    if (j->bound && !j->has_origin) return R_(ORIGIN);
    j->has_max = GP_HAS(spec, MSG_JOB_SPEC__MAX_PRICE_MICROS_PER_GPU_HOUR);
    j->max_price = spec->max_price_micros_per_gpu_hour;
    memcpy(j->currency, spec->currency, sizeof j->currency);
    j->currency[3] = 0;
    if (spec->product[0]) {
        int why = job_product(j, tenant, spec);
        if (why >= 0) return why;
    } else {
        job_models(j, spec);
        if (spec->pool[0]) {
            int32_t pi = snap_pool_find(s, spec->pool);
            if (pi == SNAP_NONE) return R_(POOL);
            if (!place_may_use(s, tenant, &s->pool[pi])) return R_(NO_RIGHTS);
            j->pool_named = true;
            j->pool[j->npool++] = pi;
        } else {
            job_all_pools(j, tenant);
        }
    }
    job_pool_sites(j);
    job_products(j);
    return -1;
}

/* ---- one node ------------------------------------------------------------------ */

/* GPUs of the node held by pools the job may use. */
static uint64_t pool_gpus(const place_job *j, const snap_node *n)
{
    const snap *s = j->s;
    uint64_t m = 0;
    for (uint32_t k = 0; k < j->npool && m != n->all_mask; k++) {
        const snap_pool *p = &s->pool[j->pool[k]];
        if (!pool_has_site(j, k, n->site)) continue;
        for (uint32_t i = 0; i < n->ngpu; i++)
            if (pool_has_model(p, n->gpu[i].model)) m |= 1ull << n->gpu[i].index;
    }
    return m;
}

static bool model_ok(const place_job *j, int32_t model)
{
    if (j->any_model) return true;
    for (uint32_t k = 0; k < j->nmodel; k++)
        if (j->model[k] == model) return true;
    return false;
}

/* model / vram / gpus: narrows in to the fitting GPUs. */
static int gpu_filters(const place_job *j, const snap_node *n, uint64_t in_pool,
                       uint64_t *fit)
{
    uint64_t by_model = 0, by_vram = 0;
    for (uint32_t i = 0; i < n->ngpu; i++) {
        const snap_gpu *g = &n->gpu[i];
        uint64_t bit = 1ull << g->index;
        if (!(in_pool & bit) || !model_ok(j, g->model)) continue;
        by_model |= bit;
        if (g->vram_mb >= j->min_vram) by_vram |= bit;
    }
    if (!by_model) return R_(MODEL);
    if (!by_vram) return R_(VRAM);
    if (pop(by_vram) < j->g) return R_(GPUS);
    *fit = by_vram;
    return -1;
}

static bool product_fits(const snap_product *pr, const snap_node *n, uint64_t fit, uint32_t g)
{
    uint32_t c = 0;
    for (uint32_t i = 0; i < n->ngpu; i++) {
        const snap_gpu *x = &n->gpu[i];
        if (!(fit & (1ull << x->index))) continue;
        if (pr->model != SNAP_NONE ? x->model == pr->model : x->vram_mb >= pr->min_vram_mb) c++;
    }
    return c >= g;
}

/* Cheapest usable product for the node (job currency preferred). */
static void node_price(const place_job *j, const snap_node *n, const snap_site *st,
                       node_view *v)
{
    const snap *s = j->s;
    v->priced = false;
    if (j->product != SNAP_NONE) {
        v->priced = true;
        v->price = s->product[j->product].price;
        v->currency = s->product[j->product].currency;
        v->product = s->product[j->product].id;
        return;
    }
    bool best_in_cur = false;
    for (uint32_t k = 0; k < j->nprod; k++) {
        const snap_product *pr = &s->product[j->prod[k]];
        if (pr->site[0] && strcmp(pr->site, st->id)) continue;
        if (!pool_has_site(j, j->prod_pool[k], n->site)) continue;
        if (!product_fits(pr, n, v->fit, j->g)) continue;
        bool in_cur = j->currency[0] && !strcmp(pr->currency, j->currency);
        if (v->priced && (best_in_cur > in_cur || (best_in_cur == in_cur && pr->price >= v->price)))
            continue;
        v->priced = true;
        v->price = pr->price;
        v->currency = pr->currency;
        v->product = pr->id;
        best_in_cur = in_cur;
    }
}

/* GPUs held by bookings that a job of priority evict_below may evict. */
static uint64_t evictable(const snap *s, const snap_node *n, int32_t below)
{
    uint64_t m = 0;
    for (int32_t h = n->holds; below > 0 && h != SNAP_NONE; h = s->hold[h].next) {
        const snap_hold *x = &s->hold[h];
        if (x->interruptible && !x->evicting && x->priority < below) m |= x->mask;
    }
    return m;
}

static int price_filters(const place_job *j, const node_view *v)
{
    if (!j->has_max) return -1;
    if (!v->priced) return R_(PRICE);
    if (j->currency[0] && strcmp(v->currency, j->currency)) return R_(CURRENCY);
    if (v->price > j->max_price) return R_(PRICE);
    return -1;
}

/* Every filter in order. -1: the node passes (v filled), else the reason. */
static int node_eval(const place_job *j, int32_t ni, node_view *v)
{
    const snap *s = j->s;
    const snap_node *n = &s->node[ni];
    const snap_site *st = &s->site[n->site];
    /* a site newer than the pools and products loaded: placed once they
     * are (within a second), not unpriced before */
    if (st->waiting) return R_(UNHEALTHY);
    uint64_t in_pool = pool_gpus(j, n);
    if (!in_pool) return j->pool_named ? R_(POOL) : R_(NO_RIGHTS);
    if (j->pin_site != SNAP_NONE && j->pin_site != n->site) return R_(PRODUCT);
    int why = gpu_filters(j, n, in_pool, &v->fit);
    if (why >= 0) return why;
    if (n->state != SNAP_HEALTHY && n->state != SNAP_DRAINING && n->state != SNAP_CORDONED)
        return R_(UNHEALTHY);
    if (n->state == SNAP_DRAINING || n->state == SNAP_CORDONED || n->cordoned)
        return R_(DRAINING);
    node_price(j, n, st, v);
    if ((why = price_filters(j, v)) >= 0) return why;
    v->lat_ms = j->has_origin ? place_latency_ms(st, j->olat, j->olon) : 0;
    if (j->bound && v->lat_ms > j->bound) return R_(LATENCY);
    /* A node claimed for the held job is still its preemptor's where the
     * victims handed it GPUs: the victim, requeued and held in the same
     * pass, must not take back what its preemption freed (multinode_test:
     * the preemptor waited a whole preemption cycle when the hold came
     * first). */
    uint64_t heir = snap_held_for(s, n, j->p->heir);
    if (n->claimed && !j->p->claimant && !j->p->ignore_free && !heir) return R_(RESERVED);
    uint64_t usable = j->p->ignore_free ? n->all_mask
                                        : n->free_mask | evictable(s, n, j->p->evict_below) | heir;
    v->avail = v->fit & usable;
    if (pop(v->avail) < j->g) return R_(RESERVED);
    return -1;
}

/* ---- scores ------------------------------------------------------------------ */

static void node_score(const place_job *j, const snap_node *n, node_view *v)
{
    const snap *s = j->s;
    const place_params *p = j->p;
    place_score *sc = &v->score;
    sc->latency = j->has_origin ? clamp1000(1000 - (int64_t)(v->lat_ms * 10.0)) : 0;
    if (v->priced) {
        sc->price = clamp1000(1000 - v->price / 10000);
    } else {
        int64_t pw = place_power_now(&s->site[n->site], p->now_wall_ms);
        sc->price = pw < 0 ? 500 : clamp1000(1000 - pw / 1000);
    }
    uint32_t fr = pop(n->free_mask & n->all_mask);
    if (fr < j->g) fr = j->g;    /* evicting or ignoring: counts as full */
    sc->packing = (int32_t)(1000u * j->g / fr);
    uint32_t f = snap_node_failures_milli(s, n, p->now_mono_ms);
    sc->reliability = clamp1000(1000 - (int64_t)f / 4);
    sc->thermal = n->temp_c == INT32_MIN ? 500 : clamp1000(1000 - 20 * ((int64_t)n->temp_c - 40));
    sc->latency *= PLACE_W_LATENCY;
    sc->price *= PLACE_W_PRICE;
    sc->packing *= PLACE_W_PACKING;
    sc->reliability *= PLACE_W_RELIAB;
    sc->thermal *= PLACE_W_THERMAL;
    sc->total = sc->latency + sc->price + sc->packing + sc->reliability + sc->thermal;
}

/* The lowest-index g GPUs, free ones first (evicting as few as possible). */
static uint64_t pick_gpus(const snap_node *n, uint64_t avail, uint32_t g)
{
    uint64_t out = 0, order[2] = {avail & n->free_mask, avail & ~n->free_mask};
    for (int k = 0; k < 2; k++)
        for (uint64_t m = order[k]; m && pop(out) < g; m &= m - 1) out |= m & -m;
    return out;
}

/* ---- ranked choices ---------------------------------------------------------- */

static bool better(const place_choice *a, const place_choice *b)
{
    if (a->rank != b->rank) return a->rank < b->rank;
    if (a->score.total != b->score.total) return a->score.total > b->score.total;
    if (a->left != b->left) return a->left < b->left;
    return a->tie < b->tie;
}

/* FNV-1a of the id, mixed with the seed by murmur3's finalizer. */
static uint32_t tie_of(const char *id, uint32_t seed)
{
    uint32_t h = gp_fnv1a(id) ^ seed;

    h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
    return h;
}

static bool avoided(const place_params *p, const place_choice *c)
{
    for (uint32_t i = 0; i < c->nnodes; i++)
        for (uint32_t k = 0; k < p->navoid; k++)
            if (strcmp(c->node[i], p->avoid[k]) == 0) return true;
    return false;
}

static void keep_choice(const snap *s, const place_params *p, place_result *r, uint32_t max,
                        place_choice *c)
{
    if (p->rank && (c->rank = p->rank(p->rank_arg, s, c)) == UINT64_MAX) return;
    if (p->navoid > 0 && avoided(p, c)) c->rank |= UINT64_C(1) << 63;
    c->tie = tie_of(c->node[0], p->seed);
    if (r->nchoices == max && !better(c, &r->choice[max - 1])) return;
    uint32_t i = r->nchoices < max ? r->nchoices++ : max - 1;
    while (i > 0 && better(c, &r->choice[i - 1])) {
        r->choice[i] = r->choice[i - 1];
        i--;
    }
    r->choice[i] = *c;
}

static void choice_node(place_choice *c, uint32_t k, const snap *s, int32_t ni,
                        const node_view *v, uint32_t g)
{
    const snap_node *n = &s->node[ni];
    memcpy(c->node[k], n->id, SNAP_ID_LEN);
    c->node_ix[k] = ni;
    c->gpus[k] = pick_gpus(n, v->avail, g);
    c->fit[k] = v->avail;
    uint32_t fr = pop(n->free_mask);
    c->left += fr > g ? fr - g : 0;
    if (!v->priced) c->priced = false;
    if (v->priced && (!k || v->price > c->price_micros)) {
        c->price_micros = v->price;
        memcpy(c->product, v->product, SNAP_ID_LEN);
    }
    if (v->priced && !k) memcpy(c->currency, v->currency, 4);
}

/* ---- the walk ---------------------------------------------------------------- */

typedef struct walk {
    place_job *j;
    place_result *r;
    uint32_t target, max;
    uint32_t gen;
} walk;

static void one_node(walk *w, int32_t ni)
{
    node_view v;
    w->r->considered++;
    int why = node_eval(w->j, ni, &v);
    if (why >= 0) { w->r->reasons[why]++; return; }
    w->r->feasible++;
    node_score(w->j, &w->j->s->node[ni], &v);
    place_choice c;
    memset(&c, 0, sizeof c);
    const snap_site *st = &w->j->s->site[w->j->s->node[ni].site];
    memcpy(c.site, st->id, SNAP_ID_LEN);
    c.site_ix = w->j->s->node[ni].site;
    c.nnodes = 1;
    c.priced = true;
    c.score = v.score;
    c.latency_ms = v.lat_ms;
    choice_node(&c, 0, w->j->s, ni, &v, w->j->g);
    keep_choice(w->j->s, w->j->p, w->r, w->max, &c);
}

typedef struct site_best { int32_t ni[PLACE_MAX_NODES]; node_view v[PLACE_MAX_NODES]; uint32_t n; } site_best;

static void best_insert(site_best *b, uint32_t want, int32_t ni, const node_view *v)
{
    if (b->n == want && v->score.total <= b->v[want - 1].score.total) return;
    uint32_t i = b->n < want ? b->n++ : want - 1;
    for (; i > 0 && v->score.total > b->v[i - 1].score.total; i--) {
        b->ni[i] = b->ni[i - 1];
        b->v[i] = b->v[i - 1];
    }
    b->ni[i] = ni;
    b->v[i] = *v;
}

static void site_choice(walk *w, int32_t si, const site_best *b)
{
    const snap *s = w->j->s;
    place_choice c;
    memset(&c, 0, sizeof c);
    memcpy(c.site, s->site[si].id, SNAP_ID_LEN);
    c.site_ix = si;
    c.nnodes = b->n;
    c.priced = true;
    c.latency_ms = b->v[0].lat_ms;
    for (uint32_t k = 0; k < b->n; k++) {
        const place_score *x = &b->v[k].score;
        c.score.latency += x->latency; c.score.price += x->price;
        c.score.packing += x->packing; c.score.reliability += x->reliability;
        c.score.thermal += x->thermal;
        choice_node(&c, k, s, b->ni[k], &b->v[k], w->j->g);
    }
    place_score *m = &c.score;
    int32_t n = (int32_t)b->n;
    m->latency /= n; m->price /= n; m->packing /= n; m->reliability /= n; m->thermal /= n;
    m->total = m->latency + m->price + m->packing + m->reliability + m->thermal;
    keep_choice(w->j->s, w->j->p, w->r, w->max, &c);
}

/* Multi-node: the node's whole site, once per walk. */
static void one_site(walk *w, int32_t ni)
{
    snap *s = w->j->s;
    int32_t si = s->node[ni].site;
    if (s->site[si].visit_gen == w->gen) return;
    s->site[si].visit_gen = w->gen;
    site_best b;
    b.n = 0;
    uint32_t pass = 0;
    for (int32_t k = s->site[si].nodes.head; k != SNAP_NONE; k = s->node[k].link[SNAP_IX_SITE].next) {
        node_view v;
        w->r->considered++;
        int why = node_eval(w->j, k, &v);
        if (why >= 0) { w->r->reasons[why]++; continue; }
        pass++;
        node_score(w->j, &s->node[k], &v);
        best_insert(&b, w->j->n, k, &v);
    }
    if (pass < w->j->n) { w->r->reasons[R_(SITE_NODES)]++; return; }
    w->r->feasible++;
    site_choice(w, si, &b);
}

/* Visits one node; true: enough feasible found, stop. */
static bool visit(walk *w, int32_t ni)
{
    if (w->j->n > 1) one_site(w, ni);
    else one_node(w, ni);
    return w->r->feasible >= w->target;
}

static bool walk_list(walk *w, const snap_list *l, int ix)
{
    const snap *s = w->j->s;
    for (int32_t i = l->head, nx; i != SNAP_NONE; i = nx) {
        nx = s->node[i].link[ix].next;
        if (visit(w, i)) return true;
    }
    return false;
}

/* ---- choosing the index -------------------------------------------------------- */

typedef struct geo_box { int la0, la1, lo0, lo1; bool all_lon; } geo_box;

static geo_box geo_bounds(const place_job *j)
{
    geo_box b;
    double dkm = (double)j->bound * 100.0, dlat = dkm / 111.19;
    double lat0 = j->olat - dlat, lat1 = j->olat + dlat;
    b.la0 = (int)floor((lat0 < -90 ? -90 : lat0) + 90.0);
    b.la1 = (int)floor((lat1 > 90 ? 90 : lat1) + 90.0);
    if (b.la1 >= SNAP_GEO_LAT) b.la1 = SNAP_GEO_LAT - 1;
    double maxlat = fmax(fabs(lat0), fabs(lat1));
    b.all_lon = maxlat >= 89.0;
    double dlon = b.all_lon ? 360.0 : dlat / cos(maxlat * M_PI / 180.0);
    if (dlon >= 180.0) b.all_lon = true;
    b.lo0 = (int)floor(j->olon - dlon + 180.0);
    b.lo1 = (int)floor(j->olon + dlon + 180.0);
    if (b.lo1 - b.lo0 >= SNAP_GEO_LON - 1) b.all_lon = true;   /* never a cell twice */
    if (b.all_lon) { b.lo0 = 0; b.lo1 = SNAP_GEO_LON - 1; }
    return b;
}

/* lon index wraps around the antimeridian. */
static int32_t box_cell(int la, int lo)
{
    lo = ((lo % SNAP_GEO_LON) + SNAP_GEO_LON) % SNAP_GEO_LON;
    return la * SNAP_GEO_LON + lo;
}

static uint32_t geo_size(const snap *s, const geo_box *b)
{
    uint32_t n = 0;
    for (int la = b->la0; la <= b->la1; la++)
        for (int lo = b->lo0; lo <= b->lo1; lo++) n += s->cell[box_cell(la, lo)].nodes;
    return n;
}

static bool walk_sites(walk *w, int32_t head, int which)
{
    const snap *s = w->j->s;
    for (int32_t si = head, nx; si != SNAP_NONE; si = nx) {
        nx = which ? s->site[si].glink.next : s->site[si].rlink.next;
        if (walk_list(w, &s->site[si].nodes, SNAP_IX_SITE)) return true;
    }
    return false;
}

static void walk_geo(walk *w, const geo_box *b)
{
    const snap *s = w->j->s;
    for (int la = b->la0; la <= b->la1; la++)
        for (int lo = b->lo0; lo <= b->lo1; lo++)
            if (walk_sites(w, s->cell[box_cell(la, lo)].sites.head, 1)) return;
}

typedef struct pick { int ix; uint32_t size; int32_t key; } pick;

static void consider(pick *best, int ix, uint32_t size, int32_t key)
{
    if (size < best->size) *best = (pick){ix, size, key};
}

static int32_t vram_class_of(uint32_t mb)
{
    int32_t c = 0;
    while (mb > 1 && c < SNAP_VRAM_CLASSES - 1) { mb >>= 1; c++; }
    return c;
}

static uint32_t model_size(const place_job *j)
{
    uint32_t n = j->s->by_model[SNAP_MODEL_MIXED].count;
    for (uint32_t k = 0; k < j->nmodel; k++) n += j->s->by_model[j->model[k]].count;
    return n;
}

static uint32_t range_size(const snap_list *l, int32_t from, int32_t to)
{
    uint32_t n = 0;
    for (int32_t i = from; i <= to; i++) n += l[i].count;
    return n;
}

/* The smallest index the job allows. */
static pick choose_index(const place_job *j, const geo_box *box)
{
    const snap *s = j->s;
    pick b = {PLACE_IX_ALL, s->nodes, 0};
    if (j->p->walk_all) return b;
    const snap_pool *p = j->pool_named ? &s->pool[j->pool[0]] : NULL;
    int32_t site = j->pin_site;
    if (site == SNAP_NONE && p && p->scope == MSG_POOL_SCOPE_SITE) {
        site = snap_site_find(s, p->site);
        if (site == SNAP_NONE) site = PIN_UNKNOWN;
    }
    if (site != SNAP_NONE)
        consider(&b, PLACE_IX_SITE, site == PIN_UNKNOWN ? 0 : s->site[site].nodes.count, site);
    if (p && p->scope == MSG_POOL_SCOPE_REGION)
        consider(&b, PLACE_IX_REGION, p->region == SNAP_NONE ? 0 : s->by_region[p->region].nodes,
                 p->region);
    if (j->bound) consider(&b, PLACE_IX_GEO, geo_size(s, box), 0);
    if (!j->any_model) consider(&b, PLACE_IX_MODEL, model_size(j), 0);
    int32_t vc = vram_class_of(j->min_vram);
    if (j->min_vram) consider(&b, PLACE_IX_VRAM, range_size(s->by_vram, vc, SNAP_VRAM_CLASSES - 1), vc);
    if (!j->p->ignore_free && !j->p->evict_below && !j->p->heir_walk && j->g <= SNAP_NODE_GPUS)
        consider(&b, PLACE_IX_FREE, range_size(s->by_free, (int32_t)j->g, SNAP_NODE_GPUS),
                 (int32_t)j->g);
    return b;
}

static void walk_index(walk *w, const pick *b, const geo_box *box)
{
    const snap *s = w->j->s;
    int32_t lo = 0;
    switch (b->ix) {
    case PLACE_IX_SITE:
        if (b->key >= 0) walk_list(w, &s->site[b->key].nodes, SNAP_IX_SITE);
        return;
    case PLACE_IX_REGION:
        if (b->key >= 0) walk_sites(w, s->by_region[b->key].sites.head, 0);
        return;
    case PLACE_IX_GEO:
        walk_geo(w, box);
        return;
    case PLACE_IX_MODEL:
        if (walk_list(w, &s->by_model[SNAP_MODEL_MIXED], SNAP_IX_MODEL)) return;
        for (uint32_t k = 0; k < w->j->nmodel; k++)
            if (walk_list(w, &s->by_model[w->j->model[k]], SNAP_IX_MODEL)) return;
        return;
    case PLACE_IX_VRAM:
        for (int32_t c = b->key; c < SNAP_VRAM_CLASSES; c++)
            if (walk_list(w, &s->by_vram[c], SNAP_IX_VRAM)) return;
        return;
    default:
        /* the free buckets from gpus_per_node (ALL: from 0), fewest free
         * GPUs that still fit first: best fit meets its nodes early */
        lo = b->ix == PLACE_IX_FREE ? b->key : 0;
        for (int32_t c = lo; c <= SNAP_NODE_GPUS; c++)
            if (walk_list(w, &s->by_free[c], SNAP_IX_FREE)) return;
    }
}

/* ---- entry -------------------------------------------------------------------- */

static uint32_t next_gen(snap *s)
{
    if (++s->visit_gen == 0) {       /* wrapped: clear every stamp once */
        for (uint32_t i = 0; i < s->nsite; i++) s->site[i].visit_gen = 0;
        s->visit_gen = 1;
    }
    return s->visit_gen;
}

int place(snap *s, const char *tenant, const msg_job_spec *spec,
          const place_params *p, place_result *r)
{
    place_job j;
    memset(r, 0, sizeof *r);
    int why = job_resolve(&j, s, tenant, spec, p);
    if (why >= 0) {
        r->status = PLACE_INVALID;
        r->job_reason = why;
        return r->status;
    }
    geo_box box = {0, 0, 0, 0, false};
    if (j.bound) box = geo_bounds(&j);
    pick b = choose_index(&j, &box);
    r->index = b.ix;
    r->index_size = b.size;
    r->index_skipped = s->nodes - b.size;
    walk w = {&j, r, 0, p->max_choices, next_gen(s)};
    if (!w.max || w.max > PLACE_MAX_CHOICES) w.max = PLACE_MAX_CHOICES;
    uint64_t pct = (uint64_t)b.size * p->pct / 100;
    if (p->k_max && pct > p->k_max) pct = p->k_max;
    w.target = pct > p->k_min ? (uint32_t)pct : p->k_min;
    if (!w.target) w.target = 1;
    if (p->walk_all) w.target = UINT32_MAX;
    walk_index(&w, &b, &box);
    r->status = r->nchoices ? PLACE_OK : PLACE_NONE;
    return r->status;
}
