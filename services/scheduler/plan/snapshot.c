/* snapshot.c -- see snapshot.h. */
#include "snapshot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gp/shard.h"

/* ---- id -> slot map ------------------------------------------------------ */

static uint32_t hash_id(const char *k)
{
    return gp_fnv1a(k);
}

static void copy_id(char *dst, const char *src, size_t n)
{
    size_t l = strnlen(src, n - 1);
    memcpy(dst, src, l);
    dst[l] = 0;
}

static int map_grow(snap_map *m)
{
    uint32_t nb = m->nbucket ? m->nbucket * 2 : 64;
    int32_t *b = malloc(nb * sizeof *b);
    if (!b) return -1;
    for (uint32_t i = 0; i < nb; i++) b[i] = SNAP_NONE;
    for (uint32_t i = 0; i < m->nent; i++) {
        snap_map_ent *e = &m->ent[i];
        if (e->val == SNAP_NONE) continue;   /* on the free list */
        uint32_t h = hash_id(e->key) & (nb - 1);
        e->next = b[h];
        b[h] = (int32_t)i;
    }
    free(m->bucket);
    m->bucket = b;
    m->nbucket = nb;
    return 0;
}

static int32_t map_get(const snap_map *m, const char *key)
{
    if (!m->nbucket) return SNAP_NONE;
    for (int32_t i = m->bucket[hash_id(key) & (m->nbucket - 1)]; i != SNAP_NONE;
         i = m->ent[i].next)
        if (!strcmp(m->ent[i].key, key)) return m->ent[i].val;
    return SNAP_NONE;
}

static int32_t map_new_ent(snap_map *m)
{
    if (m->free_ent != SNAP_NONE) {
        int32_t i = m->free_ent;
        m->free_ent = m->ent[i].next;
        return i;
    }
    if (m->nent == m->cap) {
        uint32_t nc = m->cap ? m->cap * 2 : 64;
        snap_map_ent *e = realloc(m->ent, nc * sizeof *e);
        if (!e) return SNAP_NONE;
        m->ent = e;
        m->cap = nc;
    }
    return (int32_t)m->nent++;
}

/* key must not be present. */
static int map_put(snap_map *m, const char *key, int32_t val)
{
    if (m->count + 1 > m->nbucket && map_grow(m) < 0) return -1;
    int32_t i = map_new_ent(m);
    if (i == SNAP_NONE) return -1;
    uint32_t h = hash_id(key) & (m->nbucket - 1);
    copy_id(m->ent[i].key, key, SNAP_ID_LEN);
    m->ent[i].val = val;
    m->ent[i].next = m->bucket[h];
    m->bucket[h] = i;
    m->count++;
    return 0;
}

static void map_del(snap_map *m, const char *key)
{
    if (!m->nbucket) return;
    int32_t *p = &m->bucket[hash_id(key) & (m->nbucket - 1)];
    for (; *p != SNAP_NONE; p = &m->ent[*p].next) {
        int32_t i = *p;
        if (strcmp(m->ent[i].key, key)) continue;
        *p = m->ent[i].next;
        m->ent[i].val = SNAP_NONE;
        m->ent[i].next = m->free_ent;
        m->free_ent = i;
        m->count--;
        return;
    }
}

static void map_free(snap_map *m)
{
    free(m->bucket);
    free(m->ent);
    memset(m, 0, sizeof *m);
}

void snap_map_init(snap_map *m)
{
    memset(m, 0, sizeof *m);
    m->free_ent = SNAP_NONE;
}
int32_t snap_map_get(const snap_map *m, const char *key) { return map_get(m, key); }
int snap_map_put(snap_map *m, const char *key, int32_t val) { return map_put(m, key, val); }
void snap_map_del(snap_map *m, const char *key) { map_del(m, key); }
void snap_map_free(snap_map *m) { map_free(m); }

/* ---- slot arrays ---------------------------------------------------------- */

/* One growable array with a free list threaded through `used == false`
 * slots; the free-list link is kept in a side int (first int32 field would
 * alias the id), so each type passes where its "next free" lives. */
static int grow(void **arr, uint32_t *cap, size_t elem)
{
    uint32_t nc = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, nc * elem);
    if (!p) return -1;
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return 0;
}

#define SLOT_NEW(s, name, out) do {                                           \
        if ((s)->name##_free != SNAP_NONE) {                                  \
            (out) = (s)->name##_free;                                         \
            memcpy(&(s)->name##_free, &(s)->name[(out)], sizeof(int32_t));    \
        } else {                                                              \
            if ((s)->n##name == (s)->name##_cap &&                            \
                grow((void **)&(s)->name, &(s)->name##_cap,                   \
                     sizeof *(s)->name) < 0) { (out) = SNAP_NONE; break; }    \
            (out) = (int32_t)(s)->n##name++;                                  \
        }                                                                     \
        memset(&(s)->name[(out)], 0, sizeof *(s)->name);                      \
    } while (0)

/* A freed slot keeps its next-free index in its first 4 bytes (the id text,
 * no longer needed) and used = false. */
#define SLOT_FREE(s, name, i) do {                                            \
        memset(&(s)->name[(i)], 0, sizeof *(s)->name);                        \
        memcpy(&(s)->name[(i)], &(s)->name##_free, sizeof(int32_t));          \
        (s)->name##_free = (i);                                               \
    } while (0)

/* ---- names (GPU models, regions) ------------------------------------------ */

static int32_t name_intern(snap *s, snap_map *ix, char (**names)[SNAP_ID_LEN],
                           uint32_t *n, const char *name)
{
    int32_t id = map_get(ix, name);
    if (id != SNAP_NONE || *n >= SNAP_MAX_NAMES) return id;
    char (*p)[SNAP_ID_LEN] = realloc(*names, (*n + 1) * sizeof *p);
    if (!p) return SNAP_NONE;
    *names = p;
    copy_id(p[*n], name, SNAP_ID_LEN);
    if (map_put(ix, name, (int32_t)*n) < 0) return SNAP_NONE;
    (void)s;
    return (int32_t)(*n)++;
}

static int32_t model_intern(snap *s, const char *name)
{
    int32_t id = map_get(&s->model_ix, name);
    if (id != SNAP_NONE || s->nmodel >= SNAP_MAX_NAMES) return id;
    char (*p)[32] = realloc(s->model_name, (s->nmodel + 1) * sizeof *p);
    snap_list *l = realloc(s->by_model, (s->nmodel + 1) * sizeof *l);
    if (p) s->model_name = p;
    if (l) s->by_model = l;
    if (!p || !l) return SNAP_NONE;
    copy_id(p[s->nmodel], name, 32);
    l[s->nmodel] = (snap_list){SNAP_NONE, 0};
    if (map_put(&s->model_ix, name, (int32_t)s->nmodel) < 0) return SNAP_NONE;
    return (int32_t)s->nmodel++;
}

static int32_t region_intern(snap *s, const char *name)
{
    if (!name[0]) return SNAP_NONE;
    uint32_t before = s->nregion;
    int32_t id = name_intern(s, &s->region_ix, &s->region_name, &s->nregion, name);
    if (id == SNAP_NONE || s->nregion == before) return id;
    snap_region *r = realloc(s->by_region, s->nregion * sizeof *r);
    if (!r) return SNAP_NONE;
    s->by_region = r;
    r[id] = (snap_region){{SNAP_NONE, 0}, 0};
    return id;
}

/* ---- intrusive lists -------------------------------------------------------- */

static snap_list *node_list(snap *s, int ix, int32_t key)
{
    switch (ix) {
    case SNAP_IX_SITE:  return &s->site[key].nodes;
    case SNAP_IX_MODEL: return &s->by_model[key];
    case SNAP_IX_VRAM:  return &s->by_vram[key];
    default:            return &s->by_free[key];
    }
}

static void node_link(snap *s, int32_t ni, int ix, int32_t key)
{
    snap_node *n = &s->node[ni];
    snap_list *l = node_list(s, ix, key);
    n->key[ix] = key;
    n->link[ix] = (snap_link){SNAP_NONE, l->head};
    if (l->head != SNAP_NONE) s->node[l->head].link[ix].prev = ni;
    l->head = ni;
    l->count++;
}

static void node_unlink(snap *s, int32_t ni, int ix)
{
    snap_node *n = &s->node[ni];
    snap_list *l = node_list(s, ix, n->key[ix]);
    if (n->link[ix].prev != SNAP_NONE) s->node[n->link[ix].prev].link[ix].next = n->link[ix].next;
    else l->head = n->link[ix].next;
    if (n->link[ix].next != SNAP_NONE) s->node[n->link[ix].next].link[ix].prev = n->link[ix].prev;
    l->count--;
    n->link[ix] = (snap_link){SNAP_NONE, SNAP_NONE};
}

static void node_relink(snap *s, int32_t ni, int ix, int32_t key)
{
    if (s->node[ni].key[ix] == key) return;
    node_unlink(s, ni, ix);
    node_link(s, ni, ix, key);
}

/* Sites in a region list (which 0) or a cell list (which 1). */
static snap_link *site_link_of(snap_site *st, int which)
{
    return which ? &st->glink : &st->rlink;
}

static snap_list *site_list(snap *s, int which, int32_t key)
{
    return which ? &s->cell[key].sites : &s->by_region[key].sites;
}

static void site_link(snap *s, int32_t si, int which, int32_t key)
{
    if (key == SNAP_NONE) return;
    snap_list *l = site_list(s, which, key);
    *site_link_of(&s->site[si], which) = (snap_link){SNAP_NONE, l->head};
    if (l->head != SNAP_NONE) site_link_of(&s->site[l->head], which)->prev = si;
    l->head = si;
    l->count++;
}

static void site_unlink(snap *s, int32_t si, int which, int32_t key)
{
    if (key == SNAP_NONE) return;
    snap_list *l = site_list(s, which, key);
    snap_link *k = site_link_of(&s->site[si], which);
    if (k->prev != SNAP_NONE) site_link_of(&s->site[k->prev], which)->next = k->next;
    else l->head = k->next;
    if (k->next != SNAP_NONE) site_link_of(&s->site[k->next], which)->prev = k->prev;
    l->count--;
    *k = (snap_link){SNAP_NONE, SNAP_NONE};
}

/* Node counts of a site's region and cell follow its node list. */
static void site_nodes_add(snap *s, int32_t si, int delta)
{
    snap_site *st = &s->site[si];
    if (st->region != SNAP_NONE) s->by_region[st->region].nodes += (uint32_t)delta;
    s->cell[st->cell].nodes += (uint32_t)delta;
}

/* ---- setup ---------------------------------------------------------------- */

int snap_init(snap *s, const snap_cfg *cfg)
{
    memset(s, 0, sizeof *s);
    s->cfg.fail_half_life_ms = cfg && cfg->fail_half_life_ms ? cfg->fail_half_life_ms
                                                           : 3600000u;
    s->tenant_free = s->site_free = s->pool_free = SNAP_NONE;
    s->product_free = s->node_free = s->hold_free = SNAP_NONE;
    snap_map *maps[] = {&s->tenant_ix, &s->site_ix, &s->pool_ix, &s->product_ix,
                        &s->node_ix, &s->model_ix, &s->region_ix};
    for (size_t i = 0; i < sizeof maps / sizeof *maps; i++) maps[i]->free_ent = SNAP_NONE;
    for (int i = 0; i < SNAP_VRAM_CLASSES; i++) s->by_vram[i] = (snap_list){SNAP_NONE, 0};
    for (int i = 0; i <= SNAP_NODE_GPUS; i++) s->by_free[i] = (snap_list){SNAP_NONE, 0};
    s->cell = malloc((size_t)SNAP_GEO_LAT * SNAP_GEO_LON * sizeof *s->cell);
    if (!s->cell) return -1;
    for (int i = 0; i < SNAP_GEO_LAT * SNAP_GEO_LON; i++)
        s->cell[i] = (snap_cell){{SNAP_NONE, 0}, 0};
    if (model_intern(s, "") != SNAP_MODEL_MIXED) return -1;
    return 0;
}

void snap_free(snap *s)
{
    snap_map *maps[] = {&s->tenant_ix, &s->site_ix, &s->pool_ix, &s->product_ix,
                        &s->node_ix, &s->model_ix, &s->region_ix};
    for (size_t i = 0; i < sizeof maps / sizeof *maps; i++) map_free(maps[i]);
    free(s->tenant); free(s->site); free(s->pool); free(s->product);
    free(s->node); free(s->hold); free(s->model_name); free(s->region_name);
    free(s->by_model); free(s->by_region); free(s->cell);
    memset(s, 0, sizeof *s);
}

/* ---- reads ---------------------------------------------------------------- */

int32_t snap_node_find(const snap *s, const char *id) { return map_get(&s->node_ix, id); }
int32_t snap_site_find(const snap *s, const char *id) { return map_get(&s->site_ix, id); }
int32_t snap_pool_find(const snap *s, const char *id) { return map_get(&s->pool_ix, id); }
int32_t snap_product_find(const snap *s, const char *id) { return map_get(&s->product_ix, id); }
int32_t snap_tenant_find(const snap *s, const char *id) { return map_get(&s->tenant_ix, id); }
int32_t snap_model_find(const snap *s, const char *name)
{
    return name[0] ? map_get(&s->model_ix, name) : SNAP_NONE;
}
int32_t snap_region_find(const snap *s, const char *name)
{
    return name[0] ? map_get(&s->region_ix, name) : SNAP_NONE;
}

int32_t snap_geo_cell(double lat, double lon)
{
    int la = (int)floor(lat + 90.0), lo = (int)floor(lon + 180.0);
    if (la < 0) la = 0;
    if (la >= SNAP_GEO_LAT) la = SNAP_GEO_LAT - 1;
    if (lo < 0) lo = 0;
    if (lo >= SNAP_GEO_LON) lo = SNAP_GEO_LON - 1;
    return la * SNAP_GEO_LON + lo;
}

uint32_t snap_node_failures_milli(const snap *s, const snap_node *n, uint64_t now_ms)
{
    if (!n->fail_milli) return 0;
    double dt = now_ms > n->fail_at_ms ? (double)(now_ms - n->fail_at_ms) : 0.0;
    return (uint32_t)((double)n->fail_milli * exp2(-dt / s->cfg.fail_half_life_ms));
}

/* ---- tenants, pools, products ------------------------------------------------ */

int snap_tenant_upsert(snap *s, const msg_tenant *t)
{
    int32_t i = map_get(&s->tenant_ix, t->id);
    if (i == SNAP_NONE) {
        SLOT_NEW(s, tenant, i);
        if (i == SNAP_NONE || map_put(&s->tenant_ix, t->id, i) < 0) return -1;
        s->tenant[i].used = true;
    }
    copy_id(s->tenant[i].id, t->id, SNAP_ID_LEN);
    copy_id(s->tenant[i].parent, t->parent, SNAP_ID_LEN);
    s->tenant[i].weight = t->fair_share_weight ? t->fair_share_weight : 1;
    return 0;
}

int snap_tenant_remove(snap *s, const char *id)
{
    int32_t i = map_get(&s->tenant_ix, id);
    if (i == SNAP_NONE) return -1;
    map_del(&s->tenant_ix, id);
    SLOT_FREE(s, tenant, i);
    return 0;
}

int snap_pool_upsert(snap *s, const msg_pool *m)
{
    int32_t i = map_get(&s->pool_ix, m->id);
    if (i == SNAP_NONE) {
        SLOT_NEW(s, pool, i);
        if (i == SNAP_NONE || map_put(&s->pool_ix, m->id, i) < 0) return -1;
    }
    snap_pool *p = &s->pool[i];
    memset(p, 0, sizeof *p);
    p->used = true;
    copy_id(p->id, m->id, SNAP_ID_LEN);
    copy_id(p->tenant, m->tenant, SNAP_ID_LEN);
    copy_id(p->site, m->site, SNAP_ID_LEN);
    p->scope = m->scope;
    p->region = region_intern(s, m->region);
    const char (*models)[32] = m->models.v;
    for (uint32_t k = 0; k < m->models.n && p->nmodel < SNAP_POOL_MODELS; k++) {
        int32_t id = model_intern(s, models[k]);
        if (id == SNAP_NONE) return -1;
        p->model[p->nmodel++] = id;
    }
    return 0;
}

int snap_pool_remove(snap *s, const char *id)
{
    int32_t i = map_get(&s->pool_ix, id);
    if (i == SNAP_NONE) return -1;
    map_del(&s->pool_ix, id);
    SLOT_FREE(s, pool, i);
    return 0;
}

int snap_product_upsert(snap *s, const msg_product *m)
{
    int32_t i = map_get(&s->product_ix, m->id);
    if (i == SNAP_NONE) {
        SLOT_NEW(s, product, i);
        if (i == SNAP_NONE || map_put(&s->product_ix, m->id, i) < 0) return -1;
    }
    snap_product *p = &s->product[i];
    memset(p, 0, sizeof *p);
    p->used = true;
    copy_id(p->id, m->id, SNAP_ID_LEN);
    copy_id(p->pool, m->pool, SNAP_ID_LEN);
    copy_id(p->site, m->site, SNAP_ID_LEN);
    copy_id(p->currency, m->currency, sizeof p->currency);
    p->model = m->gpu_model[0] ? model_intern(s, m->gpu_model) : SNAP_NONE;
    if (m->gpu_model[0] && p->model == SNAP_NONE) return -1;
    p->min_vram_mb = m->min_vram_mb;
    p->price = m->price_micros_per_gpu_hour;
    return 0;
}

int snap_product_remove(snap *s, const char *id)
{
    int32_t i = map_get(&s->product_ix, id);
    if (i == SNAP_NONE) return -1;
    map_del(&s->product_ix, id);
    SLOT_FREE(s, product, i);
    return 0;
}

/* ---- sites ---------------------------------------------------------------- */

static void site_prices(snap_site *st, const msg_site *m)
{
    const msg_power_price *pp = m->power_prices.v;
    st->nprice = 0;
    for (uint32_t k = 0; k < m->power_prices.n && st->nprice < SNAP_PRICES; k++) {
        /* insertion sort by start minute: at most 48 steps */
        uint32_t j = st->nprice++;
        while (j > 0 && st->price[j - 1].start_min > pp[k].start_min) {
            st->price[j] = st->price[j - 1];
            j--;
        }
        st->price[j] = (snap_price){pp[k].start_min, pp[k].price_micros_per_kwh};
    }
}

/* Moves the site (with its node count) to its new region and cell. */
static void site_place(snap *s, int32_t si, int32_t region, int32_t cell)
{
    snap_site *st = &s->site[si];
    uint32_t n = st->nodes.count;
    if (st->region != region) {
        site_unlink(s, si, 0, st->region);
        if (st->region != SNAP_NONE) s->by_region[st->region].nodes -= n;
        site_link(s, si, 0, region);
        if (region != SNAP_NONE) s->by_region[region].nodes += n;
        st->region = region;
    }
    if (st->cell != cell) {
        site_unlink(s, si, 1, st->cell);
        s->cell[st->cell].nodes -= n;
        site_link(s, si, 1, cell);
        s->cell[cell].nodes += n;
        st->cell = cell;
    }
}

int snap_site_upsert(snap *s, const msg_site *m)
{
    int32_t i = map_get(&s->site_ix, m->id);
    int32_t region = region_intern(s, m->region);
    if (m->region[0] && region == SNAP_NONE) return -1;
    if (i == SNAP_NONE) {
        SLOT_NEW(s, site, i);
        if (i == SNAP_NONE || map_put(&s->site_ix, m->id, i) < 0) return -1;
        snap_site *st = &s->site[i];
        st->used = true;
        st->waiting = 0;
        st->nodes = (snap_list){SNAP_NONE, 0};
        st->region = region;
        st->cell = snap_geo_cell(m->lat, m->lon);
        site_link(s, i, 0, region);
        site_link(s, i, 1, st->cell);
        s->sites++;
    } else {
        site_place(s, i, region, snap_geo_cell(m->lat, m->lon));
    }
    snap_site *st = &s->site[i];
    copy_id(st->id, m->id, SNAP_ID_LEN);
    copy_id(st->tenant, m->tenant, SNAP_ID_LEN);
    copy_id(st->currency, m->currency, sizeof st->currency);
    st->lat = m->lat;
    st->lon = m->lon;
    st->latency_tier = m->latency_tier;
    st->pue_milli = m->pue_milli ? m->pue_milli : 1000;
    st->timezone_min = m->timezone_min;
    if (GP_HAS(m, MSG_SITE__UPLINK_RTT_MS)) st->rtt_ms = m->uplink_rtt_ms;
    site_prices(st, m);
    return 0;
}

int snap_site_remove(snap *s, const char *id)
{
    int32_t i = map_get(&s->site_ix, id);
    if (i == SNAP_NONE || s->site[i].nodes.count) return -1;
    site_unlink(s, i, 0, s->site[i].region);
    site_unlink(s, i, 1, s->site[i].cell);
    map_del(&s->site_ix, id);
    SLOT_FREE(s, site, i);
    s->sites--;
    return 0;
}

int snap_site_rtt(snap *s, const char *id, double rtt_ms)
{
    int32_t i = map_get(&s->site_ix, id);
    if (i == SNAP_NONE) return -1;
    s->site[i].rtt_ms = rtt_ms;
    return 0;
}

/* ---- nodes ---------------------------------------------------------------- */

static int32_t vram_class(uint32_t mb)
{
    int32_t c = 0;
    while (mb > 1 && c < SNAP_VRAM_CLASSES - 1) { mb >>= 1; c++; }
    return c;
}

static uint32_t popcount64(uint64_t m) { return (uint32_t)__builtin_popcountll(m); }

/* Recomputes the free mask from the GPUs and bookings; relinks free count. */
static void node_refree(snap *s, int32_t ni)
{
    snap_node *n = &s->node[ni];
    uint64_t held = 0;
    n->heir_holds = 0;
    for (int32_t h = n->holds; h != SNAP_NONE; h = s->hold[h].next) {
        held |= s->hold[h].mask;
        n->heir_holds += s->hold[h].attempt == SNAP_HEIR_ATTEMPT;
    }
    n->free_mask = n->all_mask & ~held;
    node_relink(s, ni, SNAP_IX_FREE, (int32_t)popcount64(n->free_mask));
}

static int node_gpus(snap *s, snap_node *n, const msg_node *m, int32_t *model,
                     int32_t *vclass)
{
    const msg_gpu *g = m->gpus.v;
    uint32_t maxv = 0;
    n->ngpu = 0;
    n->all_mask = 0;
    *model = SNAP_NONE;
    for (uint32_t k = 0; k < m->gpus.n && n->ngpu < SNAP_NODE_GPUS; k++) {
        if (g[k].index < 0 || g[k].index > 63) continue;
        int32_t id = model_intern(s, g[k].model);
        if (id == SNAP_NONE) return -1;
        n->gpu[n->ngpu++] = (snap_gpu){g[k].index, id, g[k].vram_mb};
        n->all_mask |= 1ull << g[k].index;
        if (g[k].vram_mb > maxv) maxv = g[k].vram_mb;
        *model = *model == SNAP_NONE || *model == id ? id : SNAP_MODEL_MIXED;
    }
    if (*model == SNAP_NONE) *model = SNAP_MODEL_MIXED;
    *vclass = vram_class(maxv);
    return 0;
}

static int32_t hottest(const msg_heartbeat *hb)
{
    const msg_gpu_telemetry *t = hb->gpus.v;
    int32_t hot = INT32_MIN;
    for (uint32_t k = 0; k < hb->gpus.n; k++)
        if (GP_HAS(&t[k], MSG_GPU_TELEMETRY__TEMP_C) && (int32_t)t[k].temp_c > hot)
            hot = (int32_t)t[k].temp_c;
    return hot;
}

static int32_t node_new(snap *s, const msg_node *m, int32_t si)
{
    int32_t ni;
    SLOT_NEW(s, node, ni);
    if (ni == SNAP_NONE || map_put(&s->node_ix, m->id, ni) < 0) return SNAP_NONE;
    snap_node *n = &s->node[ni];
    n->used = true;
    n->holds = SNAP_NONE;
    n->temp_c = INT32_MIN;
    copy_id(n->id, m->id, SNAP_ID_LEN);
    n->site = si;
    node_link(s, ni, SNAP_IX_SITE, si);
    site_nodes_add(s, si, 1);
    node_link(s, ni, SNAP_IX_MODEL, SNAP_MODEL_MIXED);
    node_link(s, ni, SNAP_IX_VRAM, 0);
    node_link(s, ni, SNAP_IX_FREE, 0);
    s->nodes++;
    return ni;
}

int snap_node_upsert(snap *s, const msg_node *m)
{
    int32_t si = map_get(&s->site_ix, m->site);
    if (si == SNAP_NONE) return -1;
    int32_t ni = map_get(&s->node_ix, m->id);
    if (ni == SNAP_NONE && (ni = node_new(s, m, si)) == SNAP_NONE) return -1;
    snap_node *n = &s->node[ni];
    if (n->site != si) {                       /* moved to another site */
        site_nodes_add(s, n->site, -1);
        node_relink(s, ni, SNAP_IX_SITE, si);
        site_nodes_add(s, si, 1);
        n->site = si;
    }
    int32_t model, vclass;
    if (node_gpus(s, n, m, &model, &vclass) < 0) return -1;
    node_relink(s, ni, SNAP_IX_MODEL, model);
    node_relink(s, ni, SNAP_IX_VRAM, vclass);
    if (GP_HAS(m, MSG_NODE__STATE)) n->state = m->state;
    if (GP_HAS(m, MSG_NODE__TELEMETRY)) n->temp_c = hottest(&m->telemetry);
    node_refree(s, ni);
    return 0;
}

static void hold_release(snap *s, int32_t h)
{
    memset(&s->hold[h], 0, sizeof s->hold[h]);
    s->hold[h].next = s->hold_free;
    s->hold_free = h;
}

int snap_node_remove(snap *s, const char *id)
{
    int32_t ni = map_get(&s->node_ix, id);
    if (ni == SNAP_NONE) return -1;
    snap_node *n = &s->node[ni];
    for (int32_t h = n->holds, nx; h != SNAP_NONE; h = nx) {
        nx = s->hold[h].next;
        hold_release(s, h);
    }
    site_nodes_add(s, n->site, -1);
    for (int ix = 0; ix < SNAP_IX_N; ix++) node_unlink(s, ni, ix);
    map_del(&s->node_ix, id);
    SLOT_FREE(s, node, ni);
    s->nodes--;
    return 0;
}

int snap_node_state(snap *s, const msg_node_state *m)
{
    int32_t ni = map_get(&s->node_ix, m->node);
    if (ni == SNAP_NONE) return -1;
    s->node[ni].state = m->state;
    return 0;
}

int snap_node_cordon(snap *s, const char *id, bool cordoned)
{
    int32_t ni = map_get(&s->node_ix, id);
    if (ni == SNAP_NONE) return -1;
    s->node[ni].cordoned = cordoned;
    return 0;
}

int snap_node_claim(snap *s, const char *id, bool claimed)
{
    int32_t ni = map_get(&s->node_ix, id);
    if (ni == SNAP_NONE) return -1;
    s->node[ni].claimed = claimed;
    return 0;
}

int snap_node_heartbeat(snap *s, const msg_heartbeat *hb)
{
    int32_t ni = map_get(&s->node_ix, hb->node);
    if (ni == SNAP_NONE) return -1;
    s->node[ni].temp_c = hottest(hb);
    return 0;
}

int snap_node_temp(snap *s, const char *id, int32_t temp_c)
{
    int32_t ni = map_get(&s->node_ix, id);
    if (ni == SNAP_NONE) return -1;
    s->node[ni].temp_c = temp_c;
    return 0;
}

int snap_node_fault(snap *s, const char *id, uint64_t now_ms)
{
    int32_t ni = map_get(&s->node_ix, id);
    if (ni == SNAP_NONE) return -1;
    snap_node *n = &s->node[ni];
    n->fail_milli = snap_node_failures_milli(s, n, now_ms) + 1000;
    n->fail_at_ms = now_ms;
    return 0;
}

/* ---- bookings --------------------------------------------------------------- */

static int32_t *hold_find(snap *s, int32_t ni, const char *job, uint32_t attempt);

/* A job's booking takes what was held for it on the node (reserve.h: the
 * book script frees the node's other GPUs held for it too). */
static void drop_heir_holds(snap *s, int32_t ni, const char *job)
{
    int32_t *p;
    if (!s->node[ni].heir_holds) return;
    while ((p = hold_find(s, ni, job, SNAP_HEIR_ATTEMPT)) != NULL) {
        int32_t h = *p;
        *p = s->hold[h].next;
        hold_release(s, h);
    }
    node_refree(s, ni);
}

int snap_book(snap *s, const char *node, uint64_t mask, const char *job,
              uint32_t attempt, int32_t priority, bool interruptible)
{
    int32_t ni = map_get(&s->node_ix, node);
    if (ni != SNAP_NONE && attempt != SNAP_HEIR_ATTEMPT) drop_heir_holds(s, ni, job);
    if (ni == SNAP_NONE || !mask || (mask & ~s->node[ni].free_mask)) return -1;
    int32_t h;
    if (s->hold_free != SNAP_NONE) {
        h = s->hold_free;
        s->hold_free = s->hold[h].next;
    } else {
        if (s->nhold == s->hold_cap &&
            grow((void **)&s->hold, &s->hold_cap, sizeof *s->hold) < 0) return -1;
        h = (int32_t)s->nhold++;
    }
    snap_hold *x = &s->hold[h];
    memset(x, 0, sizeof *x);
    copy_id(x->job, job, SNAP_ID_LEN);
    x->attempt = attempt;
    x->priority = priority;
    x->interruptible = interruptible;
    x->mask = mask;
    x->next = s->node[ni].holds;
    s->node[ni].holds = h;
    node_refree(s, ni);
    return 0;
}

static int32_t *hold_find(snap *s, int32_t ni, const char *job, uint32_t attempt)
{
    for (int32_t *p = &s->node[ni].holds; *p != SNAP_NONE; p = &s->hold[*p].next)
        if (s->hold[*p].attempt == attempt && !strcmp(s->hold[*p].job, job)) return p;
    return NULL;
}

int snap_unbook(snap *s, const char *node, const char *job, uint32_t attempt)
{
    int32_t ni = map_get(&s->node_ix, node);
    int32_t *p = ni == SNAP_NONE ? NULL : hold_find(s, ni, job, attempt);
    if (!p) return -1;
    int32_t h = *p;
    *p = s->hold[h].next;
    hold_release(s, h);
    node_refree(s, ni);
    return 0;
}

int snap_handover(snap *s, const char *node, const char *job, uint32_t attempt,
                  const char *heir)
{
    int32_t ni = map_get(&s->node_ix, node);
    int n = 0;
    int32_t *p;
    if (ni == SNAP_NONE || attempt == SNAP_HEIR_ATTEMPT) return -1;
    while ((p = hold_find(s, ni, job, attempt)) != NULL) {
        snap_hold *x = &s->hold[*p];
        copy_id(x->job, heir, SNAP_ID_LEN);
        x->attempt = SNAP_HEIR_ATTEMPT;
        x->priority = INT32_MAX;
        x->interruptible = false;
        x->evicting = false;
        n++;
    }
    if (!n) return -1;
    node_refree(s, ni);
    return 0;
}

uint64_t snap_held_for(const snap *s, const snap_node *n, const char *job)
{
    uint64_t m = 0;
    if (!n->heir_holds || !job) return 0;
    for (int32_t h = n->holds; h != SNAP_NONE; h = s->hold[h].next)
        if (s->hold[h].attempt == SNAP_HEIR_ATTEMPT && !strcmp(s->hold[h].job, job))
            m |= s->hold[h].mask;
    return m;
}

int snap_mark_evicting(snap *s, const char *node, const char *job, uint32_t attempt)
{
    int32_t ni = map_get(&s->node_ix, node);
    int32_t *p = ni == SNAP_NONE ? NULL : hold_find(s, ni, job, attempt);
    if (!p) return -1;
    s->hold[*p].evicting = true;
    return 0;
}

/* ---- consistency (tests) -------------------------------------------------- */

static int list_check(const snap *s, const snap_list *l, int ix, int32_t key)
{
    uint32_t n = 0;
    int32_t prev = SNAP_NONE;
    for (int32_t i = l->head; i != SNAP_NONE; i = s->node[i].link[ix].next) {
        const snap_node *x = &s->node[i];
        if (!x->used || x->key[ix] != key || x->link[ix].prev != prev) return -1;
        prev = i;
        if (++n > s->nodes) return -1;
    }
    return n == l->count ? 0 : -1;
}

static int node_keys_check(const snap_node *n)
{
    int32_t model = SNAP_NONE;
    uint32_t maxv = 0;
    for (uint32_t k = 0; k < n->ngpu; k++) {
        model = model == SNAP_NONE || model == n->gpu[k].model ? n->gpu[k].model
                                                               : SNAP_MODEL_MIXED;
        if (n->gpu[k].vram_mb > maxv) maxv = n->gpu[k].vram_mb;
    }
    if (model == SNAP_NONE) model = SNAP_MODEL_MIXED;
    return n->key[SNAP_IX_MODEL] == model && n->key[SNAP_IX_VRAM] == vram_class(maxv) &&
           n->key[SNAP_IX_FREE] == (int32_t)popcount64(n->free_mask) &&
           n->key[SNAP_IX_SITE] == n->site ? 0 : -1;
}

/* A region's or cell's node count is the sum of its sites' nodes. */
static int sites_check(const snap *s, const snap_list *l, int which, uint32_t nodes)
{
    uint32_t n = 0, k = 0;
    for (int32_t i = l->head; i != SNAP_NONE;
         i = which ? s->site[i].glink.next : s->site[i].rlink.next) {
        if (!s->site[i].used || ++k > s->sites) return -1;
        n += s->site[i].nodes.count;
    }
    return n == nodes && k == l->count ? 0 : -1;
}

int snap_check(const snap *s)
{
    for (uint32_t i = 0; i < s->nregion; i++)
        if (sites_check(s, &s->by_region[i].sites, 0, s->by_region[i].nodes)) return -1;
    for (int i = 0; i < SNAP_GEO_LAT * SNAP_GEO_LON; i++)
        if (sites_check(s, &s->cell[i].sites, 1, s->cell[i].nodes)) return -1;
    uint32_t total = 0, cells = 0;
    for (uint32_t i = 0; i < s->nmodel; i++)
        if (list_check(s, &s->by_model[i], SNAP_IX_MODEL, (int32_t)i)) return -1;
    for (int i = 0; i < SNAP_VRAM_CLASSES; i++)
        if (list_check(s, &s->by_vram[i], SNAP_IX_VRAM, i)) return -1;
    for (int i = 0; i <= SNAP_NODE_GPUS; i++) {
        if (list_check(s, &s->by_free[i], SNAP_IX_FREE, i)) return -1;
        total += s->by_free[i].count;
    }
    for (uint32_t i = 0; i < s->nsite; i++) {
        if (!s->site[i].used) continue;
        if (list_check(s, &s->site[i].nodes, SNAP_IX_SITE, (int32_t)i)) return -1;
    }
    for (int i = 0; i < SNAP_GEO_LAT * SNAP_GEO_LON; i++) cells += s->cell[i].nodes;
    for (uint32_t i = 0; i < s->nnode; i++)
        if (s->node[i].used && node_keys_check(&s->node[i])) return -1;
    return total == s->nodes && cells == s->nodes && s->node_ix.count == s->nodes ? 0 : -1;
}
