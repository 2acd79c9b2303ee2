/* preempt.h -- victims for a job that cannot be placed (pure).
 *
 * RULES.
 *   - Only bookings that are interruptible AND of strictly lower priority
 *     than the job, and not already being evicted (snap_mark_evicting), may
 *     be chosen. Equal or higher priority, or non-interruptible work, is
 *     never a victim.
 *   - The job lands on one node (multi-node: one site, `nodes` nodes), with
 *     the same filters as place() (rights, pool, model, health, price,
 *     latency...): GPUs of eligible bookings count as free there.
 *   - Per node the cheapest set of victims that frees enough fitting GPUs is
 *     chosen, cheapest meaning, in order: fewest attempts evicted, fewest GPUs
 *     evicted, lowest highest victim priority, lowest priority sum
 *     (exhaustive over the node's eligible bookings when there are at most
 *     PREEMPT_EXACT of them, else greedy lowest priority first). place()
 *     ranks the nodes/sites it examines by that cost (params.rank), so the
 *     cheapest it examined wins; ties go to the better placement score. The
 *     walk keeps place()'s candidate bound: on a huge fleet the cheapest of
 *     the examined candidates, not of the whole fleet. A multi-node victim
 *     is counted on each node it holds (it is one attempt, evicted whole).
 *   - No cascade: strict priority means a job placed by preemption is never
 *     a victim of a job of its own priority, so two jobs of one priority
 *     cannot evict each other in turn; and a booking chosen once is marked
 *     evicting by the caller and is not chosen again while its eviction runs
 *     (it frees its GPUs only when it stops, so nobody plans on them twice).
 * The plan does not change the snapshot: the caller signals the victims,
 * marks them (snap_mark_evicting) and places the job when the GPUs free. */
#ifndef SCHED_PREEMPT_H
#define SCHED_PREEMPT_H

#include "place.h"

#define PREEMPT_EXACT 10
#define PREEMPT_MAX_VICTIMS (PLACE_MAX_NODES * SNAP_NODE_GPUS)

enum { PREEMPT_OK = 0, PREEMPT_NONE = 1, PREEMPT_INVALID = 2 };

typedef struct preempt_victim {
    char node[SNAP_ID_LEN];
    char job[SNAP_ID_LEN];
    uint32_t attempt;
    int32_t priority;
    uint64_t gpus;                   /* the booking's GPUs on that node */
} preempt_victim;

typedef struct preempt_cost {
    uint32_t attempts, gpus;
    int32_t max_priority;
    int64_t sum_priority;
} preempt_cost;

typedef struct preempt_result {
    int status;
    place_choice target;             /* where the job goes, its GPUs per node */
    preempt_cost cost;
    uint32_t nvictims;
    preempt_victim victim[PREEMPT_MAX_VICTIMS];
    place_result placed;             /* place()'s view with eligible GPUs free */
} preempt_result;

/* spec->priority (default 100) is the job's priority. p as for place();
 * evict_below and max_choices are set here. Returns r->status. */
int preempt_plan(snap *s, const char *tenant, const msg_job_spec *spec,
                 const place_params *p, preempt_result *r);

#endif
