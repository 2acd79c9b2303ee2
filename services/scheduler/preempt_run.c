/* preempt_run.c -- carrying out a preemption plan (preempt.h chooses).
 *
 * A job that cannot be placed asks preempt_plan for victims: interruptible
 * attempts of strictly lower priority, not already evicting.  If there is
 * a plan:
 *   1. each victim's booking is marked evicting in the snapshot (never
 *      chosen twice while its eviction runs: no cascade);
 *   2. one transaction records it: the preemptor gets preempt_until
 *      (PostgreSQL's clock; no instance starts another preemption for it
 *      meanwhile) and a 'preempting' event; each victim attempt gets
 *      preempted_by, each victim job preemptions + 1 and a 'preempted'
 *      event;
 *   3. every node of each victim attempt gets AttemptSignal checkpoint
 *      now and, after preempt-grace-ms (a timer), stop: the nodes are
 *      those the record returns (all live ranks of the attempt), not only
 *      those the plan named -- a multi-node victim is evicted whole, and
 *      a rank left running would keep GPUs the release below gives away;
 *   4. the end of a preempted attempt ON ONE NODE (end.h: the agent's
 *      end event of that node, or here once that node's agent acked the
 *      stop, sched_end_preempted) marks that node's row 'preempted' and
 *      releases that node's GPUs only; once no row of the attempt is live
 *      any more its job goes back to pending, resuming from its
 *      checkpoint (jobs.progress_ms is sent as resume_ms); a preempted
 *      attempt is not charged against max_attempts.  The GPUs are not
 *      freed but handed over: held in Redis for the preemptor
 *      (reserve.h), so another instance cannot give them to the requeued
 *      victim or other lower-priority work first; the hold lapses if the
 *      preemptor goes elsewhere, and a node that ends after the preemptor
 *      was placed (on another of the victim's nodes) frees its GPUs.
 * The preemptor is then placed by the normal pass when the GPUs free (it
 * is first in order: it has the higher priority). */
#include <ev.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/dbarray.h"
#include "end.h"
#include "gp/log.h"
#include "plan/preempt.h"
#include "scheduler.h"
#include "signal.h"

/* An evacuation's preempted_by; the attempt's reason says which node and
 * why. */
#define EVAC_BY SCHED_EVAC_BY

/* One victim attempt (a multi-node victim is one attempt on several nodes). */
typedef struct victim {
    char     job[GP_MAX_ID + 1], site[GP_MAX_ID + 1];
    uint32_t attempt, nnodes;
    char     node[PLACE_MAX_NODES][GP_MAX_ID + 1];
    bool     ended;
} victim;

typedef struct preemption {
    sched   *s;
    char     job[GP_MAX_ID + 1];
    ev_timer grace;
    uint32_t nv;
    victim   v[PREEMPT_MAX_VICTIMS];
} preemption;

static victim *
victim_of_find(preemption *pr, const preempt_victim *pv)
{
    for (uint32_t i = 0; i < pr->nv; i++)
        if (pr->v[i].attempt == pv->attempt && strcmp(pr->v[i].job, pv->job) == 0)
            return &pr->v[i];
    return NULL;
}

static victim *
victim_of(preemption *pr, const preempt_victim *pv, const char *site)
{
    victim *v = victim_of_find(pr, pv);

    if (v != NULL)
        return v;
    v = &pr->v[pr->nv++];
    snprintf(v->job, sizeof(v->job), "%s", pv->job);
    snprintf(v->site, sizeof(v->site), "%s", site);
    v->attempt = pv->attempt;
    return v;
}

/* ---- signals ------------------------------------------------------------- */

/* Each signal's answer is logged, with its node: the record of what each
 * node of a victim was told.  The node travels with the signal (arg): the
 * stop's ack ends the attempt on that node only. */
typedef struct sig_node {
    char node[GP_MAX_ID + 1];
} sig_node;

static sig_node *
sig_node_new(const char *node)
{
    sig_node *n = malloc(sizeof(*n));

    if (n != NULL)
        snprintf(n->node, sizeof(n->node), "%s", node);
    return n;
}

static void
checkpointed(sched *s, const char *job, uint32_t attempt, gp_err err, void *arg)
{
    sig_node *n = arg;

    (void)s;
    GP_INFO("preempt_signal", "action=checkpoint job=%s attempt=%u node=%s result=%s", job,
            attempt, n->node, gp_err_name(err));
    free(n);
}

static void
stopped(sched *s, const char *job, uint32_t attempt, gp_err err, void *arg)
{
    sig_node *n = arg;

    GP_INFO("preempt_signal", "action=stop job=%s attempt=%u node=%s result=%s", job, attempt,
            n->node, gp_err_name(err));
    /* the agent is stopping it there: that node's GPUs go back now (a
     * failed stop leaves it to that node's end event or lease) */
    if (err == GP_EOK)
        sched_end_preempted(s, job, attempt, n->node);
    free(n);
}

static void
signal_victims(preemption *pr, int action, sched_signal_cb *cb)
{
    for (uint32_t i = 0; i < pr->nv; i++)
        for (uint32_t k = 0; k < pr->v[i].nnodes; k++) {
            sig_node *n = sig_node_new(pr->v[i].node[k]);

            if (n != NULL)     /* without memory: that node's lease kill list stops it */
                sched_signal(pr->s, pr->v[i].site, pr->v[i].node[k], pr->v[i].job,
                             pr->v[i].attempt, action, cb, n);
        }
}

static void
grace_over(struct ev_loop *loop, ev_timer *w, int revents)
{
    preemption *pr = w->data;

    (void)loop, (void)revents;
    signal_victims(pr, MSG_ATTEMPT_SIGNAL_ACTION_STOP, stopped);
    GP_INFO("preemption_stop", "job=%s victims=%u", pr->job, pr->nv);
    free(pr);
}

static void
signal_all(preemption *pr)
{
    signal_victims(pr, MSG_ATTEMPT_SIGNAL_ACTION_CHECKPOINT, checkpointed);
    ev_timer_init(&pr->grace, grace_over, pr->s->cfg->preempt_grace_ms / 1000.0, 0);
    pr->grace.data = pr;
    ev_timer_start(gp_app_loop(pr->s->app), &pr->grace);
}

/* ---- this instance's preemptors in flight ---------------------------------- */

/* The preemption runs for the grace plus a stop's round: not again before. */
static uint32_t
preempt_ttl_ms(const sched *s)
{
    return s->cfg->preempt_grace_ms + 30000;
}

/* The live slot of job, or NULL. */
static sched_preemptor *
preemptor_find(sched *s, const char *job)
{
    uint64_t now = gp_mono_ms();

    for (uint32_t i = 0; i < SCHED_PREEMPTORS; i++)
        if (s->preemptors[i].until_mono > now && strcmp(s->preemptors[i].job, job) == 0)
            return &s->preemptors[i];
    return NULL;
}

/* job's slot, else the one that lapses first (a lapsed one: at once). */
static void
preemptor_note(sched *s, const char *job)
{
    sched_preemptor *slot = preemptor_find(s, job);

    if (slot == NULL) {
        slot = &s->preemptors[0];
        for (uint32_t i = 1; i < SCHED_PREEMPTORS; i++)
            if (s->preemptors[i].until_mono < slot->until_mono)
                slot = &s->preemptors[i];
    }
    snprintf(slot->job, sizeof(slot->job), "%s", job);
    slot->until_mono = gp_mono_ms() + preempt_ttl_ms(s);
}

static void
preemptor_forget(sched *s, const char *job)
{
    sched_preemptor *p = preemptor_find(s, job);

    if (p != NULL)
        p->until_mono = 0;
}

bool
sched_preempt_running(sched *s, const char *job)
{
    return preemptor_find(s, job) != NULL;
}

/* ---- the record ---------------------------------------------------------- */

static const char mark_hi_sql[] =
    "WITH u AS (UPDATE jobs SET preempt_until = now() + $2::int * interval '1 ms',\n"
    "    event_seq = event_seq + 1, updated_ms = $3::bigint\n"
    "  WHERE id = $1 AND state = 'pending' RETURNING id, event_seq, tenant)\n"
    "INSERT INTO job_events (job_id, seq, event, state, reason, at_ms)\n"
    "  SELECT id, event_seq, 'preempting', 'pending', $4, $3::bigint FROM u\n"
    "  RETURNING job_id, seq, event, state, attempt, site, node, reason, exit_code, at_ms,\n"
    "    (SELECT tenant FROM jobs WHERE id = job_id) AS tenant";
static const char mark_victims_sql[] =
    "WITH v AS (SELECT * FROM unnest($2::text[], $3::int[]) AS v(job, att)),\n"
    "a AS (UPDATE attempts a SET preempted_by = $1 FROM v\n"
    "  WHERE a.job_id = v.job AND a.attempt = v.att AND a.state IN ('reserved','starting','running')\n"
    "  RETURNING a.job_id, a.attempt, a.site, a.node, a.rank),\n"
    "j AS (UPDATE jobs SET preemptions = preemptions + 1, event_seq = event_seq + 1,\n"
    "    updated_ms = $4::bigint WHERE id IN (SELECT job_id FROM a WHERE rank = 0)\n"
    "  RETURNING id, event_seq, state)\n"
    "INSERT INTO job_events (job_id, seq, event, state, attempt, site, node, reason, at_ms)\n"
    "  SELECT j.id, j.event_seq, 'preempted', j.state, a.attempt, a.site, a.node,\n"
    "    'preempted by ' || $1, $4::bigint FROM j JOIN a ON a.job_id = j.id AND a.rank = 0\n"
    "  RETURNING job_id, seq, event, state, attempt, site, node, reason, exit_code, at_ms,\n"
    "    (SELECT tenant FROM jobs WHERE id = job_id) AS tenant";
/* every live node of each victim attempt, whatever nodes the plan named */
static const char victim_nodes_sql[] =
    "SELECT a.job_id, a.attempt, a.site, a.node FROM attempts a\n"
    "  JOIN unnest($2::text[], $3::int[]) AS v(job, att) ON a.job_id = v.job AND a.attempt = v.att\n"
    "WHERE a.preempted_by = $1 AND a.state IN ('reserved','starting','running')\n"
    "ORDER BY a.job_id, a.attempt, a.rank";

/* The victims' nodes become those the record returned: the plan names a
 * multi-node victim only on the node(s) it evicts it from, but the attempt
 * is stopped on all of them.  Nodes the plan did not name are marked
 * evicting too (no other plan counts on that booking meanwhile). */
static void
victim_nodes(preemption *pr, const PGresult *res)
{
    for (uint32_t i = 0; i < pr->nv; i++)
        pr->v[i].nnodes = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        const char *job = PQgetvalue(res, r, 0), *node = PQgetvalue(res, r, 3);
        uint32_t    att = (uint32_t)strtoul(PQgetvalue(res, r, 1), NULL, 10);

        for (uint32_t i = 0; i < pr->nv; i++) {
            victim *v = &pr->v[i];

            if (v->attempt != att || strcmp(v->job, job) != 0 || v->nnodes >= PLACE_MAX_NODES)
                continue;
            snprintf(v->site, sizeof(v->site), "%s", PQgetvalue(res, r, 2));
            snprintf(v->node[v->nnodes++], sizeof(v->node[0]), "%s", node);
            snap_mark_evicting(&pr->s->snap, node, job, att);
        }
    }
}

static void
recorded(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    preemption *pr = arg;

    if (err != GP_EOK || nres != 3 || PQntuples(res[0]) != 1) {
        /* not recorded: no signal goes out; the marks expire with the
         * snapshot's next refresh of those bookings (their attempt ends) */
        GP_WARN("preemption_write_failed", "job=%s code=%s detail=\"%s\"", pr->job,
                gp_err_name(err), detail);
        preemptor_forget(pr->s, pr->job);
        free(pr);
        return;
    }
    sched_event_rows(pr->s, NULL, res[0]);
    sched_event_rows(pr->s, NULL, res[1]);
    victim_nodes(pr, res[2]);
    signal_all(pr);
}

static gp_err
record(preemption *pr)
{
    gp_buf      jobs, atts;
    char        ttl[16], now[24], why[128], a[16];
    gp_db_tx   *tx;
    gp_err      rc;

    gp_buf_init(&jobs, 8192);
    gp_buf_init(&atts, 2048);
    rc = gp_pgarr_begin(&jobs);
    if (rc == GP_EOK)
        rc = gp_pgarr_begin(&atts);
    for (uint32_t i = 0; rc == GP_EOK && i < pr->nv; i++) {
        snprintf(a, sizeof(a), "%u", pr->v[i].attempt);
        rc = gp_pgarr_add(&jobs, pr->v[i].job);
        if (rc == GP_EOK)
            rc = gp_pgarr_add(&atts, a);
    }
    if (rc == GP_EOK)
        rc = gp_pgarr_end(&jobs);
    if (rc == GP_EOK)
        rc = gp_pgarr_end(&atts);
    snprintf(ttl, sizeof(ttl), "%u", preempt_ttl_ms(pr->s));
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    snprintf(why, sizeof(why), "evicting %u lower-priority attempt%s", pr->nv,
             pr->nv == 1 ? "" : "s");
    const char *hi[] = {pr->job, ttl, now, why};
    const char *vv[] = {pr->job, jobs.p, atts.p, now};

    if (rc == GP_EOK) {
        tx = gp_db_tx_new(gp_app_db(pr->s->app));
        gp_db_tx_add(tx, mark_hi_sql, 4, hi);
        gp_db_tx_add(tx, mark_victims_sql, 4, vv);
        gp_db_tx_add(tx, victim_nodes_sql, 3, vv);
        rc = gp_db_tx_run(tx, 0, recorded, pr);
    }
    gp_buf_fini(&jobs);
    gp_buf_fini(&atts);
    return rc;
}

static preemption *
plan_to_run(sched *s, const msg_job *job, const preempt_result *r)
{
    preemption *pr = calloc(1, sizeof(*pr));

    if (pr == NULL)
        return NULL;
    pr->s = s;
    snprintf(pr->job, sizeof(pr->job), "%s", job->id);
    for (uint32_t i = 0; i < r->nvictims; i++) {
        const preempt_victim *pv = &r->victim[i];
        victim               *v = victim_of(pr, pv, r->target.site);

        if (v->nnodes < PLACE_MAX_NODES)
            snprintf(v->node[v->nnodes++], sizeof(v->node[0]), "%s", pv->node);
        snap_mark_evicting(&s->snap, pv->node, pv->job, pv->attempt);
        sched_count(s->m_preemptions);
    }
    return pr;
}

bool
sched_preempt_try(sched *s, const msg_job *job, const place_params *pp)
{
    preempt_result *r = calloc(1, sizeof(*r));
    preemption     *pr = NULL;
    bool            ok = false;

    if (r == NULL)
        return false;
    if (preempt_plan(&s->snap, job->tenant, &job->spec, pp, r) == PREEMPT_OK && r->nvictims > 0)
        pr = plan_to_run(s, job, r);
    if (pr != NULL) {
        GP_INFO("preemption_planned", "job=%s site=%s victims=%u gpus=%u", job->id,
                r->target.site, pr->nv, r->cost.gpus);
        ok = record(pr) == GP_EOK;
        if (ok)
            preemptor_note(s, job->id);
        else
            free(pr);
    }
    free(r);
    return ok;
}

/* ---- evacuation of a draining or quarantined node ----------------------- */

/* The interruptible attempts on a node that takes no new work (drained by
 * an operator, quarantined by its faults) move elsewhere from a fresh
 * checkpoint: the preemption above with the node's evacuation in place of
 * a preemptor (checkpoint now, stop after preempt-grace-ms, the job back
 * to pending resuming from it, not charged against max_attempts, the GPUs
 * released).  Work that cannot be interrupted runs to its end there.
 * Instances (kind instance: they never end by themselves) move too, after
 * notice on a draining node: the first pass that sees one marks when it
 * moves (attempts.evacuate_at_ms, instance-drain-notice-ms on, by
 * PostgreSQL's clock: the one all scheduler instances share) and tells its
 * tenant (a preempting event); a pass at or after that time moves it.
 * A quarantined node's instances move at once.
 * Every scheduler instance hears the node's state, and each reconcile-ms
 * asks again (sched_evacuate_sweep); the job rows are locked first (the
 * order every writer keeps) and only attempts nobody marked yet are
 * marked, so one instance evacuates each. */
#define DB_NOW_MS "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
#define EVAC_WHO "(j.interruptible OR (j.kind = 'instance' AND a.evacuate_at_ms <= " DB_NOW_MS "))"
static const char evac_lock_sql[] =
    "SELECT j.id FROM jobs j WHERE j.id IN (SELECT a.job_id FROM attempts a JOIN jobs j\n"
    "  ON j.id = a.job_id WHERE a.node = $1 AND a.state IN ('reserved','starting','running')\n"
    "    AND a.preempted_by IS NULL AND (j.interruptible OR j.kind = 'instance'))\n"
    "  ORDER BY j.id FOR UPDATE OF j";
static const char evac_notice_sql[] =
    "WITH n AS (UPDATE attempts a SET evacuate_at_ms = " DB_NOW_MS " + $4::bigint FROM jobs j\n"
    "  WHERE a.node = $1 AND j.id = a.job_id AND j.kind = 'instance' AND a.rank = 0\n"
    "    AND a.state IN ('reserved','starting','running') AND a.preempted_by IS NULL\n"
    "    AND a.evacuate_at_ms IS NULL\n"
    "  RETURNING a.job_id, a.attempt, a.site, a.node, j.tenant, j.state)\n"
    "SELECT n.tenant, e.* FROM n CROSS JOIN LATERAL sched_event_add(n.job_id, 'preempting',\n"
    "  n.state, n.attempt, n.site, n.node, 'notice: ' || $2 || '; the instance moves in ' ||\n"
    "  ($4::bigint / 1000) || ' s', NULL, $3::bigint) e WHERE $4::bigint > 0";
static const char evac_mark_sql[] =
    "WITH v AS (SELECT DISTINCT a.job_id, a.attempt FROM attempts a JOIN jobs j ON j.id = a.job_id\n"
    "  WHERE a.node = $1 AND " EVAC_WHO " AND a.state IN ('reserved','starting','running')\n"
    "    AND a.preempted_by IS NULL),\n"
    "a AS (UPDATE attempts a SET preempted_by = '" EVAC_BY "', reason = $2 FROM v\n"
    "  WHERE a.job_id = v.job_id AND a.attempt = v.attempt\n"
    "    AND a.state IN ('reserved','starting','running') AND a.preempted_by IS NULL\n"
    "  RETURNING a.job_id, a.attempt, a.site, a.node, a.rank),\n"
    "j AS (UPDATE jobs SET preemptions = preemptions + 1, event_seq = event_seq + 1,\n"
    "    updated_ms = $3::bigint WHERE id IN (SELECT job_id FROM a WHERE rank = 0)\n"
    "  RETURNING id, event_seq, state)\n"
    "INSERT INTO job_events (job_id, seq, event, state, attempt, site, node, reason, at_ms)\n"
    "  SELECT j.id, j.event_seq, 'preempted', j.state, a.attempt, a.site, a.node,\n"
    "    'preempted: ' || $2, $3::bigint FROM j JOIN a ON a.job_id = j.id AND a.rank = 0\n"
    "  RETURNING job_id, seq, event, state, attempt, site, node, reason, exit_code, at_ms,\n"
    "    (SELECT tenant FROM jobs WHERE id = job_id) AS tenant";
static const char evac_nodes_sql[] =
    "SELECT job_id, attempt, site, node FROM attempts WHERE preempted_by = '" EVAC_BY "'\n"
    "  AND reason = $2 AND state IN ('reserved','starting','running') AND $1 <> ''\n"
    "  ORDER BY job_id, attempt, rank";

static void
evac_recorded(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    preemption *pr = arg;

    if (err != GP_EOK || nres != 4) {
        GP_WARN("evacuation_write_failed", "node=%s code=%s detail=\"%s\"", pr->job,
                gp_err_name(err), detail);
        free(pr);
        return;
    }
    if (PQntuples(res[1]) > 0)
        GP_INFO("evacuation_notice", "node=%s instances=%d notice_ms=%u", pr->job,
                PQntuples(res[1]), pr->s->cfg->instance_drain_notice_ms);
    sched_event_rows(pr->s, NULL, res[1]);
    sched_event_rows(pr->s, NULL, res[2]);
    if (PQntuples(res[2]) == 0) {          /* nothing to move now, or marked by another */
        free(pr);
        return;
    }
    for (int r = 0; r < PQntuples(res[3]); r++) {
        preempt_victim pv = {.attempt = (uint32_t)strtoul(PQgetvalue(res[3], r, 1), NULL, 10)};
        victim        *v;

        snprintf(pv.job, sizeof(pv.job), "%s", PQgetvalue(res[3], r, 0));
        if (pr->nv >= PREEMPT_MAX_VICTIMS && victim_of_find(pr, &pv) == NULL)
            break;
        v = victim_of(pr, &pv, PQgetvalue(res[3], r, 2));
        if (v->nnodes < PLACE_MAX_NODES)
            snprintf(v->node[v->nnodes++], sizeof(v->node[0]), "%s", PQgetvalue(res[3], r, 3));
        snap_mark_evicting(&pr->s->snap, PQgetvalue(res[3], r, 3), pv.job, pv.attempt);
    }
    GP_INFO("evacuation_started", "node=%s attempts=%u grace_ms=%u", pr->job, pr->nv,
            pr->s->cfg->preempt_grace_ms);
    sched_count(pr->s->m_evacuations);
    signal_all(pr);
}

void
sched_evacuate(sched *s, const char *node, const char *state)
{
    preemption *pr = calloc(1, sizeof(*pr));
    char        by[GP_MAX_ID + 64], now[24], notice[16];
    const char *v[] = {node, by, now, notice};
    gp_db_tx   *tx;

    if (pr == NULL)
        return;
    snprintf(notice, sizeof(notice), "%u",
             strcmp(state, "draining") == 0 ? s->cfg->instance_drain_notice_ms : 0);
    pr->s = s;
    snprintf(pr->job, sizeof(pr->job), "%s", node);
    snprintf(by, sizeof(by), "evacuation of %s (%s)", node, state);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    tx = gp_db_tx_new(gp_app_db(s->app));
    gp_db_tx_add(tx, evac_lock_sql, 1, v);
    gp_db_tx_add(tx, evac_notice_sql, 4, v);
    gp_db_tx_add(tx, evac_mark_sql, 3, v);
    gp_db_tx_add(tx, evac_nodes_sql, 2, v);
    if (gp_db_tx_run(tx, 0, evac_recorded, pr) != GP_EOK)
        evac_recorded(pr, GP_EUNAVAIL, NULL, 0, "not sent");
}
