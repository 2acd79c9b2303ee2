/* queue.c -- the placement pass ("place" task): pending jobs wait in
 * PostgreSQL; each pass claims a batch, orders it (fair.h), and for each
 * job: place() on the snapshot -> book the best choice in Redis (the only
 * authority; BUSY/UNHEALTHY refreshes that node and tries the next choice)
 * -> one transaction writes the attempt rows and moves the job to
 * 'starting' only if it is still pending with the same attempts_made (the
 * fencing token) -> book the snapshot -> dispatch.  A job that cannot be
 * placed keeps why (reason counts over the nodes considered) and gets a
 * 'pending' event only when its reasons change; it may preempt
 * (preempt_run.c) or be held (fair.h's anti-starvation claim).
 *
 * CLAIM RULE (several instances): a pass takes jobs with
 *   UPDATE jobs SET claimed_by = <instance>, claim_until = now() + claim-ms
 *   WHERE id IN (SELECT id ... WHERE state = 'pending' AND (claim_until IS
 *   NULL OR claim_until < now()) ORDER BY priority DESC, <the job's rank
 *   among its tenant's pending jobs of that priority, oldest first>,
 *   created_ms, id LIMIT place-batch FOR UPDATE SKIP LOCKED)
 * The ranks come from each tenant's first place-batch claimable jobs (an
 * index by tenant, a skip scan for the tenants): numbering every pending
 * job of the fleet cost ~70 ms a pass with 20,000 pending (place_bench,
 * pg_stat_statements), and no job past its tenant's first place-batch
 * can be in the batch anyway.
 * so two instances never hold one job at once.  The rank deals the batch
 * round-robin over the tenants of a priority: ordered by age alone, a
 * tenant that queued place-batch jobs first filled every batch and fair.h
 * never saw the others' jobs (first come first served, whatever their
 * usage).  The claim ends when the
 * job is placed or its reasons are written, and a crashed instance's
 * claims expire (PostgreSQL's clock, so instances agree).  The attempt's
 * commit also requires claimed_by = <instance>.
 *
 * One pass at a time; the jobs of a pass are placed one after the other:
 * each waits for its Redis booking, so the snapshot the next job sees holds
 * the previous job's booking.  The PostgreSQL write that follows a booking
 * does not hold the pass up: booked placements gather in a batch of up to
 * BATCH_MAX, written by ONE transaction (each job fenced on its own: moved
 * to 'starting' only if still pending with the same attempts_made and
 * claimed by this instance); the batch is sent when full or when the pass
 * has nothing more to place now, with up to COMMITS_MAX batches in flight.
 * One transaction per placement (and before that, waiting for each) kept
 * PostgreSQL busiest of all on a 2-core machine (place_bench).  Nothing a
 * commit decides is needed by the next job: the booking is already in
 * Redis and the snapshot, a job the write refused gives back exactly its
 * own booking (fenced by job and attempt), and the dispatch still follows
 * its commit.  The pass ends once its batches have returned.
 * A pass that claimed a full batch and placed at least half of it kicks
 * the next one at its end, so a backlog drains pass after pass instead of
 * one batch per place-ms. */
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/dbarray.h"
#include "gp/log.h"
#include "booking.h"
#include "gp/shard.h"
#include "plan/place.h"
#include "scheduler.h"

typedef struct qjob qjob;
struct qjob {
    msg_job job;
    bool    preempting;              /* a preemption it started still runs */
    /* nodes of its attempts that failed to start or were lost (place.h) */
    char     avoid[PLACE_MAX_AVOID][SNAP_ID_LEN];
    uint32_t navoid;
};

/* Placements per transaction, and those transactions in flight at once
 * (the pool has pg-pool connections, shared with submits and events).
 * One transaction per placement cost PostgreSQL most of the machine at a
 * few hundred placements/s (place_bench); a batch costs about one. */
#define BATCH_MAX   64
#define COMMITS_MAX 4

/* One placement of a batch: what committed() needs, copied, since the pass
 * moves on to the next job (q->r and q->attempt are the next job's). */
typedef struct pcommit {
    struct qjob        *qj;          /* in q->jobs: freed only at pass_end, after every commit */
    place_choice        c;
    uint32_t            attempt;
} pcommit;

typedef struct pbatch {
    struct sched_queue *q;
    uint32_t            n;
    pcommit             e[BATCH_MAX];
} pbatch;

typedef struct sched_queue {
    sched        *s;
    bool          busy, usage_busy;
    unsigned      commits;           /* batches' transactions in flight */
    unsigned      inflight;          /* placements booked, not yet committed or given back */
    pbatch       *batch;             /* being filled; sent when full or the pass waits */
    bool          stalled;           /* next_job waits for a commit to return */
    bool          draining;          /* unplaced() waits for every commit to return */
    size_t        sent;              /* commits sent by this pass */
    uint64_t      usage_at;          /* gp_mono_ms of the last usage read */
    qjob         *jobs;
    fair_job     *order;
    size_t        n, i;
    place_params  pp;
    place_result  r;
    uint32_t      choice;            /* index in r being booked */
    uint32_t      attempt;
    /* fair.h hold: the held job and the nodes claimed for it */
    char          held[GP_MAX_ID + 1];
    char          claimed[PLACE_MAX_NODES][GP_MAX_ID + 1];
    uint32_t      nclaimed;
    double       *m_snap_nodes;     /* gp_scheduler_snapshot_nodes */
} sched_queue;

static void next_job(sched_queue *q);
static void flush(sched_queue *q);
static void try_choice(sched_queue *q);

static qjob *
cur(sched_queue *q)
{
    return q->order[q->i].data;
}

/* ---- tenant usage for fair share ------------------------------------------ */

/* Decayed GPU-seconds per tenant from the attempts table, so every instance
 * orders by the same numbers: each attempt's GPU-seconds decayed by the
 * time since it ended (a running attempt: not decayed). */
static const char usage_sql[] =
    "SELECT j.tenant, sum(cardinality(a.gpus)::float8\n"
    "    * greatest(coalesce(a.ended_ms, $1::bigint) - coalesce(a.started_ms, a.created_ms), 0)\n"
    "    / 1000.0 * exp(-0.6931471805599453 * ($1::bigint - coalesce(a.ended_ms, $1::bigint))\n"
    "      / $2::float8)),\n"
    "  (SELECT count(*) FROM jobs WHERE state = 'pending')\n"
    "FROM attempts a JOIN jobs j ON j.id = a.job_id\n"
    "WHERE a.ended_ms IS NULL OR a.ended_ms > $1::bigint - 8 * $2::bigint GROUP BY j.tenant";

static void
usage_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched_queue *q = arg;
    sched       *s = q->s;
    uint64_t     now = gp_mono_ms();

    q->usage_busy = false;
    if (err != GP_EOK || nres != 1) {
        GP_WARN("usage_read_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    fair_cfg     fc = s->fair.cfg;

    fair_free(&s->fair);              /* usage is replaced, not added to */
    if (fair_init(&s->fair, &fc) != 0)
        return;
    for (int i = 0; i < PQntuples(res[0]); i++)
        fair_record(&s->fair, PQgetvalue(res[0], i, 0), atof(PQgetvalue(res[0], i, 1)), now);
    if (s->m_queue_depth != NULL && PQntuples(res[0]) > 0)
        *s->m_queue_depth = atof(PQgetvalue(res[0], 0, 2));
}

static void
usage_refresh(sched_queue *q)
{
    char        now[24], hl[24];
    const char *p[] = {now, hl};

    if (q->usage_busy || (q->usage_at != 0 && gp_mono_ms() - q->usage_at < q->s->cfg->usage_ms))
        return;
    q->usage_at = gp_mono_ms();
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    snprintf(hl, sizeof(hl), "%llu", (unsigned long long)q->s->fair.cfg.half_life_ms);
    if (gp_db_query(gp_app_db(q->s->app), usage_sql, 2, p, 0, usage_read, q) == GP_EOK)
        q->usage_busy = true;
}

/* ---- the end of one job's turn ------------------------------------------- */

/* "model=3,gpus=2" in filter order, and the reason in words. */
static void
reasons_text(const sched_queue *q, const place_result *r, char *out, size_t n, char *why,
             size_t wn, uint32_t *considered)
{
    size_t   len = 0;
    uint32_t best = 0;
    int      top = -1;

    out[0] = '\0';
    *considered = r->considered;
    if (r->status == PLACE_INVALID) {     /* a job-level refusal: no node could be considered */
        snprintf(out, n, "%s=%u", msg_pending_reason_reason_names[r->job_reason], q->s->snap.nodes);
        snprintf(why, wn, "not placeable: %s", msg_pending_reason_reason_names[r->job_reason]);
        *considered = 0;
        return;
    }
    for (int k = 0; k < PLACE_REASONS && len < n; k++) {
        if (r->reasons[k] == 0)
            continue;
        len += (size_t)snprintf(out + len, n - len, "%s%s=%u", len ? "," : "",
                                msg_pending_reason_reason_names[k], r->reasons[k]);
        if (r->reasons[k] > best) {
            best = r->reasons[k];
            top = k;
        }
    }
    if (top < 0)
        snprintf(why, wn, "no node fits (%u considered)", r->considered);
    else
        snprintf(why, wn, "no node fits: %s on %u of %u nodes considered",
                 msg_pending_reason_reason_names[top], best, r->considered);
}

/* Reasons stored, claim ended; a 'pending' event only when they changed.
 * Back-off: a job whose reasons are the same as at its last try, and that
 * no busy, down or draining node would fit (waits_for_capacity), is not
 * claimed again for as long as they have been the same (at most claim-ms;
 * on PostgreSQL's clock), so its retries thin out 1, 2, 4... s apart.
 * Without it, jobs nothing can place (a model no node has, a latency bound
 * under every site's) were claimed again by every pass ahead of all lower-
 * priority work: place-batch of them filled every batch and the rest of
 * the queue starved (sched_fleet_test).  Changed reasons (capacity moved)
 * and a job that started a preemption are tried again at once. */
static const char waiting_sql[] =
    "WITH old AS (SELECT id, waiting, updated_ms FROM jobs WHERE id = $1 AND state = 'pending'\n"
    "    AND claimed_by = $5 FOR UPDATE),\n"
    "u AS (UPDATE jobs j SET waiting = $2, nodes_considered = $3::bigint, reason = $4,\n"
    "    claimed_by = NULL,\n"
    "    claim_until = CASE WHEN old.waiting IS DISTINCT FROM $2 OR $7::bool THEN NULL\n"
    "      ELSE now() + LEAST(GREATEST($6::bigint - old.updated_ms, 0), $8::bigint)\n"
    "                   * interval '1 ms' END,\n"
    "    event_seq = j.event_seq + (old.waiting IS DISTINCT FROM $2)::int,\n"
    "    updated_ms = CASE WHEN old.waiting IS DISTINCT FROM $2 THEN $6::bigint\n"
    "                      ELSE j.updated_ms END\n"
    "  FROM old WHERE j.id = old.id\n"
    "  RETURNING j.id, j.event_seq, old.waiting IS DISTINCT FROM $2 AS changed)\n"
    "INSERT INTO job_events (job_id, seq, event, state, reason, at_ms)\n"
    "  SELECT id, event_seq, 'pending', 'pending', $4, $6::bigint FROM u WHERE changed\n"
    "  RETURNING job_id, seq, event, state, attempt, site, node, reason, exit_code, at_ms";

typedef struct wait_write {
    sched *s;
    char   tenant[GP_MAX_ID + 1];
} wait_write;

static void
waiting_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    wait_write *w = arg;

    if (err != GP_EOK || nres != 1)
        GP_WARN("pending_write_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    else
        sched_event_rows(w->s, w->tenant, res[0]);
    free(w);
}

/* Nodes that would fit but are busy, down or draining now: GPUs free up
 * all the time, and such a job must be tried at every pass (no back-off)
 * or the claim, not fair share, decides who gets them (sched_fair_test
 * saw shares of 870:770 GPU-s, and a preemption start 10 s late). */
static bool
waits_for_capacity(const place_result *r)
{
    return r->status == PLACE_NONE &&
           (r->reasons[MSG_PENDING_REASON_REASON_RESERVED] > 0 ||
            r->reasons[MSG_PENDING_REASON_REASON_UNHEALTHY] > 0 ||
            r->reasons[MSG_PENDING_REASON_REASON_DRAINING] > 0);
}

static void
write_waiting(sched_queue *q, const place_result *r, bool preempting)
{
    sched      *s = q->s;
    const msg_job *j = &cur(q)->job;
    char        text[512], why[256], cons[16], now[24];
    uint32_t    considered;
    wait_write *w = calloc(1, sizeof(*w));
    char        claim_ms[16];
    const char *p[] = {j->id, text, cons, why, gp_app_instance(s->app), now,
                       preempting || waits_for_capacity(r) ? "true" : "false", claim_ms};

    reasons_text(q, r, text, sizeof(text), why, sizeof(why), &considered);
    if (preempting)
        snprintf(why, sizeof(why), "preempting lower-priority work");
    snprintf(cons, sizeof(cons), "%u", considered);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    snprintf(claim_ms, sizeof(claim_ms), "%u", s->cfg->claim_ms);
    sched_count(s->m_unplaced);
    if (w == NULL)
        return;
    w->s = s;
    snprintf(w->tenant, sizeof(w->tenant), "%s", j->tenant);
    if (gp_db_query(gp_app_db(s->app), waiting_sql, 8, p, 0, waiting_written, w) != GP_EOK)
        free(w);
}

/* fair.h's hold: the held (oldest starving) job's target nodes are claimed
 * so no other job starts there; the claim moves with the held job. */
static void
unclaim(sched_queue *q)
{
    for (uint32_t i = 0; i < q->nclaimed; i++)
        snap_node_claim(&q->s->snap, q->claimed[i], false);
    q->nclaimed = 0;
    q->held[0] = '\0';
}

static void
hold_targets(sched_queue *q, const msg_job *j)
{
    place_params p = q->pp;
    place_result *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return;
    unclaim(q);
    p.ignore_free = true;
    p.claimant = true;
    p.max_choices = 1;
    if (place(&q->s->snap, j->tenant, &j->spec, &p, r) == PLACE_OK) {
        snprintf(q->held, sizeof(q->held), "%s", j->id);
        for (uint32_t i = 0; i < r->choice[0].nnodes; i++) {
            snprintf(q->claimed[i], sizeof(q->claimed[i]), "%s", r->choice[0].node[i]);
            snap_node_claim(&q->s->snap, q->claimed[i], true);
        }
        q->nclaimed = r->choice[0].nnodes;
        GP_INFO("job_held", "job=%s site=%s nodes=%u", j->id, r->choice[0].site, q->nclaimed);
    }
    free(r);
}

/* Counts over every node when the bounded walk left some out and the
 * fleet is small enough (explain mode costs O(fleet)). */
static void
explain(sched_queue *q, const msg_job *j)
{
    place_params p = q->pp;

    if (q->r.status != PLACE_NONE || q->r.index_skipped == 0 ||
        q->s->snap.nodes > q->s->cfg->explain_max_nodes)
        return;
    p.walk_all = true;
    place(&q->s->snap, j->tenant, &j->spec, &p, &q->r);
}

static void
unplaced(sched_queue *q)
{
    qjob *qj = cur(q);
    bool  preempting = qj->preempting;

    /* Preemption and the hold choose among the snapshot's bookings, and a
     * victim's attempt row must exist: the commits in flight land first
     * (q->r stays this job's meanwhile; committed() calls us again). */
    flush(q);
    if (q->commits > 0) {
        q->draining = true;
        return;
    }
    if (q->order[q->i].hold && strcmp(q->held, qj->job.id) != 0)
        hold_targets(q, &qj->job);
    if (!preempting && q->r.status == PLACE_NONE)
        preempting = sched_preempt_try(q->s, &qj->job, &q->pp);
    explain(q, &qj->job);
    write_waiting(q, &q->r, preempting);
    q->i++;
    next_job(q);
}

/* ---- commit and dispatch -------------------------------------------------- */

/* One transaction for a batch of placements: per job arrays $1..$15, per
 * attempt row (a multi-node job has one per node) $16..$19.  A job is
 * moved to 'starting' only if it is still pending with the same
 * attempts_made (the fencing token) and claimed by this instance; its
 * attempt rows and 'placed' event follow only for those.  The 'placed'
 * events returned name the jobs that made it. */
static const char commit_sql[] =
    "WITH j AS (SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::text[],\n"
    "    $5::float8[], $6::int[], $7::int[], $8::int[], $9::int[], $10::int[], $11::int[],\n"
    "    $12::text[], $13::text[], $14::text[], $15::text[], $20::text[])\n"
    "  AS j(id, prev, att, site, lat, sc, sl, sp, spk, sr, st, price, cur, node0, why, prod)),\n"
    "u AS (UPDATE jobs SET state = 'starting', attempts_made = j.att, waiting = NULL,\n"
    "    nodes_considered = NULL, reason = '', claimed_by = NULL, claim_until = NULL,\n"
    "    updated_ms = $21::bigint, event_seq = jobs.event_seq + 1\n"
    "  FROM j WHERE jobs.id = j.id AND jobs.state = 'pending' AND jobs.attempts_made = j.prev\n"
    "    AND jobs.claimed_by = $22\n"
    "  RETURNING jobs.id, jobs.event_seq, jobs.tenant),\n"
    "a AS (INSERT INTO attempts (job_id, attempt, rank, site, node, gpus, state, created_ms,\n"
    "    latency_est_ms, score, score_latency, score_price, score_packing, score_reliability,\n"
    "    score_thermal, price_micros_per_gpu_hour, currency, product)\n"
    "  SELECT u.id, j.att, r.rank, j.site, r.node, string_to_array(r.g, ',')::int[],\n"
    "    'reserved', $21::bigint, j.lat, j.sc, j.sl, j.sp, j.spk, j.sr, j.st,\n"
    "    NULLIF(j.price, '')::bigint, NULLIF(j.cur, ''), NULLIF(j.prod, '')\n"
    "  FROM u JOIN j ON j.id = u.id\n"
    "    JOIN unnest($16::text[], $17::int[], $18::text[], $19::text[]) AS r(id, rank, node, g)\n"
    "      ON r.id = u.id\n"
    "  RETURNING 1)\n"
    "INSERT INTO job_events (job_id, seq, event, state, attempt, site, node, reason, at_ms)\n"
    "  SELECT u.id, u.event_seq, 'placed', 'starting', j.att, j.site, j.node0, j.why,\n"
    "    $21::bigint FROM u JOIN j ON j.id = u.id\n"
    "  RETURNING job_id, seq, event, state, attempt, site, node, reason, exit_code, at_ms,\n"
    "    (SELECT tenant FROM jobs WHERE id = job_id) AS tenant";

static void
gpus_text(uint64_t mask, char *out, size_t n)
{
    size_t len = 0;

    out[0] = '\0';
    for (int g = 0; g <= SCHED_RES_MAX_GPU && len < n; g++)
        if (mask & (1ull << g))
            len += (size_t)snprintf(out + len, n - len, "%s%d", len ? "," : "", g);
}

static void
unbook_choice(sched_queue *q, const char *job, uint32_t attempt, const place_choice *c, bool redis)
{
    char nodes[PLACE_MAX_NODES][GP_MAX_ID + 1];

    for (uint32_t i = 0; i < c->nnodes; i++) {
        snprintf(nodes[i], sizeof(nodes[i]), "%s", c->node[i]);
        if (!redis)
            snap_unbook(&q->s->snap, c->node[i], job, attempt);
    }
    if (redis)
        sched_release(q->s, c->site, job, attempt, nodes, c->nnodes);
}

static void
dispatch_placed(sched_queue *q, qjob *qj, uint32_t attempt, const place_choice *c)
{
    const msg_job *j = &qj->job;
    sched_placed  *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return;            /* the attempt's lease never starts: the reconcile ends it */
    snprintf(p->job, sizeof(p->job), "%s", j->id);
    snprintf(p->tenant, sizeof(p->tenant), "%s", j->tenant);
    snprintf(p->site, sizeof(p->site), "%s", c->site);
    p->attempt = attempt;
    p->nnodes = c->nnodes;
    for (uint32_t i = 0; i < c->nnodes; i++) {
        snprintf(p->node[i], sizeof(p->node[i]), "%s", c->node[i]);
        p->gpus[i] = c->gpus[i];
    }
    p->resume_ms = j->progress_ms;      /* work done at its last checkpoint */
    snprintf(p->image_digest, sizeof(p->image_digest), "%s", j->image_digest);
    p->has_step = GP_HAS(j, MSG_JOB__CHECKPOINT_STEP);
    p->resume_step = j->checkpoint_step;
    snprintf(p->resume_id, sizeof(p->resume_id), "%s", j->checkpoint_id);
    p->spec = j->spec;                     /* moved: the job row's copy lets go of it */
    qj->job.spec = (msg_job_spec){0};
    sched_dispatch(q->s, p);
}

/* A placed preemptor needs no hold any more: the GPUs its victims handed
 * over on nodes it did not take (a multi-node victim on a hub, placed on
 * one node) go back now rather than after SCHED_RES_HOLD_MS.  Its booking
 * already took the holds of the nodes it is on; a release of holder
 * "<job>:0" frees holds only (fenced). */
typedef struct holds_ctx {
    sched *s;
    char   job[GP_MAX_ID + 1];
} holds_ctx;

static void
holds_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    holds_ctx *h = arg;

    if (err != GP_EOK || nres != 1)       /* they lapse by themselves */
        GP_WARN("hold_release_failed", "job=%s code=%s detail=\"%s\"", h->job, gp_err_name(err),
                detail);
    for (int i = 0; err == GP_EOK && nres == 1 && i < PQntuples(res[0]); i++) {
        char node[1][GP_MAX_ID + 1];

        snprintf(node[0], sizeof(node[0]), "%s", PQgetvalue(res[0], i, 1));
        sched_release(h->s, PQgetvalue(res[0], i, 0), h->job, SNAP_HEIR_ATTEMPT, node, 1);
    }
    free(h);
}

static void
release_holds(sched_queue *q, const qjob *qj)
{
    holds_ctx  *h;
    const char *p[] = {qj->job.id};

    if (!qj->preempting || (h = calloc(1, sizeof(*h))) == NULL)
        return;
    h->s = q->s;
    snprintf(h->job, sizeof(h->job), "%s", qj->job.id);
    if (gp_db_query(gp_app_db(q->s->app),
                    "SELECT DISTINCT site, node FROM attempts WHERE preempted_by = $1", 1, p, 0,
                    holds_read, h) != GP_EOK)
        free(h);
}

/* One placement of a batch, succeeded. */
static void
placed_ok(sched_queue *q, pcommit *pc)
{
    qjob               *qj = pc->qj;
    const place_choice *c = &pc->c;

    sched_count(q->s->m_placements);
    if (q->s->m_place_latency != NULL && gp_wall_ms() > qj->job.created_ms)
        gp_hist_observe(q->s->m_place_latency, (gp_wall_ms() - qj->job.created_ms) / 1000.0);
    GP_INFO("job_placed", "job=%s attempt=%u site=%s node=%s score=%d latency_ms=%.1f",
            qj->job.id, pc->attempt, c->site, c->node[0], c->score.total, c->latency_ms);
    if (strcmp(q->held, qj->job.id) == 0)
        unclaim(q);
    /* Charge the tenant now (fair.h's estimate, charge_s per GPU) so
     * the next passes see it; the next usage read replaces it with the
     * attempts table's figures.  Without it every pass until that read
     * (usage-ms) ordered by the same stale usage, and each GPU freed
     * meanwhile went to the same tenant: shares swung by usage-ms worth
     * of the fleet's turnover. */
    fair_record(&q->s->fair, qj->job.tenant,
                (double)q->s->fair.cfg.charge_s * (double)qj->job.spec.gpus_per_node *
                    (double)(qj->job.spec.nodes ? qj->job.spec.nodes : 1),
                gp_mono_ms());
    release_holds(q, qj);
    dispatch_placed(q, qj, pc->attempt, c);
}

static bool
in_result(const PGresult *res, const char *job)
{
    for (int i = 0; res != NULL && i < PQntuples(res); i++)
        if (strcmp(PQgetvalue(res, i, 0), job) == 0)
            return true;
    return false;
}

/* Each placement of the batch: done, or given back; then the batch is freed. */
static void
batch_done(pbatch *b, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched_queue    *q = b->q;
    const PGresult *rows = err == GP_EOK && nres == 1 ? res[0] : NULL;

    if (rows == NULL)
        GP_WARN("attempt_write_failed", "jobs=%u code=%s detail=\"%s\"", b->n, gp_err_name(err),
                detail);
    else
        sched_event_rows(q->s, NULL, rows);
    for (uint32_t i = 0; i < b->n; i++) {
        pcommit *pc = &b->e[i];

        if (in_result(rows, pc->qj->job.id)) {
            placed_ok(q, pc);
            continue;
        }
        /* not pending any more, placed by another instance, or the write
         * failed: give back what was booked for this attempt */
        sched_count(q->s->m_claim_lost);
        unbook_choice(q, pc->qj->job.id, pc->attempt, &pc->c, false);
        unbook_choice(q, pc->qj->job.id, pc->attempt, &pc->c, true);
    }
    q->commits--;
    q->inflight -= b->n;
    free(b);
}

static void
committed(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched_queue *q = ((pbatch *)arg)->q;

    batch_done(arg, err, res, nres, detail);
    if (q->draining) {                /* an unplaced job waits for them all */
        if (q->commits == 0) {
            q->draining = false;
            unplaced(q);
        }
    } else if (q->stalled) {          /* the pass waited for this one */
        q->stalled = false;
        next_job(q);
    }
}

/* The batch's arrays: per job (15), per attempt row (4), and per job the
 * product (added later: $20). */
enum { CA_ID, CA_PREV, CA_ATT, CA_SITE, CA_LAT, CA_SC, CA_SL, CA_SP, CA_SPK, CA_SR, CA_ST,
       CA_PRICE, CA_CUR, CA_NODE0, CA_WHY, CA_RID, CA_RRANK, CA_RNODE, CA_RG, CA_PROD, CA_N };

static gp_err
batch_add(gp_buf *arr, const pcommit *pc)
{
    const place_choice *c = &pc->c;
    char   v[CA_WHY + 1][128], g[200];
    gp_err rc = GP_EOK;

    snprintf(v[CA_ID], 128, "%s", pc->qj->job.id);
    snprintf(v[CA_PREV], 128, "%u", pc->qj->job.attempts_made);
    snprintf(v[CA_ATT], 128, "%u", pc->attempt);
    snprintf(v[CA_SITE], 128, "%s", c->site);
    snprintf(v[CA_LAT], 128, "%.3f", c->latency_ms);
    snprintf(v[CA_SC], 128, "%d", c->score.total);
    snprintf(v[CA_SL], 128, "%d", c->score.latency);
    snprintf(v[CA_SP], 128, "%d", c->score.price);
    snprintf(v[CA_SPK], 128, "%d", c->score.packing);
    snprintf(v[CA_SR], 128, "%d", c->score.reliability);
    snprintf(v[CA_ST], 128, "%d", c->score.thermal);
    snprintf(v[CA_PRICE], 128, "%lld", c->priced ? (long long)c->price_micros : 0LL);
    if (!c->priced)
        v[CA_PRICE][0] = '\0';
    snprintf(v[CA_CUR], 128, "%s", c->priced ? c->currency : "");
    snprintf(v[CA_NODE0], 128, "%s", c->node[0]);
    snprintf(v[CA_WHY], 128, "score %d (latency %d price %d packing %d reliability %d "
             "thermal %d)", c->score.total, c->score.latency, c->score.price, c->score.packing,
             c->score.reliability, c->score.thermal);
    for (int k = 0; rc == GP_EOK && k <= CA_WHY; k++)
        rc = gp_pgarr_add(&arr[k], v[k]);
    if (rc == GP_EOK)
        rc = gp_pgarr_add(&arr[CA_PROD], c->priced ? c->product : "");
    for (uint32_t i = 0; rc == GP_EOK && i < c->nnodes; i++) {
        char rank[16];

        snprintf(rank, sizeof(rank), "%u", i);
        gpus_text(c->gpus[i], g, sizeof(g));
        rc = gp_pgarr_add(&arr[CA_RID], pc->qj->job.id);
        if (rc == GP_EOK)
            rc = gp_pgarr_add(&arr[CA_RRANK], rank);
        if (rc == GP_EOK)
            rc = gp_pgarr_add(&arr[CA_RNODE], c->node[i]);
        if (rc == GP_EOK)
            rc = gp_pgarr_add(&arr[CA_RG], g);
    }
    return rc;
}

/* Sends the batch being filled as one transaction (no-op when empty).
 * Each placement of it is already booked in Redis and the snapshot. */
static void
flush(sched_queue *q)
{
    pbatch     *b = q->batch;
    gp_buf      arr[CA_N];
    const char *p[CA_N + 2];
    char        now[24];
    gp_err      rc = GP_EOK;

    if (b == NULL)
        return;
    q->batch = NULL;
    for (int k = 0; k < CA_N; k++) {
        gp_buf_init(&arr[k], 64 * 1024);     /* a cap: 64 jobs x 128 bytes, quoted */
        if (rc == GP_EOK)
            rc = gp_pgarr_begin(&arr[k]);
    }
    for (uint32_t i = 0; rc == GP_EOK && i < b->n; i++)
        rc = batch_add(arr, &b->e[i]);
    for (int k = 0; rc == GP_EOK && k < CA_N; k++)
        rc = gp_pgarr_end(&arr[k]);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    for (int k = 0; k < CA_N; k++)
        p[k] = arr[k].p;
    p[CA_N] = now;
    p[CA_N + 1] = gp_app_instance(q->s->app);
    q->commits++;
    if (rc == GP_EOK)
        rc = gp_db_query(gp_app_db(q->s->app), commit_sql, CA_N + 2, p, 0, committed, b);
    for (int k = 0; k < CA_N; k++)
        gp_buf_fini(&arr[k]);
    if (rc != GP_EOK)                 /* given back; the caller goes on */
        batch_done(b, rc, NULL, 0, "not sent");
}

/* The booked placement joins the batch being filled, and the pass moves
 * on to the next job; a full batch is sent.  False when the batch could
 * not be allocated (nothing added). */
static bool
commit(sched_queue *q)
{
    if (q->batch == NULL && (q->batch = calloc(1, sizeof(*q->batch))) == NULL)
        return false;
    q->batch->q = q;
    q->batch->e[q->batch->n++] =
        (pcommit){.qj = cur(q), .c = q->r.choice[q->choice], .attempt = q->attempt};
    q->inflight++;
    q->sent++;
    q->i++;
    next_job(q);                      /* sends the batch when full */
    return true;
}

/* ---- reserve ------------------------------------------------------------- */

static void
refreshed(void *arg, gp_err err, const sched_res_entry *e, size_t n)
{
    sched_queue *q = arg;

    /* what Redis holds that the snapshot lacks (another instance's
     * booking): booked here as non-interruptible, never a victim */
    for (size_t i = 0; err == GP_EOK && i < n; i++)
        snap_book(&q->s->snap, e[i].node, 1ull << e[i].gpu, e[i].job, e[i].attempt, INT32_MAX,
                  false);
    q->choice++;
    try_choice(q);
}

static void
booked(void *arg, const sched_res_result *res)
{
    sched_queue        *q = arg;
    const place_choice *c = &q->r.choice[q->choice];
    qjob               *qj = cur(q);

    if (res->status == SCHED_RES_OK) {
        for (uint32_t i = 0; i < c->nnodes; i++)
            snap_book(&q->s->snap, c->node[i], c->gpus[i], qj->job.id, q->attempt,
                      qj->job.spec.priority, qj->job.spec.interruptible);
        if (commit(q))
            return;
        /* out of memory: give the booking back, the job stays pending (its
         * claim expires) */
        unbook_choice(q, qj->job.id, q->attempt, c, false);
        unbook_choice(q, qj->job.id, q->attempt, c, true);
        q->i++;
        next_job(q);
        return;
    }
    if (res->status == SCHED_RES_UNHEALTHY) {
        msg_node_state st = {.state = SNAP_SUSPECT};

        snprintf(st.node, sizeof(st.node), "%s", res->node);
        snprintf(st.site, sizeof(st.site), "%s", c->site);
        snap_node_state(&q->s->snap, &st);
    }
    if (res->status == SCHED_RES_BUSY &&
        sched_reserve_read(q->s->res, c->site, res->node, refreshed, q) == GP_EOK)
        return;
    if (res->status == SCHED_RES_ERROR) {
        GP_WARN("reserve_failed", "job=%s code=%s", qj->job.id, gp_err_name(res->err));
        q->r.status = PLACE_NONE;
        unplaced(q);
        return;
    }
    q->choice++;
    try_choice(q);
}

static void
try_choice(sched_queue *q)
{
    const place_choice *c;
    sched_res_node      nodes[PLACE_MAX_NODES];
    gp_err              rc;

    if (q->choice >= q->r.nchoices) {          /* every choice lost its race */
        q->r.status = PLACE_NONE;
        q->r.reasons[MSG_PENDING_REASON_REASON_RESERVED] += q->r.nchoices;
        unplaced(q);
        return;
    }
    c = &q->r.choice[q->choice];
    for (uint32_t i = 0; i < c->nnodes; i++)
        nodes[i] = (sched_res_node){c->node[i], c->gpus[i]};
    rc = sched_reserve_book(q->s->res, c->site, cur(q)->job.id, q->attempt, nodes, c->nnodes,
                            booked, q);
    if (rc != GP_EOK) {
        sched_res_result r = {.status = SCHED_RES_ERROR, .err = rc};

        booked(q, &r);
    }
}

/* ---- the pass ------------------------------------------------------------ */

static void
place_one(sched_queue *q)
{
    qjob *qj = cur(q);

    q->pp.now_wall_ms = gp_wall_ms();
    q->pp.now_mono_ms = gp_mono_ms();
    q->pp.claimant = strcmp(q->held, qj->job.id) == 0;
    q->pp.avoid = (const char (*)[SNAP_ID_LEN])qj->avoid;
    q->pp.navoid = qj->navoid;
    q->pp.heir = qj->job.id;              /* GPUs its preemption handed it */
    q->pp.heir_walk = qj->preempting;
    q->attempt = qj->job.attempts_made + 1;
    q->choice = 0;
    if (snap_tenant_find(&q->s->snap, qj->job.tenant) < 0)
        sched_feed_tenant(q->s, qj->job.tenant);    /* created since the last load */
    if (place(&q->s->snap, qj->job.tenant, &qj->job.spec, &q->pp, &q->r) == PLACE_OK)
        try_choice(q);
    else
        unplaced(q);
}

static void
unclaimed(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    (void)arg, (void)res, (void)nres;
    if (err != GP_EOK)                    /* the claims expire by themselves */
        GP_WARN("unclaim_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
}

/* Jobs of the batch not tried (dispatch at its bound) are given back at
 * once rather than left to their claim's expiry. */
static void
unclaim_rest(sched_queue *q)
{
    gp_buf b;

    gp_buf_init(&b, 8192);
    if (gp_pgarr_begin(&b) != GP_EOK)
        return;
    for (size_t i = q->i; i < q->n; i++)
        gp_pgarr_add(&b, ((qjob *)q->order[i].data)->job.id);
    if (gp_pgarr_end(&b) == GP_EOK) {
        const char *p[] = {b.p, gp_app_instance(q->s->app)};

        gp_db_query(gp_app_db(q->s->app),
                    "UPDATE jobs SET claimed_by = NULL, claim_until = NULL\n"
                    "WHERE id = ANY($1::text[]) AND claimed_by = $2 AND state = 'pending'",
                    2, p, 0, unclaimed, NULL);
    }
    gp_buf_fini(&b);
}

static void
pass_end(sched_queue *q)
{
    /* a full batch mostly placed: more is likely pending and placeable.
     * (Not when most of it stayed unplaced: each pass would claim the same
     * waiting jobs again at once; they wait for place-ms or a kick.) */
    bool full = q->n > 0 && q->n >= q->s->cfg->place_batch && 2 * q->sent >= q->n;

    if (q->i < q->n)
        unclaim_rest(q);
    for (size_t i = 0; i < q->n; i++)
        gp_msg_clear(&msg_job_desc, &q->jobs[i].job);
    free(q->jobs);
    free(q->order);
    q->jobs = NULL;
    q->order = NULL;
    q->n = q->i = q->sent = 0;
    q->busy = false;
    /* a full batch: more may be pending; the next pass now rather than at
     * the next tick (submits kick it too, but a backlog has no submits) */
    if (full && q->s->dispatching < q->s->cfg->dispatch_max)
        sched_place_kick(q->s);
}

static void
next_job(sched_queue *q)
{
    /* commits in flight count against dispatch-max: each becomes a
     * dispatch when it returns */
    if (q->batch != NULL && q->batch->n == BATCH_MAX) {
        if (q->commits >= COMMITS_MAX) {
            q->stalled = true;        /* committed() calls us again */
            return;
        }
        flush(q);
    }
    if (q->i < q->n && q->s->dispatching + q->inflight < q->s->cfg->dispatch_max) {
        place_one(q);
        return;
    }
    flush(q);                         /* nothing more to place now: send what is booked */
    if (q->commits > 0) {             /* the jobs are freed at pass_end */
        q->stalled = true;
        return;
    }
    /* jobs left (dispatch at its bound): their claims expire; a short
     * claim would be cleaner, but expiry keeps the rule one rule */
    pass_end(q);
}

/* "n1,n7": the newest first (the claim's query orders them), so the
 * bound keeps the most recent. */
static void
load_avoid(qjob *qj, const char *list)
{
    char *save = NULL, *tok, buf[PLACE_MAX_AVOID * SNAP_ID_LEN];

    snprintf(buf, sizeof(buf), "%s", list);
    qj->navoid = 0;
    for (tok = strtok_r(buf, ",", &save); tok && qj->navoid < PLACE_MAX_AVOID;
         tok = strtok_r(NULL, ",", &save))
        snprintf(qj->avoid[qj->navoid++], SNAP_ID_LEN, "%s", tok);
}

/* The tenant's fair-share weight, from the inventory (Tenant.
 * fair_share_weight), set before the batch is ordered: the usage read
 * rebuilds fair.h's table, and a tenant appears there by its usage or by
 * its first job. */
static void
tenant_weight(sched *s, const char *tenant)
{
    int32_t t = snap_tenant_find(&s->snap, tenant);

    fair_set_weight(&s->fair, tenant, t >= 0 ? s->snap.tenant[t].weight : 1);
}

static gp_err
load_batch(sched_queue *q, const PGresult *res)
{
    uint64_t now_wall = gp_wall_ms(), now_mono = gp_mono_ms();
    int      n = PQntuples(res), pcol = PQfnumber(res, "preempting");
    int      acol = PQfnumber(res, "avoid");

    q->jobs = calloc((size_t)n + 1, sizeof(*q->jobs));
    q->order = calloc((size_t)n + 1, sizeof(*q->order));
    if (q->jobs == NULL || q->order == NULL)
        return GP_ENOMEM;
    for (int i = 0; i < n; i++) {
        qjob     *qj = &q->jobs[q->n];
        fair_job *f = &q->order[q->n];

        if (sched_row_to_msg(&msg_job_desc, res, i, &qj->job) != GP_EOK) {
            gp_msg_clear(&msg_job_desc, &qj->job);
            continue;                          /* logged; its claim expires */
        }
        /* PostgreSQL's preempt_until, or a preemption of ours whose
         * record this claim did not see yet (no second one for it) */
        qj->preempting = PQgetvalue(res, i, pcol)[0] == 't' ||
                         sched_preempt_running(q->s, qj->job.id);
        load_avoid(qj, PQgetvalue(res, i, acol));
        snprintf(f->job, sizeof(f->job), "%s", qj->job.id);
        snprintf(f->tenant, sizeof(f->tenant), "%s", qj->job.tenant);
        f->priority = qj->job.spec.priority;
        f->gpus = (uint32_t)(qj->job.spec.gpus_per_node * qj->job.spec.nodes);
        f->submitted_ms = now_mono - (now_wall > qj->job.created_ms
                                      ? now_wall - qj->job.created_ms : 0);
        f->data = qj;
        q->n++;
        tenant_weight(q->s, qj->job.tenant);
    }
    fair_order(&q->s->fair, q->order, q->n, now_mono);
    return GP_EOK;
}

static void
claimed(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched_queue *q = arg;

    if (err != GP_EOK || nres != 1) {
        GP_WARN("claim_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        q->busy = false;
        return;
    }
    if (load_batch(q, res[0]) != GP_EOK) {
        pass_end(q);
        return;
    }
    if (q->n > 0)
        GP_DEBUG("place_pass", "jobs=%zu", q->n);
    next_job(q);
}

void
sched_place_run(gp_app *app, void *arg)
{
    sched       *s = arg;
    sched_queue *q = s->queue;
    char         sql[4096], ms[16], lim[16];
    const char  *p[] = {gp_app_instance(app), ms, lim};

    if (!s->fed) {                 /* the first inventory load, retried until done */
        sched_feed_run(app, s);
        return;
    }
    sched_feed_refresh(s);
    usage_refresh(q);
    /* Redis's shards not whole (a start, a Redis loss): every booking would
     * be refused 'stale', and its job given a 'pending' event; the pass
     * waits the rebuild out (epoch.c, under a second: place_test saw a
     * booking refused 450 ms after a start) */
    if (s->epoch.stale_any || s->epoch.busy)
        return;
    if (q->m_snap_nodes != NULL)
        *q->m_snap_nodes = s->snap.nodes;
    /* an empty fleet has nothing to place on and no reason to count:
     * jobs are not claimed (nor their reasons rewritten) until nodes exist */
    if (q->busy || s->dispatching >= s->cfg->dispatch_max || s->snap.nodes == 0)
        return;
    snprintf(ms, sizeof(ms), "%u", s->cfg->claim_ms);
    snprintf(lim, sizeof(lim), "%u", s->cfg->place_batch);
    snprintf(sql, sizeof(sql),
             /* the tenants with pending jobs, by a skip scan of the index */
             "WITH RECURSIVE t(tenant) AS (\n"
             "  (SELECT tenant FROM jobs WHERE state = 'pending' ORDER BY tenant LIMIT 1)\n"
             "  UNION ALL\n"
             "  SELECT (SELECT j2.tenant FROM jobs j2 WHERE j2.state = 'pending'\n"
             "    AND j2.tenant > t.tenant ORDER BY j2.tenant LIMIT 1)\n"
             "  FROM t WHERE t.tenant IS NOT NULL),\n"
             /* each tenant's first place-batch claimable jobs, ranked */
             "r AS (SELECT p.id, p.priority, p.created_ms, row_number() OVER\n"
             "    (PARTITION BY t.tenant, p.priority ORDER BY p.created_ms, p.id) AS rn\n"
             "  FROM t CROSS JOIN LATERAL (SELECT id, priority, created_ms FROM jobs\n"
             "    WHERE state = 'pending' AND tenant = t.tenant\n"
             "      AND (claim_until IS NULL OR claim_until < now())\n"
             "      AND (retry_at IS NULL OR retry_at < now())\n"
             "    ORDER BY priority DESC, created_ms, id LIMIT $3::int) p\n"
             "  WHERE t.tenant IS NOT NULL),\n"
             "c AS (SELECT id FROM jobs WHERE id IN (\n"
             "    SELECT id FROM r ORDER BY priority DESC, rn, created_ms, id LIMIT $3::int)\n"
             "  AND state = 'pending' AND (claim_until IS NULL OR claim_until < now())\n"
             "  AND (retry_at IS NULL OR retry_at < now())\n"
             "  FOR UPDATE SKIP LOCKED)\n"
             "UPDATE jobs j SET claimed_by = $1, claim_until = now() + $2::int * interval '1 ms'\n"
             "FROM c WHERE j.id = c.id\n"
             "RETURNING %s, coalesce(j.preempt_until > now(), false) AS preempting,\n"
             "  coalesce((SELECT string_agg(a.node, ',' ORDER BY a.attempt DESC)\n"
             "    FROM attempts a WHERE a.job_id = j.id\n"
             "    AND a.state IN ('failed_to_start', 'lost')), '') AS avoid",
             sched_job_cols);
    if (gp_db_query(gp_app_db(app), sql, 3, p, 0, claimed, q) == GP_EOK)
        q->busy = true;
}

/* The placement tie-break's seed (place.h): from the instance id, so
 * two instances order equal nodes differently. */
static uint32_t
instance_seed(const char *instance)
{
    return instance != NULL ? gp_fnv1a(instance) : gp_fnv1a("");
}

/* At exit, after the app is freed (no callback of a pass can come). */
void
sched_queue_free(sched *s)
{
    sched_queue *q = s->queue;

    if (q == NULL)
        return;
    for (size_t i = 0; i < q->n; i++)
        gp_msg_clear(&msg_job_desc, &q->jobs[i].job);
    free(q->jobs);
    free(q->order);
    free(q->batch);
    free(q);
    s->queue = NULL;
}

gp_err
sched_queue_start(sched *s)
{
    sched_queue *q = calloc(1, sizeof(*q));
    gp_metrics  *m = gp_app_metrics(s->app);
    static const char *const fails[3] = {"refused", "timeout", "error"};

    if (q == NULL)
        return GP_ENOMEM;
    q->s = s;
    s->queue = q;
    place_params_default(&q->pp);
    q->pp.seed = instance_seed(gp_app_instance(s->app));
    s->m_placements = gp_metrics_counter(m, "gp_scheduler_placements_total", NULL,
                                         "Attempts placed (reserved and written)");
    s->m_unplaced = gp_metrics_counter(m, "gp_scheduler_unplaced_total", NULL,
                                       "Placement tries that left a job pending");
    s->m_preemptions = gp_metrics_counter(m, "gp_scheduler_preemptions_total", NULL,
                                          "Attempts chosen as preemption victims");
    s->m_evacuations = gp_metrics_counter(m, "gp_scheduler_evacuations_total", NULL,
                                          "Draining or quarantined nodes whose interruptible "
                                          "attempts were moved off");
    s->m_claim_lost = gp_metrics_counter(m, "gp_scheduler_placement_conflicts_total", NULL,
                                         "Placements given back: the job was no longer pending "
                                         "or claimed by this instance, or the write failed");
    gp_metrics_counters(m, "gp_scheduler_failed_starts_total", "reason", fails, 3,
                        "Attempts that failed to start, by reason", s->m_failed_start);
    s->m_queue_depth = gp_metrics_gauge(m, "gp_scheduler_queue_depth", NULL,
                                        "Pending jobs (read every usage-ms)");
    /* nodes the snapshot holds, so a bench (or an operator) sees when an
     * instance knows the whole fleet, nodes fetched one by one included */
    q->m_snap_nodes = gp_metrics_gauge(m, "gp_scheduler_snapshot_nodes", NULL,
                                       "Nodes in this instance's snapshot (set every placement pass)");
    s->m_place_latency = gp_metrics_hist(m, "gp_scheduler_placement_latency_seconds", NULL,
                                         "From submit to placed, per placed attempt");
    return GP_EOK;
}
