/* fair.h -- the order of the pending queue (pure: no clock, no I/O).
 *
 * ORDER of a batch of pending jobs, first to last:
 *   1. Held job first (below): at most one job in the batch.
 *   2. Effective priority, higher first: priority + aging bonus, where the
 *      bonus is 1 per aging_step_ms waited by the oldest job of that
 *      priority in the batch, at most aging_max (aging cannot carry a job
 *      past work more than aging_max above it). Every job of one priority
 *      gets the same bonus, so aging lifts a priority over higher ones but
 *      never orders the jobs of one priority by age ahead of fair share.
 *   3. Weighted fair share between tenants (Slurm/Armada style): a tenant's
 *      share is its GPU-seconds used, decayed exponentially with half-life
 *      half_life_ms, divided by its weight (default 1). Within one effective
 *      priority the next job is taken from the tenant with the lowest share,
 *      and that tenant is charged gpus x charge_s for it as it is ordered, so
 *      two equal tenants alternate and a heavy user yields until the others
 *      catch up (ties: tenant id, for a stable order).
 *   4. Age: older first within a tenant (then job id).
 *
 * ANTI-STARVATION. Aging alone cannot get a big job through: small jobs keep
 * backfilling the GPUs it waits for. So: a job asking for at least
 * hold_gpus GPUs in all that has waited at least hold_after_ms is
 * *starving*; the oldest starving job (ties: job id) gets hold = true and
 * goes first. The caller then places it; if it does not fit, the caller asks
 * place() with ignore_free for its target node(s) and claims them
 * (snap_node_claim); place() refuses claimed nodes to every other job
 * (reserved) and gives them to the claimant. Why this cannot starve: with
 * one hold at a time there is no circular wait; no new work starts on the
 * claimed nodes; the work on them ends (max_run_s, or preemption when the
 * held job has the priority); so the claimed GPUs come free and the held
 * job, first in order, gets them. When it is placed the claims are dropped
 * and the next oldest starving job is held. Work without a run limit on a
 * claimed node (a provisioned instance) is not ended by this rule: the
 * caller moves the claim when a target stays busy past hold_after_ms.
 *
 * Cost: fair_order is O(n log n + n x t), t = tenants in one effective
 * priority of the batch; it allocates one scratch array per call. */
#ifndef SCHED_FAIR_H
#define SCHED_FAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "snapshot.h"

typedef struct fair_cfg {
    uint64_t half_life_ms;    /* usage decay (default 1 h) */
    uint64_t aging_step_ms;   /* +1 priority per step waited (default 60 s) */
    int32_t aging_max;        /* bonus cap (default 100) */
    uint32_t charge_s;        /* seconds charged per GPU of a job ordered (default 600) */
    uint32_t hold_gpus;       /* a big job: gpus x nodes >= this (default 8) */
    uint64_t hold_after_ms;   /* waited this long: starving (default 30 min) */
} fair_cfg;

typedef struct fair_tenant {
    char id[SNAP_ID_LEN];
    double usage;             /* decayed GPU-seconds at at_ms */
    uint64_t at_ms;
    uint32_t weight;
    bool used;
} fair_tenant;

typedef struct fair {
    fair_cfg cfg;
    snap_map ix;
    fair_tenant *t; uint32_t nt, cap;
} fair;

/* One pending job: the caller fills the inputs; fair_order fills the outputs. */
typedef struct fair_job {
    char job[SNAP_ID_LEN];
    char tenant[SNAP_ID_LEN];
    int32_t priority;
    uint32_t gpus;            /* gpus_per_node x nodes */
    uint64_t submitted_ms;    /* monotonic */
    void *data;               /* caller's */
    int32_t eff_priority;     /* out */
    bool hold;                /* out */
} fair_job;

void fair_cfg_default(fair_cfg *c);
int  fair_init(fair *f, const fair_cfg *cfg);     /* cfg NULL: defaults */
void fair_free(fair *f);
int  fair_set_weight(fair *f, const char *tenant, uint32_t weight);
/* gpu_s GPU-seconds used by tenant, reported at now_ms (monotonic). */
int  fair_record(fair *f, const char *tenant, double gpu_s, uint64_t now_ms);
/* Decayed usage / weight at now_ms (0 for an unknown tenant). */
double fair_share(const fair *f, const char *tenant, uint64_t now_ms);
/* Orders jobs[0..n) in place. 0, or -1 when out of memory (left unordered). */
int  fair_order(fair *f, fair_job *jobs, size_t n, uint64_t now_ms);

#endif
