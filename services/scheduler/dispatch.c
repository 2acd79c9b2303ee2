/* dispatch.c -- a committed attempt goes to its nodes: RunAttempt to each
 * (GP_OP_NODE_RUN, deadline dispatch-timeout-ms).  An AttemptAck moves
 * that node's attempt row to 'starting' (the agent's 'started' event makes
 * it 'running': the attempt-event code).  A refusal or no answer on ANY
 * node means the whole attempt failed to start: the nodes that did start
 * get a stop signal, every row becomes 'failed_to_start', the GPUs are
 * released (Redis and the snapshot), the failing node's reliability drops
 * (snap_node_fault: placement's reliability score, so the retry goes
 * elsewhere), and the attempt ends through end.h: a node that refused it
 * because of the job itself (INVAL, INTERNAL: its command could not
 * start) uses one of the job's attempts; a refusal of the node's own or no
 * answer is a platform fault, not charged.
 *
 * No answer is not a refusal: a RunAttempt that timed out may have
 * started on its node, and freeing its GPUs and requeueing its job at once
 * ran two attempts of the job, and two jobs on one GPU, until the node's
 * next renewal killed the old one (sched_fleet_test saw 6.5 s of it).  So
 * when any node of the attempt may have it, the attempt is retired there
 * (fence.c: its renewals kill it, its GPUs stay booked) and its rows end
 * and its job is requeued only once its lease has surely run out on every
 * such node; a stop signal goes to each of them meanwhile.  The rounds
 * waiting for that are on s->retiring, re-tried by sched_retire_sweep.
 *
 * At most dispatch-max attempts are in flight (s->dispatching); the
 * placement pass waits above it (a retiring round no longer counts). */
#include <ev.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "end.h"
#include "gp/dbarray.h"
#include "gp/imageref.h"
#include "gp/log.h"
#include "scheduler.h"
#include "signal.h"

enum { FAIL_NONE = -1, FAIL_REFUSED = 0, FAIL_TIMEOUT = 1, FAIL_ERROR = 2 };

typedef struct dround dround;
typedef struct dnode {
    dround  *d;
    uint32_t rank;
} dnode;

struct dround {
    sched        *s;
    sched_placed *p;
    unsigned      pending;
    bool          acked[8];
    bool          sent[8];       /* the RunAttempt left: no answer does not say it did not start */
    bool          unsure[8];     /* ... and no answer came */
    bool          retired[8];    /* its reservation on the node removed past the fence */
    dnode         dn[8];
    int           fail;
    bool          own;           /* the node refused it because of the job itself */
    char          why[256];
    char          bad_node[GP_MAX_ID + 1];
    /* retiring (see above) */
    bool          retiring, busy;
    uint32_t      wait_ms;
    uint64_t      retry_at;      /* monotonic ms */
    dround       *next;
    msg_attempt_secret *sec;     /* the secrets the job names, decrypted (secrets.c) */
    unsigned      nsec;
};

/* ---- failed to start ------------------------------------------------------- */

static void
round_free(dround *d)
{
    if (!d->retiring)
        d->s->dispatching--;
    sched_secrets_scrub(d->sec, d->nsec);
    gp_msg_clear(&msg_job_spec_desc, &d->p->spec);
    free(d->p);
    free(d);
}

static void
fts_written(void *arg, gp_err err, const char *detail)
{
    dround *d = arg;

    if (err != GP_EOK)        /* the reconcile ends it later as never dispatched */
        GP_WARN("failed_start_write_failed", "job=%s attempt=%u code=%s detail=\"%s\"", d->p->job,
                d->p->attempt, gp_err_name(err), detail);
    round_free(d);
}

/* Every node of the attempt ends (end.h releases their GPUs). */
static void
write_failed_start(dround *d)
{
    sched_placed *p = d->p;

    if (sched_end_failed_start(d->s, p->job, p->attempt, d->bad_node, d->own, d->why, fts_written,
                               d) != GP_EOK)
        fts_written(d, GP_EUNAVAIL, "not sent");
}

/* ---- retiring an attempt its nodes may run ----------------------------------- */

#define RETIRE_RETRY_MS 1000        /* after Redis failed to answer */

static void retire_all(dround *d);

static void
retire_unlink(dround *d)
{
    for (dround **pp = &d->s->retiring; *pp != NULL; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            return;
        }
}

static void
retire_step(dround *d)
{
    if (--d->pending > 0)
        return;
    d->busy = false;
    for (uint32_t i = 0; i < d->p->nnodes; i++)
        if (!d->retired[i]) {
            d->retry_at = gp_mono_ms() + d->wait_ms + 20;
            return;
        }
    retire_unlink(d);
    GP_INFO("attempt_retired", "job=%s attempt=%u", d->p->job, d->p->attempt);
    write_failed_start(d);
}

static void
retire_answered(void *arg, gp_err err, uint32_t wait_ms)
{
    dnode  *dn = arg;
    dround *d = dn->d;

    if (err == GP_EOK && wait_ms == 0)
        d->retired[dn->rank] = true;
    else if ((err != GP_EOK ? RETIRE_RETRY_MS : wait_ms) > d->wait_ms)
        d->wait_ms = err != GP_EOK ? RETIRE_RETRY_MS : wait_ms;
    retire_step(d);
}

/* Every node of the attempt, so none of its GPUs is freed before the
 * rest: the rows end together and the job goes back once. */
static void
retire_all(dround *d)
{
    sched_placed *p = d->p;

    d->busy = true;
    d->wait_ms = 0;
    d->pending = 1;
    for (uint32_t i = 0; i < p->nnodes; i++) {
        if (d->retired[i])
            continue;
        d->pending++;
        if (sched_fence_retire(d->s, p->site, p->node[i], p->job, p->attempt, retire_answered,
                               &d->dn[i]) != GP_EOK)
            retire_answered(&d->dn[i], GP_EUNAVAIL, 0);
    }
    retire_step(d);
}

void
sched_retire_sweep(gp_app *app, void *arg)
{
    sched   *s = arg;
    uint64_t now = gp_mono_ms();
    dround  *next;

    (void)app;
    for (dround *d = s->retiring; d != NULL; d = next) {
        next = d->next;
        if (!d->busy && now >= d->retry_at)
            retire_all(d);
    }
}

void
sched_dispatch_free(sched *s)
{
    while (s->retiring != NULL) {
        dround *d = s->retiring;

        s->retiring = d->next;
        sched_secrets_scrub(d->sec, d->nsec);
        gp_msg_clear(&msg_job_spec_desc, &d->p->spec);
        free(d->p);
        free(d);
    }
}

static void
failed_to_start(dround *d)
{
    sched_placed *p = d->p;
    bool          unsure = false;

    GP_WARN("attempt_failed_to_start", "job=%s attempt=%u node=%s why=\"%s\"", p->job, p->attempt,
            d->bad_node, d->why);
    sched_count(d->s->m_failed_start[d->fail]);
    snap_node_fault(&d->s->snap, d->bad_node, gp_mono_ms());
    for (uint32_t i = 0; i < p->nnodes; i++) {
        if (d->acked[i] || d->unsure[i])
            sched_signal(d->s, p->site, p->node[i], p->job, p->attempt,
                         MSG_ATTEMPT_SIGNAL_ACTION_STOP, NULL, NULL);
        unsure = unsure || d->unsure[i];
    }
    if (!unsure) {
        write_failed_start(d);
        return;
    }
    sched_secrets_scrub(d->sec, d->nsec);   /* nothing more is sent: no need left */
    d->sec = NULL, d->nsec = 0;
    GP_WARN("attempt_retiring", "job=%s attempt=%u why=\"a node may run it unanswered: its GPUs "
            "stay booked and its job waits until its lease has surely run out there\"",
            p->job, p->attempt);
    d->retiring = true;
    d->s->dispatching--;
    d->next = d->s->retiring;
    d->s->retiring = d;
    retire_all(d);
}

/* ---- RunAttempt ------------------------------------------------------------ */

/* An acked RunAttempt moves its attempt row to 'starting' (started_ms: the
 * ack's time).  The acks of one wake-up of the loop (an ev_prepare flushes
 * them) are written by one UPDATE: one statement per dispatch was a round
 * trip of its own for every job (place_bench).  A row locked meanwhile is
 * skipped, not waited for: its lock holder is the attempt's own event
 * (moving it past 'starting' anyway), and waiting chained the batch to the
 * events' batches.  A lost mark costs nothing the attempt's 'started'
 * event does not write anyway. */
#define START_BATCH 256

static struct {
    sched     *s;
    ev_prepare prep;
    bool       armed;
    unsigned   n;
    char       job[START_BATCH][GP_MAX_ID + 1];
    uint32_t   attempt[START_BATCH], rank[START_BATCH];
} st;

static void
starting_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    (void)arg, (void)res, (void)nres;
    if (err != GP_EOK)
        GP_WARN("attempt_starting_write_failed", "code=%s detail=\"%s\"", gp_err_name(err),
                detail);
}

static void
starting_flush(void)
{
    gp_buf arr[3];
    char   num[16], now[24];
    gp_err rc = GP_EOK;

    if (st.armed)
        ev_prepare_stop(gp_app_loop(st.s->app), &st.prep);
    st.armed = false;
    if (st.n == 0)
        return;
    for (int k = 0; k < 3; k++) {
        gp_buf_init(&arr[k], START_BATCH * (GP_MAX_ID + 4) + 8);
        if (rc == GP_EOK)
            rc = gp_pgarr_begin(&arr[k]);
    }
    for (unsigned i = 0; i < st.n && rc == GP_EOK; i++) {
        rc = gp_pgarr_add(&arr[0], st.job[i]);
        snprintf(num, sizeof(num), "%u", st.attempt[i]);
        if (rc == GP_EOK)
            rc = gp_pgarr_add(&arr[1], num);
        snprintf(num, sizeof(num), "%u", st.rank[i]);
        if (rc == GP_EOK)
            rc = gp_pgarr_add(&arr[2], num);
    }
    for (int k = 0; k < 3 && rc == GP_EOK; k++)
        rc = gp_pgarr_end(&arr[k]);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    const char *v[] = {arr[0].p, arr[1].p, arr[2].p, now};

    if (rc == GP_EOK)
        rc = gp_db_query(gp_app_db(st.s->app),
                         "UPDATE attempts a SET state = 'starting',\n"
                         "  started_ms = coalesce(a.started_ms, $4::bigint)\n"
                         "FROM (SELECT x.job_id, x.attempt, x.rank FROM attempts x\n"
                         "  JOIN unnest($1::text[], $2::int[], $3::int[]) AS m(job, att, rank)\n"
                         "    ON x.job_id = m.job AND x.attempt = m.att AND x.rank = m.rank\n"
                         "  WHERE x.state = 'reserved' FOR UPDATE OF x SKIP LOCKED) s\n"
                         "WHERE a.job_id = s.job_id AND a.attempt = s.attempt AND a.rank = s.rank",
                         4, v, 0, starting_written, NULL);
    if (rc != GP_EOK)
        starting_written(NULL, rc, NULL, 0, "not sent");
    for (int k = 0; k < 3; k++)
        gp_buf_fini(&arr[k]);
    st.n = 0;
}

static void
starting_due(struct ev_loop *loop, ev_prepare *w, int revents)
{
    (void)loop, (void)w, (void)revents;
    starting_flush();
}

static void
mark_starting(dround *d, uint32_t rank)
{
    st.s = d->s;
    if (st.n == START_BATCH)
        starting_flush();
    snprintf(st.job[st.n], sizeof(st.job[0]), "%s", d->p->job);
    st.attempt[st.n] = d->p->attempt;
    st.rank[st.n++] = rank;
    if (!st.armed) {
        ev_prepare_init(&st.prep, starting_due);
        ev_prepare_start(gp_app_loop(d->s->app), &st.prep);
        st.armed = true;
    }
}

static void
ran(void *arg, gp_err err, bool transport, const void *reply, const char *detail)
{
    dnode  *dn = arg;
    dround *d = dn->d;

    (void)reply;
    if (err == GP_EOK) {
        d->acked[dn->rank] = true;
        mark_starting(d, dn->rank);
    } else if (transport && d->sent[dn->rank] && err != GP_ENOROUTE) {
        d->unsure[dn->rank] = true;    /* NOROUTE: no agent took it; a timeout says nothing */
    }
    if (err != GP_EOK && d->fail == FAIL_NONE) {
        d->fail = !transport ? FAIL_REFUSED
                : err == GP_ETIMEOUT || err == GP_ENOROUTE ? FAIL_TIMEOUT : FAIL_ERROR;
        snprintf(d->why, sizeof(d->why), "failed to start on %s: %s %s", d->p->node[dn->rank],
                 gp_err_name(err), detail);
        snprintf(d->bad_node, sizeof(d->bad_node), "%s", d->p->node[dn->rank]);
        /* the agent refuses what the job asks (INVAL) or what it cannot
         * start (INTERNAL: the command does not exec); UNAVAIL and
         * CONFLICT say the node cannot take it now */
        d->own = !transport && (err == GP_EINVAL || err == GP_EINTERNAL);
    }
    if (--d->pending > 0)
        return;
    if (d->fail == FAIL_NONE)
        round_free(d);
    else
        failed_to_start(d);
}

/* The spec's image, pinned to the digest the job's first attempt ran
 * (repo@sha256:...): a moved job runs the same bits, whatever its tag
 * points to now. */
static void
pin_image(char *out, size_t n, const sched_placed *p)
{
    gp_image_ref r;
    char         why[160];

    if (p->image_digest[0] == '\0' || p->spec.image[0] == '\0' ||
        gp_image_ref_parse(p->spec.image, &r, why, sizeof(why)) != GP_EOK) {
        snprintf(out, n, "%s", p->spec.image);
        return;
    }
    size_t k = strlen(r.repo), dl = strlen(p->image_digest);

    if (k + 1 + dl >= n) {            /* too long to pin: runs the tag (and says so) */
        GP_WARN("image_not_pinned", "job=%s image=%s digest=%s", p->job, p->spec.image,
                p->image_digest);
        snprintf(out, n, "%s", p->spec.image);
        return;
    }
    memcpy(out, r.repo, k);
    out[k] = '@';
    memcpy(out + k + 1, p->image_digest, dl + 1);
}

/* "shared:" is the job's own folder of the shared store; an object store
 * is the tenant's own URI. */
static void
checkpoint_uri(char *out, size_t n, const scheduler_cfg *cfg, const sched_placed *p)
{
    if (strcmp(p->spec.checkpoint_uri, "shared:") == 0 && cfg->checkpoint_shared_root[0] != '\0')
        snprintf(out, n, "file://%.100s/%.63s/%.63s", cfg->checkpoint_shared_root, p->tenant,
                 p->job);
    else if (strcmp(p->spec.checkpoint_uri, "shared:") != 0)
        snprintf(out, n, "%s", p->spec.checkpoint_uri);
    else
        out[0] = '\0';
}

static gp_err
send_run_now(dround *d, uint32_t rank)
{
    sched_placed   *p = d->p;
    msg_run_attempt m = {.attempt = p->attempt, .lease_ms = d->s->cfg->attempt_lease_ms};
    int32_t         g[64];
    uint32_t        ng = 0;
    char            subj[GP_MAX_SUBJECT];
    gp_err          rc;

    for (int i = 0; i <= SCHED_RES_MAX_GPU && ng < MSG_RUN_ATTEMPT_GPUS_MAXITEMS; i++)
        if (p->gpus[rank] & (1ull << i))
            g[ng++] = i;
    snprintf(m.job_id, sizeof(m.job_id), "%s", p->job);
    snprintf(m.command, sizeof(m.command), "%s", p->spec.command);
    snprintf(m.checkpoint_dir, sizeof(m.checkpoint_dir), "%s/%s", d->s->cfg->checkpoint_root,
             p->job);
    pin_image(m.image, sizeof(m.image), p);
    m.args = p->spec.args;                /* shared for the encode, owned by the spec */
    m.env = p->spec.env;
    m.resources = p->spec.resources;
    m.ports = p->spec.ports;
    m.kind = p->spec.kind == MSG_JOB_SPEC_KIND_INSTANCE ? MSG_RUN_ATTEMPT_KIND_INSTANCE
                                                        : MSG_RUN_ATTEMPT_KIND_JOB;
    m.gpus = (gp_arr){.v = g, .n = ng};
    m.resume_ms = p->resume_ms;
    if (p->has_step) {
        m.resume_step = p->resume_step;
        GP_SET_HAS(&m, MSG_RUN_ATTEMPT__RESUME_STEP);
        snprintf(m.resume_id, sizeof(m.resume_id), "%s", p->resume_id);
    }
    checkpoint_uri(m.checkpoint_uri, sizeof(m.checkpoint_uri), d->s->cfg, p);
    m.secrets = (gp_arr){.v = d->sec, .n = d->nsec};   /* shared for the encode */
    rc = gp_op_subjectf(GP_OP_NODE_RUN, subj, sizeof(subj), p->site, p->node[rank]);
    if (rc == GP_EOK)
        rc = gp_call2(gp_app_bus(d->s->app), subj, &msg_run_attempt_desc, &m,
                      &msg_attempt_ack_desc, d->s->cfg->dispatch_timeout_ms, ran, &d->dn[rank]);
    d->sent[rank] = rc == GP_EOK;
    return rc;
}

/* The node's grant is stamped first (fence.c): the agent may start the
 * attempt until the call's deadline, and its lease runs from then, so a
 * replacement of this node's attempts waits for that too.  A stamp refused
 * (the attempt's reservation was lost with Redis's data, or the shard is
 * not rebuilt yet) sends nothing: a failed start, the platform's. */
static void
stamped(void *arg, gp_err err)
{
    dnode *dn = arg;

    if (err == GP_EOK)
        err = send_run_now(dn->d, dn->rank);
    if (err != GP_EOK)
        ran(dn, err, true, NULL, "not sent (grant not stamped)");
}

static gp_err
send_run(dround *d, uint32_t rank)
{
    d->dn[rank] = (dnode){d, rank};
    return sched_fence_stamp(d->s, d->p->site, d->p->node[rank], d->p->job, d->p->attempt,
                             d->s->cfg->dispatch_timeout_ms, stamped, &d->dn[rank]);
}

static void
send_all(dround *d)
{
    sched_placed *p = d->p;

    d->pending = p->nnodes + 1;           /* +1: held while sending, so no early finish */
    for (uint32_t i = 0; i < p->nnodes; i++) {
        gp_err rc = send_run(d, i);

        if (rc != GP_EOK) {
            d->dn[i] = (dnode){d, i};
            ran(&d->dn[i], rc, true, NULL, "not sent");
        }
    }
    /* the +1 above: replies never arrive inside the call, so this only
     * finishes a round whose sends all failed at once */
    if (--d->pending == 0) {
        if (d->fail == FAIL_NONE)
            round_free(d);
        else
            failed_to_start(d);
    }
}

/* The job's secrets, decrypted (secrets.c), before any node is sent a
 * thing.  One that no longer exists (the tenant deleted it) is the job's
 * own failure to start; one that cannot be read (the database, a changed
 * key) is the platform's.  No node is blamed: none was asked. */
static void
secrets_resolved(void *arg, gp_err err, const char *why, msg_attempt_secret *v, unsigned n)
{
    dround *d = arg;

    if (err == GP_EOK) {
        d->sec = v;
        d->nsec = n;
        send_all(d);
        return;
    }
    GP_WARN("attempt_failed_to_start", "job=%s attempt=%u why=\"%s\"", d->p->job, d->p->attempt,
            why);
    sched_count(d->s->m_failed_start[FAIL_ERROR]);
    d->own = err == GP_ENOTFOUND;
    snprintf(d->why, sizeof(d->why), "%s", why);
    snprintf(d->bad_node, sizeof(d->bad_node), "%s", d->p->node[0]);
    write_failed_start(d);
}

void
sched_dispatch(sched *s, sched_placed *p)
{
    dround *d = calloc(1, sizeof(*d));

    if (d == NULL) {
        gp_msg_clear(&msg_job_spec_desc, &p->spec);
        free(p);
        return;
    }
    *d = (dround){.s = s, .p = p, .fail = FAIL_NONE};
    s->dispatching++;
    if (!sched_spec_names_secrets(&p->spec))
        send_all(d);
    else if (sched_secrets_resolve(s, p->tenant, &p->spec, secrets_resolved, d) != GP_EOK)
        secrets_resolved(d, GP_EUNAVAIL, sched_secrets_on(s) ? "secrets: cannot be read now"
                         : "secrets: " SCHED_SECRETS_OFF, NULL, 0);
}
