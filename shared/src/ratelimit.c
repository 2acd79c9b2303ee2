/* ratelimit.c -- token buckets and in-flight caps per tenant (see gp/ratelimit.h).
 *
 * A bucket counts milli-tokens: one request costs 1000, and each
 * millisecond adds `rate` (requests per second), so the arithmetic is
 * exact integers.  Entries never move while a request holds their slot;
 * the hash index over them (open addressing) is rebuilt whenever idle
 * entries are forgotten, which happens only when the table is full. */
#include "gp/ratelimit.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/id.h"
#include "gp/limits.h"

#define COST      1000                    /* milli-tokens per request */
#define IDX_SIZE  (2 * GP_MAX_TENANT_LIMITS)   /* load factor <= 1/2 */
#define OTHER     GP_MAX_TENANT_LIMITS    /* the overflow entry's slot */
#define NUM_MAX   1000000u                /* largest rate, burst or cap accepted */

_Static_assert((IDX_SIZE & (IDX_SIZE - 1)) == 0, "GP_MAX_TENANT_LIMITS must be a power of 2");

typedef struct entry {
    char          name[GP_MAX_ID + 1];
    gp_tlimit_cfg cfg;
    int64_t       milli;                  /* tokens x 1000 */
    int64_t       last_ms;                /* when milli was last brought up to date */
    unsigned      inflight;
    bool          used;
} entry;

typedef struct override {
    char          name[GP_MAX_ID + 1];
    gp_tlimit_cfg cfg;
} override;

struct gp_tlimits {
    gp_tlimit_cfg def;
    override      ov[GP_MAX_TENANT_OVERRIDES];
    int           nov;
    entry         e[GP_MAX_TENANT_LIMITS + 1];   /* + the overflow entry */
    int           freel[GP_MAX_TENANT_LIMITS];
    int           nfree;
    int           idx[IDX_SIZE];                 /* entry slot, or -1 */
    uint64_t      overflows;
};

/* ---- the override string --------------------------------------------- */

/* One number of "rate/burst/inflight": empty keeps *v. */
static bool
parse_num(const char *s, size_t n, unsigned *v)
{
    unsigned long x = 0;

    if (n == 0)
        return true;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        x = x * 10 + (unsigned long)(s[i] - '0');
        if (x > NUM_MAX)
            return false;
    }
    *v = (unsigned)x;
    return true;
}

static bool
cfg_ok(const gp_tlimit_cfg *c)
{
    return c->rate <= NUM_MAX && c->burst <= NUM_MAX && c->inflight <= NUM_MAX &&
           (c->rate == 0 || c->burst >= 1);
}

/* "rate/burst/inflight" (n bytes) over a copy of the defaults. */
static bool
parse_limits(const char *s, size_t n, gp_tlimit_cfg *c)
{
    unsigned   *field[3] = {&c->rate, &c->burst, &c->inflight};
    const char *end = s + n;

    for (int i = 0; i < 3 && s <= end; i++) {
        const char *slash = memchr(s, '/', (size_t)(end - s));
        size_t      len = slash != NULL ? (size_t)(slash - s) : (size_t)(end - s);

        if (!parse_num(s, len, field[i]))
            return false;
        if (slash == NULL)
            return cfg_ok(c);
        s = slash + 1;
    }
    return false;                          /* a fourth field */
}

static const override *
find_override(const gp_tlimits *t, const char *tenant)
{
    for (int i = 0; i < t->nov; i++)
        if (strcmp(t->ov[i].name, tenant) == 0)
            return &t->ov[i];
    return NULL;
}

/* One "tenant=rate/burst/inflight" of n bytes. */
static gp_err
parse_one(gp_tlimits *t, const char *s, size_t n, char *err, size_t errlen)
{
    const char *eq = memchr(s, '=', n);
    override   *o = &t->ov[t->nov];
    size_t      nl = eq != NULL ? (size_t)(eq - s) : 0;

    if (eq == NULL || !gp_id_okn(s, nl) || nl > GP_MAX_ID) {
        snprintf(err, errlen, "tenant-limits: \"%.*s\": expected tenant=rate/burst/inflight",
                 (int)n, s);
        return GP_EINVAL;
    }
    if (t->nov == GP_MAX_TENANT_OVERRIDES) {
        snprintf(err, errlen, "tenant-limits: more than %d tenants", GP_MAX_TENANT_OVERRIDES);
        return GP_EINVAL;
    }
    memcpy(o->name, s, nl);
    o->name[nl] = '\0';
    if (find_override(t, o->name) != NULL) {
        snprintf(err, errlen, "tenant-limits: tenant %s given twice", o->name);
        return GP_EINVAL;
    }
    o->cfg = t->def;
    if (!parse_limits(eq + 1, n - nl - 1, &o->cfg)) {
        snprintf(err, errlen, "tenant-limits: \"%.*s\": rate/burst/inflight are numbers up to "
                 "%u, burst at least 1 with a rate", (int)n, s, NUM_MAX);
        return GP_EINVAL;
    }
    t->nov++;
    return GP_EOK;
}

static gp_err
parse_overrides(gp_tlimits *t, const char *s, char *err, size_t errlen)
{
    while (s != NULL && *s != '\0') {
        size_t n;

        s += strspn(s, " ,\t");
        n = strcspn(s, " ,\t");
        if (n > 0) {
            gp_err rc = parse_one(t, s, n, err, errlen);

            if (rc != GP_EOK)
                return rc;
        }
        s += n;
    }
    return GP_EOK;
}

/* ---- the table ------------------------------------------------------- */

static uint32_t
hash(const char *s)
{
    uint32_t h = 2166136261u;

    while (*s != '\0')
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

static int
idx_find(const gp_tlimits *t, const char *tenant, unsigned *pos)
{
    unsigned h = hash(tenant) & (IDX_SIZE - 1);

    while (t->idx[h] >= 0) {
        if (strcmp(t->e[t->idx[h]].name, tenant) == 0)
            return t->idx[h];
        h = (h + 1) & (IDX_SIZE - 1);
    }
    *pos = h;
    return -1;
}

static void
idx_rebuild(gp_tlimits *t)
{
    unsigned pos;

    memset(t->idx, 0xff, sizeof(t->idx));
    for (int i = 0; i < GP_MAX_TENANT_LIMITS; i++)
        if (t->e[i].used && idx_find(t, t->e[i].name, &pos) < 0)
            t->idx[pos] = i;
}

static void
entry_init(entry *e, const char *name, const gp_tlimit_cfg *cfg, int64_t now_ms)
{
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->cfg = *cfg;
    e->milli = (int64_t)cfg->burst * COST;    /* a new tenant starts with a full bucket */
    e->last_ms = now_ms;
    e->inflight = 0;
    e->used = true;
}

static void
refill(entry *e, int64_t now_ms)
{
    int64_t full = (int64_t)e->cfg.burst * COST, dt = now_ms - e->last_ms;

    if (dt <= 0)
        return;
    e->last_ms = now_ms;
    if (e->cfg.rate == 0 || dt >= full / e->cfg.rate + 1)
        e->milli = full;
    else if ((e->milli += dt * e->cfg.rate) > full)
        e->milli = full;
}

/* Idle: nothing in flight and a full bucket, so a fresh entry would act
 * the same. */
static bool
idle(entry *e, int64_t now_ms)
{
    refill(e, now_ms);
    return e->inflight == 0 && e->milli >= (int64_t)e->cfg.burst * COST;
}

/* Forgets every idle entry (the table is full). */
static void
reclaim(gp_tlimits *t, int64_t now_ms)
{
    for (int i = 0; i < GP_MAX_TENANT_LIMITS; i++) {
        if (t->e[i].used && idle(&t->e[i], now_ms)) {
            t->e[i].used = false;
            t->freel[t->nfree++] = i;
        }
    }
    idx_rebuild(t);
}

/* The entry of tenant, made if new: a slot. */
static int
entry_get(gp_tlimits *t, const char *tenant, int64_t now_ms)
{
    unsigned pos;
    int      i = idx_find(t, tenant, &pos);

    if (i >= 0)
        return i;
    if (t->nfree == 0) {
        reclaim(t, now_ms);
        if (t->nfree == 0) {
            t->overflows++;
            return OTHER;
        }
        idx_find(t, tenant, &pos);          /* positions moved with the rebuild */
    }
    i = t->freel[--t->nfree];
    entry_init(&t->e[i], tenant, gp_tlimits_lookup(t, tenant), now_ms);
    t->idx[pos] = i;
    return i;
}

gp_err
gp_tlimits_new(const gp_tlimit_cfg *def, const char *overrides, char *err, size_t errlen,
               gp_tlimits **out)
{
    gp_tlimits *t;
    gp_err      rc;

    *out = NULL;
    if (!cfg_ok(def)) {
        snprintf(err, errlen, "tenant-burst must be at least 1 when tenant-rate is set");
        return GP_EINVAL;
    }
    if ((t = calloc(1, sizeof(*t))) == NULL)
        return GP_ENOMEM;
    t->def = *def;
    rc = parse_overrides(t, overrides, err, errlen);
    if (rc != GP_EOK) {
        free(t);
        return rc;
    }
    for (int i = GP_MAX_TENANT_LIMITS - 1; i >= 0; i--)
        t->freel[t->nfree++] = i;
    memset(t->idx, 0xff, sizeof(t->idx));
    entry_init(&t->e[OTHER], GP_TLIMIT_OTHER, &t->def, 0);
    *out = t;
    return GP_EOK;
}

void
gp_tlimits_free(gp_tlimits *t)
{
    free(t);
}

gp_tl_verdict
gp_tlimits_admit(gp_tlimits *t, const char *tenant, int64_t now_ms, int *slot,
                 unsigned *retry_ms)
{
    int    i = entry_get(t, tenant, now_ms);
    entry *e = &t->e[i];

    *slot = i;
    *retry_ms = 0;
    refill(e, now_ms);
    if (e->cfg.inflight > 0 && e->inflight >= e->cfg.inflight)
        return GP_TL_INFLIGHT;
    if (e->cfg.rate > 0 && e->milli < COST) {
        *retry_ms = (unsigned)((COST - e->milli + e->cfg.rate - 1) / e->cfg.rate);
        return GP_TL_RATE;
    }
    if (e->cfg.rate > 0)
        e->milli -= COST;
    e->inflight++;
    return GP_TL_OK;
}

void
gp_tlimits_end(gp_tlimits *t, int slot)
{
    if (slot >= 0 && slot <= OTHER && t->e[slot].inflight > 0)
        t->e[slot].inflight--;
}

const char *
gp_tlimits_name(const gp_tlimits *t, int slot)
{
    return t->e[slot].name;
}

const gp_tlimit_cfg *
gp_tlimits_cfg(const gp_tlimits *t, int slot)
{
    return &t->e[slot].cfg;
}

unsigned
gp_tlimits_inflight(const gp_tlimits *t, int slot)
{
    return t->e[slot].inflight;
}

const gp_tlimit_cfg *
gp_tlimits_lookup(const gp_tlimits *t, const char *tenant)
{
    const override *o = find_override(t, tenant);

    return o != NULL ? &o->cfg : &t->def;
}

uint64_t
gp_tlimits_overflows(const gp_tlimits *t)
{
    return t->overflows;
}
