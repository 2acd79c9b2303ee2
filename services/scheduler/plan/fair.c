/* fair.c -- see fair.h for the order and the anti-starvation rule. */
#include "fair.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void fair_cfg_default(fair_cfg *c)
{
    c->half_life_ms = 3600000u;
    c->aging_step_ms = 60000u;
    c->aging_max = 100;
    c->charge_s = 600;
    c->hold_gpus = 8;
    c->hold_after_ms = 1800000u;
}

int fair_init(fair *f, const fair_cfg *cfg)
{
    memset(f, 0, sizeof *f);
    fair_cfg_default(&f->cfg);
    if (cfg) f->cfg = *cfg;
    if (!f->cfg.half_life_ms) f->cfg.half_life_ms = 3600000u;
    if (!f->cfg.aging_step_ms) f->cfg.aging_step_ms = 60000u;
    snap_map_init(&f->ix);
    return 0;
}

void fair_free(fair *f)
{
    snap_map_free(&f->ix);
    free(f->t);
    memset(f, 0, sizeof *f);
}

static fair_tenant *tenant_get(fair *f, const char *id)
{
    int32_t i = snap_map_get(&f->ix, id);
    if (i != SNAP_NONE) return &f->t[i];
    if (f->nt == f->cap) {
        uint32_t nc = f->cap ? f->cap * 2 : 64;
        fair_tenant *t = realloc(f->t, nc * sizeof *t);
        if (!t) return NULL;
        f->t = t;
        f->cap = nc;
    }
    if (snap_map_put(&f->ix, id, (int32_t)f->nt) < 0) return NULL;
    fair_tenant *t = &f->t[f->nt++];
    memset(t, 0, sizeof *t);
    strncpy(t->id, id, SNAP_ID_LEN - 1);
    t->weight = 1;
    t->used = true;
    return t;
}

int fair_set_weight(fair *f, const char *tenant, uint32_t weight)
{
    fair_tenant *t = tenant_get(f, tenant);
    if (!t) return -1;
    t->weight = weight ? weight : 1;
    return 0;
}

static double decay(const fair *f, double v, uint64_t from, uint64_t to)
{
    if (to <= from) return v;
    return v * exp2(-(double)(to - from) / (double)f->cfg.half_life_ms);
}

int fair_record(fair *f, const char *tenant, double gpu_s, uint64_t now_ms)
{
    fair_tenant *t = tenant_get(f, tenant);
    if (!t) return -1;
    if (now_ms >= t->at_ms) {
        t->usage = decay(f, t->usage, t->at_ms, now_ms) + gpu_s;
        t->at_ms = now_ms;
    } else {            /* a late report: decay it to the tenant's time */
        t->usage += decay(f, gpu_s, now_ms, t->at_ms);
    }
    return 0;
}

double fair_share(const fair *f, const char *tenant, uint64_t now_ms)
{
    int32_t i = snap_map_get(&f->ix, tenant);
    if (i == SNAP_NONE) return 0.0;
    const fair_tenant *t = &f->t[i];
    return decay(f, t->usage, t->at_ms, now_ms) / t->weight;
}

static uint32_t weight_of(const fair *f, const char *tenant)
{
    int32_t i = snap_map_get(&f->ix, tenant);
    return i == SNAP_NONE ? 1 : f->t[i].weight;
}

/* ---- ordering ---------------------------------------------------------------- */

static void effective(const fair *f, fair_job *jobs, size_t n, uint64_t now_ms)
{
    fair_job *held = NULL;
    for (size_t i = 0; i < n; i++) {
        fair_job *j = &jobs[i];
        uint64_t waited = now_ms > j->submitted_ms ? now_ms - j->submitted_ms : 0;
        uint64_t bonus = waited / f->cfg.aging_step_ms;
        if (bonus > (uint64_t)f->cfg.aging_max) bonus = (uint64_t)f->cfg.aging_max;
        j->eff_priority = j->priority + (int32_t)bonus;
        j->hold = false;
        if (j->gpus < f->cfg.hold_gpus || waited < f->cfg.hold_after_ms) continue;
        if (!held || j->submitted_ms < held->submitted_ms ||
            (j->submitted_ms == held->submitted_ms && strcmp(j->job, held->job) < 0))
            held = j;
    }
    if (held) held->hold = true;
    /* One bonus per priority: its oldest job's. Aging lifts a priority
     * toward the ones above it; a bonus per job would also split one
     * priority into tiers by minutes waited, and the fair share, which only
     * orders inside a tier, would never see a newcomer's jobs next to an
     * older backlog (first come first served by the minute). O(n x p), p
     * the priorities in the batch. */
    for (size_t i = 0; i < n; i++) {
        bool first = true;
        int32_t top = jobs[i].eff_priority;
        for (size_t k = 0; k < i && first; k++) first = jobs[k].priority != jobs[i].priority;
        if (!first) continue;
        for (size_t k = i + 1; k < n; k++)
            if (jobs[k].priority == jobs[i].priority && jobs[k].eff_priority > top)
                top = jobs[k].eff_priority;
        for (size_t k = i; k < n; k++)
            if (jobs[k].priority == jobs[i].priority) jobs[k].eff_priority = top;
    }
}

static int by_tier_tenant_age(const void *a, const void *b)
{
    const fair_job *x = a, *y = b;
    if (x->hold != y->hold) return x->hold ? -1 : 1;
    if (x->eff_priority != y->eff_priority) return x->eff_priority > y->eff_priority ? -1 : 1;
    int c = strcmp(x->tenant, y->tenant);
    if (c) return c;
    if (x->submitted_ms != y->submitted_ms) return x->submitted_ms < y->submitted_ms ? -1 : 1;
    return strcmp(x->job, y->job);
}

/* A tenant's run of jobs inside one tier of the sorted scratch. */
typedef struct run { size_t next, end; double share, per_gpu; } run;

static bool same_tier(const fair_job *a, const fair_job *b)
{
    return a->hold == b->hold && a->eff_priority == b->eff_priority;
}

/* Emits the tier [lo, hi) of src into out, lowest share first. */
static size_t emit_tier(const fair *f, const fair_job *src, size_t lo, size_t hi,
                        run *runs, fair_job *out, size_t o, uint64_t now_ms)
{
    size_t nr = 0;
    for (size_t i = lo; i < hi; i++) {
        if (i > lo && !strcmp(src[i].tenant, src[i - 1].tenant)) { runs[nr - 1].end = i + 1; continue; }
        runs[nr++] = (run){i, i + 1, fair_share(f, src[i].tenant, now_ms),
                           (double)f->cfg.charge_s / weight_of(f, src[i].tenant)};
    }
    for (size_t left = hi - lo; left > 0; left--) {
        run *best = NULL;
        for (size_t r = 0; r < nr; r++)
            if (runs[r].next < runs[r].end && (!best || runs[r].share < best->share))
                best = &runs[r];
        if (best == NULL)           /* cannot happen: left counts the runs' jobs */
            break;
        const fair_job *j = &src[best->next++];
        best->share += best->per_gpu * j->gpus;
        out[o++] = *j;
    }
    return o;
}

int fair_order(fair *f, fair_job *jobs, size_t n, uint64_t now_ms)
{
    if (n < 2) {
        effective(f, jobs, n, now_ms);
        return 0;
    }
    fair_job *src = malloc(n * sizeof *src);
    run *runs = malloc(n * sizeof *runs);
    if (!src || !runs) {
        free(src);
        free(runs);
        return -1;
    }
    effective(f, jobs, n, now_ms);
    memcpy(src, jobs, n * sizeof *src);
    qsort(src, n, sizeof *src, by_tier_tenant_age);
    size_t o = 0;
    for (size_t lo = 0, hi; lo < n; lo = hi) {
        for (hi = lo + 1; hi < n && same_tier(&src[lo], &src[hi]); hi++) {}
        o = emit_tier(f, src, lo, hi, runs, jobs, o, now_ms);
    }
    free(src);
    free(runs);
    return 0;
}
