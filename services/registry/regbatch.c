/* regbatch.c -- registrations written to PostgreSQL in batches (group
 * commit).
 *
 * A fleet that registers from cold (after a control-plane outage: 100,000
 * agents within their jittered backoff) cost a transaction of five
 * statements per node.  Here one transaction writes every registration
 * that arrived while the previous one was in flight, up to REG_BATCH_MAX:
 * with no backlog a batch is one registration and waits for nothing.  The
 * statements are the single ones' over arrays: the nodes' locks (in id
 * order), the retired ones (DENIED), the sites that do not exist
 * (NOTFOUND), the upsert (the previous site and boot id, the revision and
 * the region per node), the GPUs replaced; a node retired or of a missing
 * site is written by none of them.  Two registrations of one node never
 * share a batch (an upsert may not touch a row twice): the second waits
 * for the next.  A batch that fails as a whole (a constraint one node
 * broke, a deadlock) is written again one registration at a time
 * (the caller's ops->one), so one bad node costs its batch time, never
 * the others their registration.  What follows the write (the live view,
 * NodeChange) is per node, as before (ops->row). */
#include <stdlib.h>
#include <string.h>

#include "gp/dbarray.h"
#include "gp/log.h"
#include "gp/metrics.h"
#include "registry.h"

#define REG_BATCH_MAX 500

typedef struct regbatch {
    gp_req  **wait;                    /* arrived, not yet in a batch, oldest first */
    unsigned  nwait, capwait;
    gp_req   *flight[REG_BATCH_MAX];   /* the batch PostgreSQL is writing */
    unsigned  nflight;
    registry *r;
    const regbatch_ops *ops;
    uint64_t *m_batches, *m_batched, *m_fallbacks, *m_expired;
} regbatch;

/* A node neither retired nor of a missing site (v: id, site). */
#define REG_VALID                                                                            \
    " v.id NOT IN (SELECT id FROM retired_nodes)"                                            \
    " AND EXISTS (SELECT 1 FROM sites s WHERE s.id = v.site)"

static const char lock_sql[] =
    "SELECT pg_advisory_xact_lock(hashtext(id))"
    " FROM (SELECT id FROM unnest($1::text[]) id ORDER BY id) s";
static const char retired_sql[] =
    "SELECT id, to_char(retired_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
    " FROM retired_nodes WHERE id = ANY($1::text[])";
static const char missing_sql[] =
    "SELECT DISTINCT site FROM unnest($1::text[]) site"
    " WHERE NOT EXISTS (SELECT 1 FROM sites s WHERE s.id = site)";
static const char upsert_sql[] =
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],"
    " $6::int[], $7::int[]) AS v(id, site, hostname, agent_version, boot_id, cpu_cores, mem_mb)"
    " WHERE" REG_VALID "),"
    " old AS (SELECT n.id, n.site, n.boot_id FROM nodes n JOIN v ON v.id = n.id),"
    " up AS (INSERT INTO nodes (id, site, hostname, agent_version, boot_id, cpu_cores, mem_mb,"
    " state, state_since, registered_at) SELECT id, site, hostname, agent_version, boot_id,"
    " cpu_cores, mem_mb, 'healthy', timestamptz 'epoch' + $8::bigint * interval '1 millisecond',"
    " now() FROM v" REGISTRY_NODE_UPSERT_SET " RETURNING id, site, rev)"
    " SELECT coalesce(old.site, ''), old.boot_id, up.rev, s.region, up.id"
    " FROM up LEFT JOIN old ON old.id = up.id LEFT JOIN sites s ON s.id = up.site";
static const char gpus_delete_sql[] =
    "DELETE FROM gpus g USING unnest($1::text[], $2::text[]) AS v(id, site)"
    " WHERE g.node = v.id AND" REG_VALID;
static const char gpus_insert_sql[] =
    "INSERT INTO gpus (node, idx, uuid, model, vram_mb, serial, interconnect)"
    " SELECT g.node, g.idx, g.uuid, g.model, g.vram_mb, g.serial, g.ic"
    " FROM unnest($3::text[], $4::int[], $5::text[], $6::text[], $7::int[], $8::text[],"
    " $9::text[]) AS g(node, idx, uuid, model, vram_mb, serial, ic)"
    " JOIN unnest($1::text[], $2::text[]) AS v(id, site) ON v.id = g.node WHERE" REG_VALID;

enum { A_ID, A_SITE, A_HOST, A_VERSION, A_BOOT, A_CPU, A_MEM,
       G_NODE, G_IDX, G_UUID, G_MODEL, G_VRAM, G_SERIAL, G_IC, A_N };

static void flush(regbatch *b);

static regbatch *
batch_of(registry *r)
{
    gp_metrics *m = gp_app_metrics(r->app);
    regbatch   *b;

    if (r->regs != NULL || (b = calloc(1, sizeof(*b))) == NULL)
        return r->regs;
    b->r = r;
    b->m_batches = gp_metrics_counter(m, "gp_registry_register_batches_total", NULL,
                                      "Transactions that wrote registrations");
    b->m_batched = gp_metrics_counter(m, "gp_registry_register_batched_total", NULL,
                                      "Registrations written by those transactions");
    b->m_fallbacks = gp_metrics_counter(m, "gp_registry_register_batch_failures_total", NULL,
                                        "Batches that failed and were written one registration "
                                        "at a time");
    b->m_expired = gp_metrics_counter(m, "gp_registry_register_expired_total", NULL,
                                      "Registrations not written: their caller had been "
                                      "answered TIMEOUT while they waited for a batch");
    r->regs = b;
    return b;
}

static const msg_node_register *
reg_of(gp_req *req)
{
    return gp_req_in(req);
}

static gp_err
add_num(gp_buf *b, long long v)
{
    char s[24];

    snprintf(s, sizeof(s), "%lld", v);
    return gp_pgarr_add(b, s);
}

static gp_err
add_gpus(gp_buf *a, const msg_node_register *q)
{
    const msg_gpu   *g = q->gpus.v;
    const gp_field  *f = &msg_gpu_desc.fields[MSG_GPU__INTERCONNECT];
    gp_err           rc = GP_EOK;

    for (uint32_t i = 0; i < q->gpus.n && rc == GP_EOK; i++) {
        int32_t k = g[i].interconnect;

        rc = gp_pgarr_add(&a[G_NODE], q->node);
        rc = rc ? rc : add_num(&a[G_IDX], g[i].index);
        rc = rc ? rc : gp_pgarr_add(&a[G_UUID], g[i].uuid);
        rc = rc ? rc : gp_pgarr_add(&a[G_MODEL], g[i].model);
        rc = rc ? rc : add_num(&a[G_VRAM], g[i].vram_mb);
        rc = rc ? rc : gp_pgarr_add(&a[G_SERIAL], g[i].serial);
        rc = rc ? rc : gp_pgarr_add(&a[G_IC], k >= 0 && (uint32_t)k < f->nenums ? f->enums[k]
                                                                              : f->enums[0]);
    }
    return rc;
}

static gp_err
arrays(regbatch *b, gp_buf *a)
{
    gp_err rc = GP_EOK;

    for (int k = 0; k < A_N && rc == GP_EOK; k++)
        rc = gp_pgarr_begin(&a[k]);
    for (unsigned i = 0; i < b->nflight && rc == GP_EOK; i++) {
        const msg_node_register *q = reg_of(b->flight[i]);

        rc = gp_pgarr_add(&a[A_ID], q->node);
        rc = rc ? rc : gp_pgarr_add(&a[A_SITE], q->site);
        rc = rc ? rc : gp_pgarr_add(&a[A_HOST], q->hostname);
        rc = rc ? rc : gp_pgarr_add(&a[A_VERSION], q->agent_version);
        rc = rc ? rc : gp_pgarr_add(&a[A_BOOT], q->boot_id);
        rc = rc ? rc : add_num(&a[A_CPU], q->cpu_cores);
        rc = rc ? rc : add_num(&a[A_MEM], q->mem_mb);
        rc = rc ? rc : add_gpus(a, q);
    }
    for (int k = 0; k < A_N && rc == GP_EOK; k++)
        rc = gp_pgarr_end(&a[k]);
    return rc;
}

/* The row of node id in res (in column col), or -1. */
static int
row_of(const PGresult *res, int col, const char *id)
{
    for (int i = 0; i < PQntuples(res); i++)
        if (strcmp(PQgetvalue(res, i, col), id) == 0)
            return i;
    return -1;
}

static bool
site_missing(const PGresult *res, const char *site)
{
    for (int i = 0; i < PQntuples(res); i++)
        if (strcmp(PQgetvalue(res, i, 0), site) == 0)
            return true;
    return false;
}

/* One registration of a written batch: DENIED, NOTFOUND or registered. */
static void
settle(regbatch *b, gp_req *req, PGresult *const *res)
{
    const msg_node_register *q = reg_of(req);
    int                      i;

    if ((i = row_of(res[1], 0, q->node)) >= 0) {
        gp_req_done(req, gp_req_fail(req, GP_EDENIED, "node '%s' was deleted by an operator at "
                                     "%s; %s lets it register again", q->node,
                                     PQgetvalue(res[1], i, 1),
                                     GP_OP_ADMIN_NODE_READMIT->address));
    } else if (site_missing(res[2], q->site)) {
        gp_req_done(req, gp_req_fail(req, GP_ENOTFOUND, "site '%s' is not registered", q->site));
    } else if ((i = row_of(res[3], 4, q->node)) >= 0) {   /* the single upsert's columns, and the id */
        b->ops->row(req, res[3], i);
    } else {
        gp_req_done(req, gp_req_fail(req, GP_EUNAVAIL, "the inventory did not take node '%s': "
                                     "register again", q->node));
    }
}

/* Each registration on its own, as before batches (the batch failed). */
static void
one_by_one(regbatch *b)
{
    for (unsigned i = 0; i < b->nflight; i++) {
        gp_req *req = b->flight[i];
        gp_err  rc = b->ops->one(req);

        if (rc != GP_EOK)
            gp_req_done(req, gp_req_fail(req, rc, "inventory database unavailable"));
    }
}

static void
written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    regbatch *b = arg;

    (*b->m_batches)++;
    if (err == GP_EOK && nres == 6) {
        *b->m_batched += b->nflight;
        for (unsigned i = 0; i < b->nflight; i++)
            settle(b, b->flight[i], res);
    } else {
        /* each on its own: a registration's own transaction says what
         * failed, and one bad node costs the others only time */
        (*b->m_fallbacks)++;
        if (b->nflight > 1)
            GP_WARN("register_batch_failed", "nodes=%u code=%s detail=\"%s\" then=\"one at a "
                    "time\"", b->nflight, gp_err_name(err), detail ? detail : "");
        one_by_one(b);
    }
    b->nflight = 0;
    if (b->nwait > 0)
        flush(b);
}

static bool
in_flight(const regbatch *b, const char *node)
{
    for (unsigned i = 0; i < b->nflight; i++)
        if (strcmp(reg_of(b->flight[i])->node, node) == 0)
            return true;
    return false;
}

/* The waiting registrations into the batch, oldest first, one per node.
 * One whose caller was answered TIMEOUT meanwhile (it waited past the
 * route's deadline) is not written: its agent registers again after its
 * backoff, and writing it would only delay the others (a fleet from cold
 * spent most of its transactions on them). */
static void
take(regbatch *b)
{
    unsigned kept = 0;

    for (unsigned i = 0; i < b->nwait; i++) {
        gp_req *req = b->wait[i];

        if (gp_req_answered(req)) {
            (*b->m_expired)++;
            gp_req_done(req, GP_ETIMEOUT);
            continue;
        }
        if (b->nflight < REG_BATCH_MAX && !in_flight(b, reg_of(req)->node))
            b->flight[b->nflight++] = req;
        else
            b->wait[kept++] = req;
    }
    b->nwait = kept;
}

static void
flush(regbatch *b)
{
    gp_buf      a[A_N];
    const char *p[9];
    char        now[24];
    gp_db_tx   *tx = NULL;
    gp_err      rc;

    take(b);
    for (int k = 0; k < A_N; k++)
        gp_buf_init(&a[k], 0);
    rc = arrays(b, a);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)registry_now_ms(b->r));
    if (rc == GP_EOK && (tx = gp_db_tx_new(gp_app_db(b->r->app))) == NULL)
        rc = GP_ENOMEM;
    if (rc == GP_EOK) {
        p[0] = a[A_ID].p;
        gp_db_tx_add(tx, lock_sql, 1, p);
        gp_db_tx_add(tx, retired_sql, 1, p);
        p[0] = a[A_SITE].p;
        gp_db_tx_add(tx, missing_sql, 1, p);
        for (int k = 0; k <= A_MEM; k++)
            p[k] = a[k].p;
        p[7] = now;
        gp_db_tx_add(tx, upsert_sql, 8, p);
        p[0] = a[A_ID].p;
        p[1] = a[A_SITE].p;
        gp_db_tx_add(tx, gpus_delete_sql, 2, p);
        for (int k = G_NODE; k < A_N; k++)
            p[2 + k - G_NODE] = a[k].p;
        gp_db_tx_add(tx, gpus_insert_sql, 9, p);
        rc = gp_db_tx_run(tx, 0, written, b);
    }
    for (int k = 0; k < A_N; k++)
        gp_buf_fini(&a[k]);
    if (rc != GP_EOK) {                /* not sent: the callback will not come */
        GP_WARN("register_batch_unsent", "nodes=%u code=%s", b->nflight, gp_err_name(rc));
        for (unsigned i = 0; i < b->nflight; i++)
            gp_req_done(b->flight[i], gp_req_fail(b->flight[i], GP_EUNAVAIL,
                                                  "inventory database unavailable"));
        b->nflight = 0;
    }
}

/* Written now when no batch is in flight, else with the next batch. */
void
registry_regbatch_add(registry *r, gp_req *req, const regbatch_ops *ops)
{
    regbatch *b = batch_of(r);

    if (b == NULL) {
        gp_req_done(req, gp_req_fail(req, GP_ENOMEM, "out of memory"));
        return;
    }
    if (b->nwait == b->capwait) {
        unsigned cap = b->capwait ? 2 * b->capwait : 64;
        gp_req **w = realloc(b->wait, cap * sizeof(*w));

        if (w == NULL) {
            gp_req_done(req, gp_req_fail(req, GP_ENOMEM, "out of memory"));
            return;
        }
        b->wait = w;
        b->capwait = cap;
    }
    b->ops = ops;
    b->wait[b->nwait++] = req;
    if (b->nflight == 0)
        flush(b);
}

void
registry_regbatch_free(registry *r)
{
    if (r->regs == NULL)
        return;
    free(r->regs->wait);
    free(r->regs);
    r->regs = NULL;
}
