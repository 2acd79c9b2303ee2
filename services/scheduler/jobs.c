/* jobs.c -- the job API: gp.api.<tenant>.job.submit|get|list|cancel and
 * gp.admin.job.list.
 *
 * The tenant is the subject's token (NATS permissions give an integrator
 * gp.api.<its tenant>.> only), so every query is scoped by it: another
 * tenant's job is NOTFOUND, never DENIED, and tells nothing.  Every state
 * change writes its job_events row in the same transaction (events.c
 * publishes it after the commit).  Nothing here waits: PostgreSQL through
 * gp/db.h, the registry and the agents through gp/call.h. */
#include <ev.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "end.h"
#include "gp/clock.h"
#include "gp/dbrow.h"
#include "gp/id.h"
#include "gp/dbarray.h"
#include "gp/log.h"
#include "gp/shard.h"
#include "gp/tenancy.h"
#include "plan/place.h"
#include "scheduler.h"

enum { SUBMIT_CREATED, SUBMIT_DUPLICATE, SUBMIT_CONFLICT, SUBMIT_INVALID, SUBMIT_UNKNOWN_TENANT,
       SUBMIT_ERROR };
static const char *const submit_outcomes[] = {"created", "duplicate", "conflict", "invalid",
                                              "unknown_tenant", "error"};
enum { CANCEL_CANCELLED, CANCEL_ENDED, CANCEL_NOTFOUND, CANCEL_ERROR };
static const char *const cancel_outcomes[] = {"cancelled", "ended", "notfound", "error"};

/* The states in which a job or an attempt still holds or may hold GPUs. */

static sched *
sched_of(gp_req *req)
{
    return gp_req_state(req);
}

static gp_err
tenant_of(gp_req *req, const char **tenant)
{
    *tenant = gp_req_param(req, "tenant");
    if (!gp_id_ok(*tenant))
        return gp_req_fail(req, GP_EINVAL, "tenant: must be 1 to 63 of [A-Za-z0-9_-]");
    return GP_EOK;
}

static gp_err
db_fail(gp_req *req, gp_err err, const char *detail)
{
    GP_WARN("job_query_failed", "subject=%s code=%s detail=\"%s\"", gp_req_subject(req),
            gp_err_name(err), detail);
    /* the code as gp/db.h mapped it: a CHECK the handlers missed stays
     * INVAL, a lost connection UNAVAIL */
    return gp_req_fail(req, err, "database: %s", detail);
}

/* ---- tenants: known to the registry, cached a while ---------------------------- */

static sched_tenant_slot *
tenant_slot(sched *s, const char *tenant)
{
    return &s->tenants[gp_fnv1a(tenant) % SCHED_TENANT_SLOTS];
}

static bool
tenant_known(sched *s, const char *tenant)
{
    sched_tenant_slot *t = tenant_slot(s, tenant);

    return strcmp(t->id, tenant) == 0 && gp_mono_ms() < t->until_mono;
}

static void
tenant_remember(sched *s, const char *tenant)
{
    sched_tenant_slot *t = tenant_slot(s, tenant);

    snprintf(t->id, sizeof(t->id), "%s", tenant);
    t->until_mono = gp_mono_ms() + s->cfg->tenant_cache_ms;
}

/* Publishes an event whose row the caller's transaction committed. */
static void
job_event(sched *s, const char *tenant, const char *job_id, uint64_t seq, int32_t event,
          int32_t state, const char *reason, uint64_t at_ms)
{
    msg_job_event ev = {.seq = seq, .event = event, .state = state, .at_ms = at_ms};

    snprintf(ev.tenant, sizeof(ev.tenant), "%s", tenant);
    snprintf(ev.job_id, sizeof(ev.job_id), "%s", job_id);
    snprintf(ev.reason, sizeof(ev.reason), "%s", reason);
    sched_event_publish(s, &ev);
}

/* ---- submit -------------------------------------------------------------------- */

typedef struct submit {
    struct submit *next;           /* in the batch being gathered */
    gp_req     *req;
    sched      *s;
    char        id[GP_MAX_ID + 1];
    char        tenant[GP_MAX_ID + 1];
    char        crid[GP_MAX_ID + 1];
    char        now[24];
    gp_dbparams p;                 /* the INSERT's parameters */
} submit;

/* The pool or product a spec names must exist and be the tenant's to use
 * (the rights rule, place.h), checked against the snapshot once it has
 * been loaded from the registry: a typed error naming the field at
 * submit, rather than a job pending forever.  Before the first load the
 * placement pass reports the same as a pending reason. */
static gp_err
spec_refs_check(sched *s, const char *tenant, const msg_job_spec *sp, char *why, size_t n)
{
    const snap *sn = &s->snap;
    int32_t     i;

    if (strcmp(sp->checkpoint_uri, "shared:") == 0 && s->cfg->checkpoint_shared_root[0] == '\0') {
        snprintf(why, n, "checkpoint_uri: this control plane has no shared checkpoint store "
                         "(checkpoint-shared-root): name your object store");
        return GP_EINVAL;
    }
    if (!s->fed)
        return GP_EOK;
    if (GP_HAS(sp, MSG_JOB_SPEC__PRODUCT) && sp->product[0] != '\0') {
        if ((i = snap_product_find(sn, sp->product)) < 0) {
            snprintf(why, n, "product: no product '%s'", sp->product);
            return GP_ENOTFOUND;
        }
        if ((i = snap_pool_find(sn, sn->product[i].pool)) < 0 ||
            !place_may_use(sn, tenant, &sn->pool[i])) {
            snprintf(why, n, "product: tenant '%s' may not use product '%s'", tenant, sp->product);
            return GP_EDENIED;
        }
    }
    if (GP_HAS(sp, MSG_JOB_SPEC__POOL) && sp->pool[0] != '\0') {
        if ((i = snap_pool_find(sn, sp->pool)) < 0) {
            snprintf(why, n, "pool: no pool '%s'", sp->pool);
            return GP_ENOTFOUND;
        }
        if (!place_may_use(sn, tenant, &sn->pool[i])) {
            snprintf(why, n, "pool: tenant '%s' may not use pool '%s'", tenant, sp->pool);
            return GP_EDENIED;
        }
    }
    return GP_EOK;
}

static void
submit_free(submit *sb)
{
    gp_dbparams_fini(&sb->p);
    free(sb);
}

static void
submit_end(submit *sb, int outcome, gp_err rc)
{
    sched_count(sb->s->m_submits[outcome]);
    if (outcome == SUBMIT_CREATED)
        sched_place_kick(sb->s);       /* a new job: a placement pass now */
    gp_req_done(sb->req, rc);
    submit_free(sb);
}

/* bytea input in hex: "\x" + two digits a byte */
static gp_err
add_spec_param(gp_dbparams *p, const msg_job_spec *sp)
{
    gp_buf b, hex;
    gp_err rc;

    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_buf_init(&hex, 2 * GP_MAX_MSG_BYTES + 3);
    rc = gp_msg_encode(&msg_job_spec_desc, sp, &b);
    if (rc == GP_EOK)
        rc = gp_buf_puts(&hex, "\\x");
    for (size_t i = 0; rc == GP_EOK && i < b.n; i++)
        rc = gp_buf_printf(&hex, "%02x", ((const unsigned char *)b.p)[i]);
    if (rc == GP_EOK)
        rc = gp_buf_append(&hex, "", 1);
    if (rc == GP_EOK)
        rc = gp_dbparams_add(p, hex.p);
    gp_buf_fini(&b);
    gp_buf_fini(&hex);
    return rc;
}

static gp_err
add_fmt(gp_dbparams *p, const char *fmt, long long v)
{
    char t[32];

    snprintf(t, sizeof(t), fmt, v);
    return gp_dbparams_add(p, t);
}

/* $1 id $2 tenant $3 client_request_id $4 spec: also the parameters of
 * the SELECT that follows the INSERT. */
static gp_err
submit_params(submit *sb, const msg_job_spec *sp)
{
    gp_dbparams *p = &sb->p;
    gp_err       rc = gp_dbparams_add(p, sb->id);

#define ADD(x) do { if (rc == GP_EOK) rc = (x); } while (0)
#define HAS(f) GP_HAS(sp, MSG_JOB_SPEC__##f)
    ADD(gp_dbparams_add(p, sb->tenant));
    ADD(gp_dbparams_add(p, sp->client_request_id));
    ADD(add_spec_param(p, sp));
    ADD(gp_dbparams_add(p, sp->name));
    ADD(add_fmt(p, "%lld", sp->priority));
    ADD(add_fmt(p, "%lld", sp->gpus_per_node));
    ADD(add_fmt(p, "%lld", sp->nodes));
    ADD(gp_dbparams_add(p, sp->interruptible ? "true" : "false"));
    ADD(add_fmt(p, "%lld", sp->max_run_s));
    ADD(add_fmt(p, "%lld", sp->max_attempts));
    ADD(gp_dbparams_add(p, sp->pool));
    ADD(gp_dbparams_add(p, sp->product));
    ADD(HAS(MAX_PRICE_MICROS_PER_GPU_HOUR) ? add_fmt(p, "%lld", sp->max_price_micros_per_gpu_hour)
                                           : gp_dbparams_add(p, ""));
    ADD(gp_dbparams_add(p, sp->currency));
    ADD(gp_dbparams_add(p, sb->now));
    ADD(gp_dbparams_add(p, msg_job_spec_kind_names[sp->kind]));
#undef HAS
#undef ADD
    return rc;
}

/* The job and its first event in one statement; a key already used
 * inserts neither (a concurrent submit of the same key waits for the
 * other's commit, then inserts nothing). */
static const char submit_insert_sql[] =
    "WITH ins AS (INSERT INTO jobs (id, tenant, client_request_id, state, spec, name, priority,\n"
    "    gpus_per_node, nodes, interruptible, max_run_s, max_attempts, pool, product,\n"
    "    max_price_micros_per_gpu_hour, currency, created_ms, updated_ms, event_seq, kind)\n"
    "  VALUES ($1, $2, NULLIF($3, ''), 'pending', $4::bytea, $5, $6::int, $7::int, $8::int,\n"
    "    $9::bool, $10::bigint, $11::int, NULLIF($12, ''), NULLIF($13, ''),\n"
    "    NULLIF($14, '')::bigint, NULLIF($15, ''), $16::bigint, $16::bigint, 1, $17)\n"
    "  ON CONFLICT (tenant, client_request_id) DO NOTHING RETURNING id)\n"
    "INSERT INTO job_events (job_id, seq, event, state, at_ms)\n"
    "  SELECT id, 1, 'submitted', 'pending', $16::bigint FROM ins";

/* The job row a submit's write gave back (its own, or the one its
 * client_request_id already named). */
static void
submit_row(submit *sb, const PGresult *res, int row)
{
    msg_job *job = gp_req_out(sb->req);

    if (strcmp(PQgetvalue(res, row, PQfnumber(res, "same_spec")), "t") != 0) {
        gp_req_fail(sb->req, GP_ECONFLICT,
                    "client_request_id: '%s' was used for another spec (job %s)", sb->crid,
                    PQgetvalue(res, row, 0));
        submit_end(sb, SUBMIT_CONFLICT, GP_ECONFLICT);
        return;
    }
    if (sched_row_to_msg(&msg_job_desc, res, row, job) != GP_EOK) {
        submit_end(sb, SUBMIT_ERROR, gp_req_fail(sb->req, GP_EINTERNAL, "job row unreadable"));
        return;
    }
    if (strcmp(job->id, sb->id) != 0) {        /* the key's job, submitted before */
        submit_end(sb, SUBMIT_DUPLICATE, GP_EOK);
        return;
    }
    job_event(sb->s, job->tenant, job->id, 1, MSG_JOB_EVENT_EVENT_SUBMITTED,
              MSG_JOB_EVENT_STATE_PENDING, "", job->created_ms);
    submit_end(sb, SUBMIT_CREATED, GP_EOK);
}

static void
submit_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    submit *sb = arg;
    int     n = err == GP_EOK && nres == 2 ? PQntuples(res[1]) : 0;

    if (err != GP_EOK || n != 1) {
        submit_end(sb, SUBMIT_ERROR, db_fail(sb->req, err != GP_EOK ? err : GP_EINTERNAL,
                                             err != GP_EOK ? detail : "no row"));
        return;
    }
    submit_row(sb, res[1], 0);
}

static void
submit_write(submit *sb)
{
    char        sql[1024];
    gp_db_tx   *tx = gp_db_tx_new(gp_app_db(sb->s->app));
    const char *const *v = gp_dbparams_values(&sb->p);
    gp_err      rc;

    snprintf(sql, sizeof(sql),
             "SELECT %s, j.spec = $4::bytea AS same_spec FROM jobs j\n"
             "WHERE j.id = $1 OR (j.tenant = $2 AND j.client_request_id = NULLIF($3, ''))",
             sched_job_cols);
    /* a failed add is kept in tx and returned by run, which frees tx */
    gp_db_tx_add(tx, submit_insert_sql, sb->p.n, v);
    gp_db_tx_add(tx, sql, 4, v);
    rc = gp_db_tx_run(tx, 0, submit_written, sb);
    if (rc != GP_EOK)
        submit_end(sb, SUBMIT_ERROR, gp_req_fail(sb->req, GP_EUNAVAIL, "database: %s",
                                                 gp_err_name(rc)));
}

/* ---- submits written in batches ---------------------------------------------- */

/* Submits are gathered while the loop handles what one wake-up brought
 * (an ev_prepare flushes them before it waits again: no added delay) and
 * written by one transaction, up to SUBMIT_BATCH at a time.  One
 * transaction per submit (BEGIN, INSERT, SELECT, COMMIT) was most of what
 * PostgreSQL ran under a burst of submits (place_bench).  A batch the
 * database refuses (one bad row fails all) is written again job by job,
 * so each submit gets its own answer. */
#define SUBMIT_BATCH 64

static struct {
    sched      *s;
    ev_prepare  prep;
    bool        armed;
    submit     *head, **tail;
    unsigned    n;
    uint64_t   *m_batches, *m_batched;   /* transactions of 2+ submits, their submits */
} sq;

/* The submits' 17 parameters as 17 arrays (column i of every row).
 * Rows go in in key order: two instances' batches sharing keys then wait
 * for each other in one order, never in a circle (a deadlock PostgreSQL
 * would break by failing one batch, written again job by job). */
static const char submit_batch_sql[] =
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[],\n"
    "    $5::text[], $6::int[], $7::int[], $8::int[], $9::bool[], $10::bigint[], $11::int[],\n"
    "    $12::text[], $13::text[], $14::text[], $15::text[], $16::bigint[], $17::text[])\n"
    "  AS v(id, tenant, crid, spec, name, prio, gpn, nodes, intr, maxrun, maxatt, pool,\n"
    "    product, price, cur, now, kind)),\n"
    "ins AS (INSERT INTO jobs (id, tenant, client_request_id, state, spec, name, priority,\n"
    "    gpus_per_node, nodes, interruptible, max_run_s, max_attempts, pool, product,\n"
    "    max_price_micros_per_gpu_hour, currency, created_ms, updated_ms, event_seq, kind)\n"
    "  SELECT id, tenant, NULLIF(crid, ''), 'pending', spec, name, prio, gpn, nodes, intr,\n"
    "    maxrun, maxatt, NULLIF(pool, ''), NULLIF(product, ''), NULLIF(price, '')::bigint,\n"
    "    NULLIF(cur, ''), now, now, 1, kind FROM v ORDER BY tenant, crid\n"
    "  ON CONFLICT (tenant, client_request_id) DO NOTHING RETURNING id, created_ms)\n"
    "INSERT INTO job_events (job_id, seq, event, state, at_ms)\n"
    "  SELECT id, 1, 'submitted', 'pending', created_ms FROM ins";

#define SUBMIT_NPARAMS 17          /* submit_params */

typedef struct sbatch {
    submit  *v[SUBMIT_BATCH];      /* NULL once answered */
    unsigned n;
} sbatch;

static int
row_owner(const sbatch *b, const char *req_id)
{
    for (unsigned i = 0; i < b->n; i++)
        if (b->v[i] != NULL && strcmp(b->v[i]->id, req_id) == 0)
            return (int)i;
    return -1;
}

static void
batch_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sbatch         *b = arg;
    const PGresult *rows = err == GP_EOK && nres == 2 ? res[1] : NULL;
    int             col = rows != NULL ? PQfnumber(rows, "req_id") : -1;

    if (rows == NULL || col < 0) {    /* each alone: its own answer, its own error */
        GP_WARN("submit_batch_failed", "jobs=%u code=%s detail=\"%s\"", b->n,
                gp_err_name(err), detail);
        for (unsigned i = 0; i < b->n; i++)
            submit_write(b->v[i]);
        free(b);
        return;
    }
    for (int r = 0; r < PQntuples(rows); r++) {
        int i = row_owner(b, PQgetvalue(rows, r, col));

        if (i >= 0) {
            submit *sb = b->v[i];

            b->v[i] = NULL;
            submit_row(sb, rows, r);          /* answers and frees sb */
        }
    }
    for (unsigned i = 0; i < b->n; i++)
        if (b->v[i] != NULL)
            submit_end(b->v[i], SUBMIT_ERROR, db_fail(b->v[i]->req, GP_EINTERNAL, "no row"));
    free(b);
}

static gp_err
batch_params(const sbatch *b, gp_buf *arr)
{
    gp_err rc = GP_EOK;

    for (int k = 0; k < SUBMIT_NPARAMS && rc == GP_EOK; k++)
        rc = gp_pgarr_begin(&arr[k]);
    for (unsigned i = 0; i < b->n && rc == GP_EOK; i++) {
        const char *const *v = gp_dbparams_values(&b->v[i]->p);

        for (int k = 0; k < SUBMIT_NPARAMS && rc == GP_EOK; k++)
            rc = gp_pgarr_add(&arr[k], v[k]);
    }
    for (int k = 0; k < SUBMIT_NPARAMS && rc == GP_EOK; k++)
        rc = gp_pgarr_end(&arr[k]);
    return rc;
}

static void
submits_flush(void)
{
    sbatch     *b;
    gp_buf      arr[SUBMIT_NPARAMS];
    const char *p[SUBMIT_NPARAMS];
    char        sql[1024];
    gp_db_tx   *tx;
    gp_err      rc;
    submit     *sb, *next;

    if (sq.armed)
        ev_prepare_stop(gp_app_loop(sq.s->app), &sq.prep);
    sq.armed = false;
    if (sq.n == 0)
        return;
    b = sq.n > 1 ? calloc(1, sizeof(*b)) : NULL;
    for (sb = sq.head; sb != NULL; sb = next) {
        next = sb->next;
        sb->next = NULL;
        if (b != NULL)
            b->v[b->n++] = sb;
        else
            submit_write(sb);             /* one alone (or no memory): as it was */
    }
    sq.head = NULL, sq.tail = &sq.head, sq.n = 0;
    if (b == NULL)
        return;
    sched_count(sq.m_batches);
    if (sq.m_batched != NULL)
        *sq.m_batched += b->n;
    for (int k = 0; k < SUBMIT_NPARAMS; k++)
        gp_buf_init(&arr[k], (size_t)SUBMIT_BATCH * (2 * GP_MAX_MSG_BYTES + 16));
    rc = batch_params(b, arr);
    for (int k = 0; k < SUBMIT_NPARAMS; k++)
        p[k] = arr[k].p;
    snprintf(sql, sizeof(sql),
             "SELECT %s, j.spec = v.spec AS same_spec, v.id AS req_id\n"
             "FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])\n"
             "  AS v(id, tenant, crid, spec)\n"
             "CROSS JOIN LATERAL (SELECT * FROM jobs j0 WHERE j0.id = v.id\n"
             "  OR (j0.tenant = v.tenant AND j0.client_request_id = NULLIF(v.crid, ''))\n"
             "  LIMIT 1) j", sched_job_cols);
    if (rc == GP_EOK) {
        tx = gp_db_tx_new(gp_app_db(sq.s->app));
        gp_db_tx_add(tx, submit_batch_sql, SUBMIT_NPARAMS, p);
        gp_db_tx_add(tx, sql, 4, p);
        rc = gp_db_tx_run(tx, 0, batch_written, b);
    }
    for (int k = 0; k < SUBMIT_NPARAMS; k++)
        gp_buf_fini(&arr[k]);
    if (rc != GP_EOK)
        batch_written(b, rc, NULL, 0, "not sent");
}

static void
submits_due(struct ev_loop *loop, ev_prepare *w, int revents)
{
    (void)loop, (void)w, (void)revents;
    submits_flush();
}

static void
submit_queue(submit *sb)
{
    if (sq.tail == NULL)
        sq.tail = &sq.head;
    sq.s = sb->s;
    sb->next = NULL;
    *sq.tail = sb;
    sq.tail = &sb->next;
    if (++sq.n == SUBMIT_BATCH) {
        submits_flush();
        return;
    }
    if (!sq.armed) {
        ev_prepare_init(&sq.prep, submits_due);
        ev_prepare_start(gp_app_loop(sb->s->app), &sq.prep);
        sq.armed = true;
    }
}

static void
tenant_answer(submit *sb, gp_err err, bool transport, const char *detail)
{
    if (err == GP_EOK) {
        submit_queue(sb);
    } else if (err == GP_ENOTFOUND && !transport) {
        gp_req_fail(sb->req, GP_ENOTFOUND, "tenant: '%s' is unknown", sb->tenant);
        submit_end(sb, SUBMIT_UNKNOWN_TENANT, GP_ENOTFOUND);
    } else {
        gp_req_fail(sb->req, GP_EUNAVAIL, "tenant: '%s' cannot be checked now (registry: %s %s)",
                    sb->tenant, gp_err_name(err), detail);
        submit_end(sb, SUBMIT_ERROR, GP_EUNAVAIL);
    }
}

/* One registry call answers every submit of the tenant that arrived while
 * it was out: a burst of submits for a tenant not cached (a new instance,
 * an expired entry) sent one call each and overflowed the bus's pending
 * requests (GP_MAX_PENDING_REQ), refusing most of them UNAVAIL. */
static void
tenant_checked(void *arg, gp_err err, bool transport, const void *reply, const char *detail)
{
    submit            *sb = arg;
    sched_tenant_slot *t = tenant_slot(sb->s, sb->tenant);
    submit            *w = NULL;

    if (strcmp(t->asking, sb->tenant) == 0) {
        w = t->waiters;
        t->waiters = NULL;
        t->asking[0] = '\0';
    }
    if (err == GP_EOK) {
        tenant_remember(sb->s, sb->tenant);
        sched_tenant_consumer(sb->s, sb->tenant);      /* its events' replay, before any */
        if (reply != NULL)          /* placement needs it too (rights): no wait for a load */
            snap_tenant_upsert(&sb->s->snap, reply);
    }
    tenant_answer(sb, err, transport, detail);
    while (w != NULL) {
        submit *next = w->next;

        tenant_answer(w, err, transport, detail);
        w = next;
    }
}

/* Services talk only over the bus: the registry says whether the tenant
 * exists (gp.admin.tenant.get); a positive answer is cached a while. */
static void
tenant_check(submit *sb)
{
    sched_tenant_slot *t = tenant_slot(sb->s, sb->tenant);
    msg_id_request     q = {0};
    char               subj[GP_MAX_SUBJECT];
    unsigned           ms = gp_app_cfg(sb->s->app)->request_timeout_ms / 2;
    gp_err             rc;

    if (tenant_known(sb->s, sb->tenant)) {
        submit_queue(sb);
        return;
    }
    if (strcmp(t->asking, sb->tenant) == 0) {    /* a call for it is out: wait on it */
        sb->next = t->waiters;
        t->waiters = sb;
        return;
    }
    if (t->asking[0] == '\0')                    /* else a collision: asked on its own */
        snprintf(t->asking, sizeof(t->asking), "%s", sb->tenant);
    snprintf(q.id, sizeof(q.id), "%s", sb->tenant);
    rc = gp_op_subject(GP_OP_ADMIN_TENANT_GET, subj, sizeof(subj), NULL);
    if (rc == GP_EOK)
        rc = gp_call2(gp_app_bus(sb->s->app), subj, &msg_id_request_desc, &q, &msg_tenant_desc,
                      ms, tenant_checked, sb);
    if (rc != GP_EOK)
        tenant_checked(sb, rc, true, NULL, "not sent");
}

/* The secrets the spec names are the tenant's (secrets.c): a typed
 * refusal at submit, not a job that fails at its first start. */
static void
secrets_checked(void *arg, gp_err err, const char *why, msg_attempt_secret *v, unsigned n)
{
    submit *sb = arg;

    (void)v, (void)n;
    if (err == GP_EOK) {
        tenant_check(sb);
        return;
    }
    gp_req_fail(sb->req, err, "%s", why);
    submit_end(sb, err == GP_ENOTFOUND ? SUBMIT_INVALID : SUBMIT_ERROR, err);
}

static gp_err
on_submit(gp_req *req, const void *in, void *out)
{
    sched       *s = sched_of(req);
    msg_job_spec sp = *(const msg_job_spec *)in;   /* shallow: its arrays stay the request's */
    const char  *tenant;
    char         why[GP_ERRBUF_LEN];
    submit      *sb;
    gp_err       rc;

    (void)out;
    if ((rc = tenant_of(req, &tenant)) != GP_EOK) {
        sched_count(s->m_submits[SUBMIT_INVALID]);
        return rc;
    }
    if ((rc = sched_spec_check(&sp, why, sizeof(why))) != GP_EOK) {
        sched_count(s->m_submits[SUBMIT_INVALID]);
        return gp_req_fail(req, rc, "%s", why);
    }
    if ((rc = spec_refs_check(s, tenant, &sp, why, sizeof(why))) != GP_EOK) {
        sched_count(s->m_submits[SUBMIT_INVALID]);
        return gp_req_fail(req, rc, "%s", why);
    }
    if (sched_spec_names_secrets(&sp) && !sched_secrets_on(s)) {
        sched_count(s->m_submits[SUBMIT_INVALID]);
        return gp_req_fail(req, GP_EUNAVAIL, "secrets: %s", SCHED_SECRETS_OFF);
    }
    sched_spec_normalize(&sp);
    if ((sb = calloc(1, sizeof(*sb))) == NULL)
        return GP_ENOMEM;
    sb->req = req;
    sb->s = s;
    gp_dbparams_init(&sb->p);
    snprintf(sb->tenant, sizeof(sb->tenant), "%s", tenant);
    snprintf(sb->crid, sizeof(sb->crid), "%s", sp.client_request_id);
    snprintf(sb->now, sizeof(sb->now), "%llu", (unsigned long long)gp_wall_ms());
    rc = sched_job_id(sb->id);
    if (rc == GP_EOK)
        rc = submit_params(sb, &sp);
    if (rc != GP_EOK) {
        submit_free(sb);
        return gp_req_fail(req, rc, "spec: cannot be stored (%s)", gp_err_name(rc));
    }
    if (!sched_spec_names_secrets(&sp))
        tenant_check(sb);
    else if ((rc = sched_secrets_check(s, tenant, &sp, secrets_checked, sb)) != GP_EOK)
        submit_end(sb, SUBMIT_ERROR, gp_req_fail(req, GP_EUNAVAIL, "secrets: cannot be checked "
                                                 "now (%s)", gp_err_name(rc)));
    return GP_EPENDING;
}

/* ---- get ----------------------------------------------------------------------- */

/* Rows of res into a new array of messages of d (each filled by
 * sched_row_to_msg), at most max. */
static gp_err
rows_to_arr(const gp_msg_desc *d, const PGresult *res, uint32_t max, gp_arr *out)
{
    uint32_t n = (uint32_t)PQntuples(res);
    char    *v;

    n = n > max ? max : n;
    if (n == 0)
        return GP_EOK;
    if ((v = calloc(n, d->size)) == NULL)
        return GP_ENOMEM;
    out->v = v;
    out->n = n;
    for (uint32_t i = 0; i < n; i++) {
        gp_err rc = sched_row_to_msg(d, res, (int)i, v + i * d->size);

        if (rc != GP_EOK)
            return rc;                     /* the reply's clear frees what was filled */
    }
    return GP_EOK;
}

static void
got(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req  *req = arg;
    msg_job *job = gp_req_out(req);
    gp_err   rc = err;

    if (err != GP_EOK || nres != 5) {
        gp_req_done(req, db_fail(req, err != GP_EOK ? err : GP_EINTERNAL, detail));
        return;
    }
    if (PQntuples(res[2]) == 0) {
        gp_req_done(req, gp_req_fail(req, GP_ENOTFOUND, "id: no job '%s'",
                                     ((const msg_id_request *)gp_req_in(req))->id));
        return;
    }
    rc = sched_row_to_msg(&msg_job_desc, res[2], 0, job);
    if (rc == GP_EOK && strcmp(job->tenant, gp_req_param(req, "tenant")) != 0) {
        free(job->spec.env.v);           /* a site partner's view of a customer's job: */
        job->spec.env = (gp_arr){0};     /* no environment (it may hold secrets) */
    }
    if (rc == GP_EOK)
        rc = rows_to_arr(&msg_attempt_desc, res[3], MSG_JOB_ATTEMPTS_MAXITEMS, &job->attempts);
    if (rc == GP_EOK)
        rc = rows_to_arr(&msg_job_event_desc, res[4], MSG_JOB_EVENTS_MAXITEMS, &job->events);
    gp_req_done(req, rc == GP_EOK ? rc : gp_req_fail(req, GP_EINTERNAL, "job rows unreadable"));
}

static gp_err
job_id_of(gp_req *req, const void *in, const char **id)
{
    *id = ((const msg_id_request *)in)->id;
    if (!gp_id_ok(*id))
        return gp_req_fail(req, GP_EINVAL, "id: must be 1 to 63 of [A-Za-z0-9_-]");
    return GP_EOK;
}

/* One snapshot for the job, its attempts (all of them, oldest first) and
 * its latest events (oldest first), under the tenant's role: PostgreSQL's
 * row-level security (migration 8) decides which job, attempts and events
 * the tenant sees (its own; a site partner also those that ran at its
 * sites), so the queries name only the job. */
static gp_err
on_get(gp_req *req, const void *in, void *out)
{
    const char *tenant, *id;
    char        sql[3][1024];
    gp_db_tx   *tx;
    gp_err      rc;

    (void)out;
    if ((rc = tenant_of(req, &tenant)) != GP_EOK || (rc = job_id_of(req, in, &id)) != GP_EOK)
        return rc;
    snprintf(sql[0], sizeof(sql[0]), "SELECT %s FROM jobs j WHERE j.id = $1", sched_job_cols);
    snprintf(sql[1], sizeof(sql[1]),
             "SELECT %s FROM attempts a WHERE a.job_id = $1 ORDER BY a.attempt, a.rank LIMIT %d",
             sched_attempt_cols, MSG_JOB_ATTEMPTS_MAXITEMS);
    snprintf(sql[2], sizeof(sql[2]),
             "SELECT * FROM (SELECT %s FROM job_events e JOIN jobs j ON j.id = e.job_id\n"
             "  WHERE e.job_id = $1\n"
             "  ORDER BY e.seq DESC LIMIT %d) x ORDER BY seq",
             sched_event_cols, MSG_JOB_EVENTS_MAXITEMS);
    tx = gp_db_tx_new(gp_app_db(gp_req_app(req)));
    /* not READ ONLY: gp_tenant_role makes the tenant's role on first use */
    gp_db_tx_add(tx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", 0, NULL);
    gp_db_tx_add(tx, GP_TENANCY_SET_ROLE_SQL, 1, &tenant);   /* an add's error: at run */
    for (int i = 0; i < 3; i++)
        gp_db_tx_add(tx, sql[i], 1, &id);
    rc = gp_db_tx_run(tx, 0, got, req);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, GP_EUNAVAIL, "database: %s",
                                                    gp_err_name(rc));
}

/* ---- list ---------------------------------------------------------------------- */

/* A full page must fit the reply. */
_Static_assert(MSG_JOB_LIST_REQUEST_LIMIT_MAX <= MSG_JOB_LIST_ITEMS_MAXITEMS,
               "a job list page holds the largest limit a request may ask");

static void
listed(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req       *req = arg;
    msg_job_list *page = gp_req_out(req);
    msg_job      *items;
    /* the list is the last result (a tenant's starts with its role) */
    int           rows = err == GP_EOK && nres >= 1 ? PQntuples(res[nres - 1]) : 0;
    uint32_t      limit = ((const msg_job_list_request *)gp_req_in(req))->limit;
    gp_err        rc;

    if (err != GP_EOK || nres < 1) {
        gp_req_done(req, db_fail(req, err != GP_EOK ? err : GP_EINTERNAL, detail));
        return;
    }
    limit = limit == 0 ? MSG_JOB_LIST_REQUEST_LIMIT_MAX : limit;
    rc = rows_to_arr(&msg_job_desc, res[nres - 1], limit, &page->items);
    items = page->items.v;
    for (uint32_t i = 0; rc == GP_EOK && i < page->items.n; i++) {
        free(items[i].spec.env.v);       /* a list shows no environment (it may hold secrets) */
        items[i].spec.env = (gp_arr){0};
    }
    if (rc == GP_EOK && (uint32_t)rows > limit)
        snprintf(page->next, sizeof(page->next), "%s", items[limit - 1].id);
    gp_req_done(req, rc == GP_EOK ? rc : gp_req_fail(req, GP_EINTERNAL, "job rows unreadable"));
}

static gp_err
list_filter(gp_buf *sql, gp_dbparams *p, const char *cond, const char *value)
{
    gp_err rc = gp_dbparams_add(p, value);

    return rc == GP_EOK ? gp_buf_printf(sql, " AND %s $%d", cond, p->n) : rc;
}

/* Only the filters given become conditions, so the planner can use the
 * tenant and state indexes. */
static gp_err
list_sql(const msg_job_list_request *q, const char *tenant, gp_buf *sql, gp_dbparams *p)
{
    uint32_t limit = q->limit == 0 ? MSG_JOB_LIST_REQUEST_LIMIT_MAX : q->limit;
    bool     sites = GP_HAS(q, MSG_JOB_LIST_REQUEST__SCOPE) &&
                     q->scope == MSG_JOB_LIST_REQUEST_SCOPE_SITES;
    gp_err   rc = gp_buf_printf(sql, "SELECT %s FROM jobs j WHERE true", sched_job_cols);

    if (rc == GP_EOK && tenant[0] != '\0' && sites)   /* jobs that ran on its sites */
        rc = list_filter(sql, p,
                         "EXISTS (SELECT 1 FROM attempts a JOIN site_owners o ON o.site = a.site\n"
                         "  WHERE a.job_id = j.id AND o.owner =", tenant);
    if (rc == GP_EOK && tenant[0] != '\0' && sites)
        rc = gp_buf_puts(sql, ")");
    if (rc == GP_EOK && tenant[0] != '\0' && !sites)
        rc = list_filter(sql, p, "j.tenant =", tenant);
    if (rc == GP_EOK && GP_HAS(q, MSG_JOB_LIST_REQUEST__STATE))
        rc = list_filter(sql, p, "j.state =", msg_job_list_request_state_names[q->state]);
    if (rc == GP_EOK && q->site[0] != '\0')
        rc = list_filter(sql, p,
                         "EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = j.id AND a.site =",
                         q->site);
    if (rc == GP_EOK && q->site[0] != '\0')
        rc = gp_buf_puts(sql, ")");
    if (rc == GP_EOK && q->after[0] != '\0')
        rc = list_filter(sql, p, "j.id >", q->after);
    if (rc == GP_EOK)              /* one more than the page: is there a next one? */
        rc = gp_buf_printf(sql, " ORDER BY j.id LIMIT %u", limit + 1);
    if (rc == GP_EOK)
        rc = gp_buf_append(sql, "", 1);
    return rc;
}

static gp_err
on_list(gp_req *req, const void *in, void *out)
{
    const msg_job_list_request *q = in;
    bool                        admin = gp_req_data(req) != NULL;
    const char                 *tenant = admin ? q->tenant : "";
    gp_buf                      sql;
    gp_dbparams                 p;
    gp_err                      rc;

    (void)out;
    if (!admin && (rc = tenant_of(req, &tenant)) != GP_EOK)
        return rc;
    if (tenant[0] != '\0' && !gp_id_ok(tenant))
        return gp_req_fail(req, GP_EINVAL, "tenant: must be 1 to 63 of [A-Za-z0-9_-]");
    if (q->site[0] != '\0' && !gp_id_ok(q->site))
        return gp_req_fail(req, GP_EINVAL, "site: must be 1 to 63 of [A-Za-z0-9_-]");
    gp_buf_init(&sql, 4096);
    gp_dbparams_init(&p);
    rc = list_sql(q, tenant, &sql, &p);
    if (rc == GP_EOK && admin) {
        rc = gp_db_query(gp_app_db(gp_req_app(req)), sql.p, p.n, gp_dbparams_values(&p), 0,
                         listed, req);
    } else if (rc == GP_EOK) {         /* a tenant: under its role (row-level security) */
        gp_db_tx *tx = gp_db_tx_new(gp_app_db(gp_req_app(req)));

        gp_db_tx_add(tx, GP_TENANCY_SET_ROLE_SQL, 1, &tenant);   /* errors: at run */
        gp_db_tx_add(tx, sql.p, p.n, gp_dbparams_values(&p));
        rc = gp_db_tx_run(tx, 0, listed, req);
    }
    gp_buf_fini(&sql);
    gp_dbparams_fini(&p);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, GP_EUNAVAIL, "database: %s",
                                                    gp_err_name(rc));
}

/* ---- cancel -------------------------------------------------------------------- */

/* The tenant's cancel: the job and its live attempts end in one
 * transaction (end.h: the nodes that run it are told to stop, their GPUs
 * released); an ended job changes nothing and is returned as it is. */
static void
cancelled(void *arg, gp_err err, const PGresult *row, bool now, const char *detail)
{
    gp_req  *req = arg;
    sched   *s = sched_of(req);
    msg_job *job = gp_req_out(req);

    if (err != GP_EOK || row == NULL) {
        sched_count(s->m_cancels[CANCEL_ERROR]);
        gp_req_done(req, db_fail(req, err != GP_EOK ? err : GP_EINTERNAL, detail));
        return;
    }
    if (PQntuples(row) == 0 || sched_row_to_msg(&msg_job_desc, row, 0, job) != GP_EOK) {
        sched_count(s->m_cancels[CANCEL_NOTFOUND]);
        gp_req_done(req, gp_req_fail(req, GP_ENOTFOUND, "id: no job '%s'",
                                     ((const msg_id_request *)gp_req_in(req))->id));
        return;
    }
    sched_count(s->m_cancels[now ? CANCEL_CANCELLED : CANCEL_ENDED]);
    gp_req_done(req, GP_EOK);
}

static gp_err
on_cancel(gp_req *req, const void *in, void *out)
{
    const char *tenant, *id;
    gp_err      rc;

    (void)out;
    if ((rc = tenant_of(req, &tenant)) != GP_EOK || (rc = job_id_of(req, in, &id)) != GP_EOK)
        return rc;
    rc = sched_end_cancel(sched_of(req), id, tenant, cancelled, req);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, GP_EUNAVAIL, "database: %s",
                                                    gp_err_name(rc));
}

/* ---- jobs by state ------------------------------------------------------------- */

static void
counted(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    sched *s = arg;

    if (err != GP_EOK || nres != 1) {
        GP_WARN("job_count_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    for (int k = 0; k < 6; k++)
        if (s->m_jobs[k] != NULL)
            *s->m_jobs[k] = 0;
    for (int i = 0; i < PQntuples(res[0]); i++)
        for (int k = 0; k < 6; k++)
            if (s->m_jobs[k] != NULL &&
                strcmp(PQgetvalue(res[0], i, 0), msg_job_state_names[k]) == 0)
                *s->m_jobs[k] = atof(PQgetvalue(res[0], i, 1));
}

void
sched_jobs_count(gp_app *app, void *arg)
{
    gp_db_query(gp_app_db(app), "SELECT state, count(*) FROM jobs GROUP BY state", 0, NULL, 0,
                counted, arg);
}

/* ---- routes and metrics -------------------------------------------------------- */

static const bool admin_route = true;   /* gp.admin.job.list: every tenant, tenant a filter */

const gp_route sched_job_routes[] = {
    {GP_OP_API_JOB_SUBMIT, on_submit, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_JOB_GET, on_get, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_JOB_LIST, on_list, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_JOB_CANCEL, on_cancel, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_JOB_LIST, on_list, GP_R_QUEUE, 0, &admin_route, NULL},
    {NULL},
};

void
sched_jobs_start(sched *s)
{
    gp_metrics *m = gp_app_metrics(s->app);

    gp_metrics_counters(m, "gp_scheduler_submits_total", "outcome", submit_outcomes, 6,
                        "Job submissions by outcome", s->m_submits);
    gp_metrics_counters(m, "gp_scheduler_cancels_total", "outcome", cancel_outcomes, 4,
                        "Job cancellations by outcome", s->m_cancels);
    gp_metrics_gauges(m, "gp_scheduler_jobs", "state", msg_job_state_names, 6,
                      "Jobs by state (counted every gauge-ms)", s->m_jobs);
    s->m_signal_failures = gp_metrics_counter(
        m, "gp_scheduler_stop_signal_failures_total", NULL,
        "Stop signals to agents that failed (the lease kill list catches them)");
    sq.m_batches = gp_metrics_counter(m, "gp_scheduler_submit_batches_total", NULL,
                                      "Transactions that wrote two or more submits");
    sq.m_batched = gp_metrics_counter(m, "gp_scheduler_submit_batched_total", NULL,
                                      "Submits written by those transactions");
}
