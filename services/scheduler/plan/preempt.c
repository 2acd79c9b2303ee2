/* preempt.c -- see preempt.h for the rules. */
#include "preempt.h"

#include <string.h>

static uint32_t pop(uint64_t m) { return (uint32_t)__builtin_popcountll(m); }

/* a < b in the order of preempt.h */
static bool cheaper(const preempt_cost *a, const preempt_cost *b)
{
    if (a->attempts != b->attempts) return a->attempts < b->attempts;
    if (a->gpus != b->gpus) return a->gpus < b->gpus;
    if (a->max_priority != b->max_priority) return a->max_priority < b->max_priority;
    return a->sum_priority < b->sum_priority;
}

static void cost_add(preempt_cost *c, const snap_hold *h)
{
    c->attempts++;
    c->gpus += pop(h->mask);
    if (h->priority > c->max_priority) c->max_priority = h->priority;
    c->sum_priority += h->priority;
}

typedef struct cands { int32_t h[SNAP_NODE_GPUS]; uint32_t n; } cands;

static void eligible(const snap *s, const snap_node *n, uint64_t fit, int32_t prio, cands *c)
{
    c->n = 0;
    for (int32_t h = n->holds; h != SNAP_NONE && c->n < SNAP_NODE_GPUS; h = s->hold[h].next) {
        const snap_hold *x = &s->hold[h];
        if (x->interruptible && !x->evicting && x->priority < prio && (x->mask & fit))
            c->h[c->n++] = h;
    }
}

/* Exhaustive: every subset of at most PREEMPT_EXACT bookings. */
static uint32_t best_subset(const snap *s, const cands *c, uint64_t have, uint64_t fit,
                            uint32_t g, preempt_cost *best)
{
    uint32_t best_set = 0;
    bool found = false;
    for (uint32_t set = 1; set < (1u << c->n); set++) {
        preempt_cost k = {0, 0, 0, 0};
        uint64_t m = have;
        for (uint32_t i = 0; i < c->n; i++)
            if (set & (1u << i)) { cost_add(&k, &s->hold[c->h[i]]); m |= s->hold[c->h[i]].mask; }
        if (pop(m & fit) < g || (found && !cheaper(&k, best))) continue;
        *best = k;
        best_set = set;
        found = true;
    }
    return found ? best_set : 0;
}

/* Greedy for many bookings: lowest priority first, fewer GPUs first. */
static uint32_t greedy_subset(const snap *s, cands *c, uint64_t have, uint64_t fit,
                              uint32_t g, preempt_cost *best)
{
    for (uint32_t i = 1; i < c->n; i++)          /* insertion sort, <= 16 */
        for (uint32_t k = i; k > 0; k--) {
            const snap_hold *a = &s->hold[c->h[k - 1]], *b = &s->hold[c->h[k]];
            if (a->priority < b->priority ||
                (a->priority == b->priority && pop(a->mask) <= pop(b->mask))) break;
            int32_t t = c->h[k]; c->h[k] = c->h[k - 1]; c->h[k - 1] = t;
        }
    uint32_t set = 0;
    *best = (preempt_cost){0, 0, 0, 0};
    for (uint32_t i = 0; i < c->n && pop(have & fit) < g; i++) {
        set |= 1u << i;
        cost_add(best, &s->hold[c->h[i]]);
        have |= s->hold[c->h[i]].mask;
    }
    return pop(have & fit) >= g ? set : 0;
}

/* Victims on one node of a choice; false if it cannot be freed. */
static bool node_victims(const snap *s, int32_t ni, uint64_t fit, uint32_t g, int32_t prio,
                         cands *c, uint32_t *set, preempt_cost *cost)
{
    const snap_node *n = &s->node[ni];
    uint64_t have = n->free_mask & fit;
    *set = 0;
    *cost = (preempt_cost){0, 0, 0, 0};
    c->n = 0;
    if (pop(have) >= g) return true;
    eligible(s, n, fit, prio, c);
    if (c->n <= PREEMPT_EXACT) *set = best_subset(s, c, have, fit, g, cost);
    else *set = greedy_subset(s, c, have, fit, g, cost);
    return *set != 0;
}

static void cost_sum(preempt_cost *t, const preempt_cost *c)
{
    t->attempts += c->attempts;
    t->gpus += c->gpus;
    if (c->max_priority > t->max_priority) t->max_priority = c->max_priority;
    t->sum_priority += c->sum_priority;
}

/* The cost of a whole choice; false if one of its nodes cannot be freed. */
static bool choice_cost(const snap *s, const place_choice *ch, uint32_t g, int32_t prio,
                        preempt_cost *total)
{
    *total = (preempt_cost){0, 0, 0, 0};
    for (uint32_t k = 0; k < ch->nnodes; k++) {
        cands c;
        uint32_t set;
        preempt_cost one;
        if (!node_victims(s, ch->node_ix[k], ch->fit[k], g, prio, &c, &set, &one)) return false;
        cost_sum(total, &one);
    }
    return true;
}

static uint64_t lowest(uint64_t m, uint32_t g, uint64_t out)
{
    for (; m && pop(out) < g; m &= m - 1) out |= m & -m;
    return out;
}

/* Fills the victims and the GPUs of the winning choice. */
static void commit(const snap *s, preempt_result *r, uint32_t g, int32_t prio)
{
    place_choice *ch = &r->target;
    for (uint32_t k = 0; k < ch->nnodes; k++) {
        const snap_node *n = &s->node[ch->node_ix[k]];
        cands c;
        uint32_t set;
        preempt_cost one;
        node_victims(s, ch->node_ix[k], ch->fit[k], g, prio, &c, &set, &one);
        uint64_t freed = 0;
        for (uint32_t i = 0; i < c.n; i++) {
            if (!(set & (1u << i)) || r->nvictims >= PREEMPT_MAX_VICTIMS) continue;
            const snap_hold *h = &s->hold[c.h[i]];
            preempt_victim *v = &r->victim[r->nvictims++];
            memcpy(v->node, n->id, SNAP_ID_LEN);
            memcpy(v->job, h->job, SNAP_ID_LEN);
            v->attempt = h->attempt;
            v->priority = h->priority;
            v->gpus = h->mask;
            freed |= h->mask;
        }
        uint64_t fit = ch->fit[k];
        ch->gpus[k] = lowest(freed & fit & ~n->free_mask, g, lowest(n->free_mask & fit, g, 0));
    }
}

typedef struct rank_ctx { uint32_t g; int32_t prio; } rank_ctx;

/* The cost packed so that a lower number is cheaper in the order of
 * cheaper(): attempts, GPUs, highest priority, priority sum (bounded:
 * <= 128 attempts and GPUs a site choice, priorities <= 1000). */
static uint64_t rank_by_cost(void *arg, const snap *s, const place_choice *c)
{
    const rank_ctx *x = arg;
    preempt_cost k;
    if (!choice_cost(s, c, x->g, x->prio, &k)) return UINT64_MAX;
    int32_t mp = k.max_priority < 0 ? 0 : k.max_priority;
    return (uint64_t)(k.attempts & 0xff) << 48 | (uint64_t)(k.gpus & 0xff) << 40 |
           (uint64_t)(mp & 0xffff) << 24 | ((uint64_t)k.sum_priority & 0xffffff);
}

int preempt_plan(snap *s, const char *tenant, const msg_job_spec *spec,
                 const place_params *p, preempt_result *r)
{
    memset(r, 0, sizeof *r);
    int32_t prio = GP_HAS(spec, MSG_JOB_SPEC__PRIORITY) ? spec->priority : 100;
    uint32_t g = spec->gpus_per_node > 0 ? (uint32_t)spec->gpus_per_node : 1;
    place_params q = *p;
    q.evict_below = prio > 0 ? prio : 0;
    q.max_choices = PLACE_MAX_CHOICES;
    q.ignore_free = false;
    /* place() keeps the cheapest choices it examined, cheapest first */
    rank_ctx ctx = {g, prio};
    q.rank = rank_by_cost;
    q.rank_arg = &ctx;
    if (!q.evict_below) return r->status = PREEMPT_NONE;   /* priority 0 evicts nobody */
    int st = place(s, tenant, spec, &q, &r->placed);
    if (st == PLACE_INVALID) return r->status = PREEMPT_INVALID;
    if (!r->placed.nchoices ||
        !choice_cost(s, &r->placed.choice[0], g, prio, &r->cost)) return r->status = PREEMPT_NONE;
    r->target = r->placed.choice[0];
    commit(s, r, g, prio);
    return r->status = PREEMPT_OK;
}
