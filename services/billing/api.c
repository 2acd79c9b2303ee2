/* api.c -- what a tenant may read of billing (gp.api.<tenant>.billing.*:
 * usage, statements, one statement, balances) and the operator's period
 * close (gp.admin.billing.close).  Every query is scoped by the subject's
 * tenant: a customer sees its own usage, a site partner also the usage of
 * its sites, the network operator everything. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/dbrow.h"
#include "gp/id.h"
#include "gp/log.h"
#include "gp/money.h"
#include "billing.h"

#define USAGE_PAGE 100


/* rows -> an array field of out (element descriptor from the field) */

static bool
period_ok(const char *p)
{
    return strlen(p) == 7 && p[4] == '-' && p[0] >= '0' && p[0] <= '9' && p[1] >= '0' &&
           p[1] <= '9' && p[2] >= '0' && p[2] <= '9' && p[3] >= '0' && p[3] <= '9' &&
           ((p[5] == '0' && p[6] >= '1' && p[6] <= '9') ||
            (p[5] == '1' && p[6] >= '0' && p[6] <= '2'));
}

/* The subject's tenant; a body naming another is refused. */
static gp_err
scope(gp_req *req, const msg_billing_query *q, const char **tenant)
{
    *tenant = gp_req_param(req, "tenant");
    if (q->tenant[0] && strcmp(q->tenant, *tenant) != 0)
        return gp_req_fail(req, GP_EDENIED, "the request names tenant %s on %s's subject",
                           q->tenant, *tenant);
    if (q->period[0] && !period_ok(q->period))
        return gp_req_fail(req, GP_EINVAL, "period: YYYY-MM");
    if ((q->site[0] && !gp_id_ok(q->site)) || strchr(q->after, '\'') != NULL)
        return gp_req_fail(req, GP_EINVAL, "site, after: ids");
    return GP_EOK;
}

/* A tenant's query: in a transaction under the tenant's own role
 * (bill_tenant_role makes it on first use), so PostgreSQL's row-level
 * security filters what the query returns even if its WHERE forgot to.
 * The operator's queries run as the service, which sees every row (the
 * tables' owner, or its own role with its policy of every row). */
static gp_err
tenant_query(gp_req *req, const char *tenant, const char *sql, int nparams,
             const char *const *params, gp_db_cb *cb)
{
    billing  *b = gp_req_state(req);
    gp_db_tx *tx;

    if (strcmp(tenant, b->cfg->operator_tenant) == 0)
        return gp_db_query(gp_app_db(b->app), sql, nparams, params, 0, cb, req);
    if ((tx = gp_db_tx_new(gp_app_db(b->app))) == NULL)
        return GP_ENOMEM;
    /* an add's error is kept and returned by run, which frees tx either way */
    gp_db_tx_add(tx, "SELECT set_config('role', bill_tenant_role($1), true)", 1, &tenant);
    gp_db_tx_add(tx, sql, nparams, params);
    return gp_db_tx_run(tx, 0, cb, req);
}

/* ---- statements: content -> lines -------------------------------------------------- */

static gp_err
statement_from(msg_statement *st, const char *tenant, const char *period, const char *issued,
               const char *hash, const char *content, bool with_lines)
{
    msg_statement_line *l;
    uint32_t            n = 0;
    const char         *p;

    snprintf(st->tenant, sizeof(st->tenant), "%s", tenant);
    snprintf(st->period, sizeof(st->period), "%s", period);
    st->issued_ms = strtoull(issued, NULL, 10);
    snprintf(st->hash, sizeof(st->hash), "%s", hash);
    if (!with_lines)
        return GP_EOK;
    snprintf(st->content, sizeof(st->content), "%s", content);
    GP_SET_HAS(st, MSG_STATEMENT__CONTENT);
    if ((l = calloc(MSG_STATEMENT_LINES_MAXITEMS, sizeof(*l))) == NULL)
        return GP_ENOMEM;
    for (p = content; p != NULL && *p && n < MSG_STATEMENT_LINES_MAXITEMS;) {
        long long nanos, minor;
        char      cur[4], kind[16], purpose[16], up[8], corr[16] = "";

        if (sscanf(p, "line %3s %15s %15s %7s %lld %lld %15[a-z]", cur, kind, purpose, up, &nanos,
                   &minor, corr) >= 6) {
            memcpy(l[n].currency, cur, sizeof(cur));
            memcpy(l[n].kind, kind, sizeof(kind));
            memcpy(l[n].purpose, purpose, sizeof(purpose));
            memcpy(l[n].usage_period, up, sizeof(up));
            l[n].amount_nanos = nanos;
            l[n].amount_minor = minor;
            l[n].correction = strcmp(corr, "correction") == 0;
            l[n].has = ~0ull;
            n++;
        }
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    st->lines.v = l;
    st->lines.n = n;
    GP_SET_HAS(st, MSG_STATEMENT__LINES);
    return GP_EOK;
}

static void
statement_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req *req = arg;
    const char *tenant = gp_req_param(req, "tenant");
    const msg_billing_query *q = gp_req_in(req);

    if (err != GP_EOK || nres < 1) {
        gp_req_done(req, gp_req_fail(req, GP_EUNAVAIL, "database: %s", detail));
        return;
    }
    if (PQntuples(res[nres - 1]) == 0) {
        gp_req_done(req, gp_req_fail(req, GP_ENOTFOUND, "no statement for %s: the period is open",
                                     q->period));
        return;
    }
    if (tenant == NULL || tenant[0] == '\0')
        tenant = q->tenant;
    err = statement_from(gp_req_out(req), tenant, q->period, PQgetvalue(res[nres - 1], 0, 0),
                         PQgetvalue(res[nres - 1], 0, 1), PQgetvalue(res[nres - 1], 0, 2), true);
    gp_req_done(req, err == GP_EOK ? GP_EOK : gp_req_fail(req, err, "statement"));
}

static gp_err
on_statement(gp_req *req, const void *in, void *out)
{
    const msg_billing_query *q = in;
    const char              *tenant, *p[2];
    gp_err                   rc;

    (void)out;
    if ((rc = scope(req, q, &tenant)) != GP_EOK)
        return rc;
    if (!q->period[0])
        return gp_req_fail(req, GP_EMISSING, "period: which statement (YYYY-MM)");
    p[0] = tenant;
    p[1] = q->period;
    if (tenant_query(req, tenant, "SELECT issued_ms, hash, content FROM statements"
                                  " WHERE tenant = $1 AND period = $2",
                     2, p, statement_read) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

static gp_err
on_close(gp_req *req, const void *in, void *out)
{
    const msg_billing_query *q = in;
    billing                 *b = gp_req_state(req);
    char                     now[24];
    const char              *p[3] = {q->tenant, q->period, now};

    (void)out;
    if (!gp_id_ok(q->tenant) || !period_ok(q->period))
        return gp_req_fail(req, GP_EINVAL, "tenant (an id) and period (YYYY-MM) are required");
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    if (gp_db_query(gp_app_db(b->app), "SELECT * FROM bill_close_period($1, $2, $3::bigint)", 3,
                    p, 0, statement_read, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

static void
statements_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req             *req = arg;
    msg_statement_list *out = gp_req_out(req);
    msg_statement      *v;
    int                 n;

    if (err != GP_EOK || nres < 1) {
        gp_req_done(req, gp_req_fail(req, GP_EUNAVAIL, "database: %s", detail));
        return;
    }
    n = PQntuples(res[nres - 1]);
    if (n > MSG_STATEMENT_LIST_STATEMENTS_MAXITEMS)
        n = MSG_STATEMENT_LIST_STATEMENTS_MAXITEMS;
    if (n > 0 && (v = calloc((size_t)n, sizeof(*v))) != NULL) {
        for (int i = 0; i < n; i++)
            statement_from(&v[i], gp_req_param(req, "tenant"), PQgetvalue(res[nres - 1], i, 0),
                           PQgetvalue(res[nres - 1], i, 1), PQgetvalue(res[nres - 1], i, 2), "",
                           false);
        out->statements.v = v;
        out->statements.n = (uint32_t)n;
    }
    gp_req_done(req, GP_EOK);
}

static gp_err
on_statements(gp_req *req, const void *in, void *out)
{
    const char *tenant;
    gp_err      rc;

    (void)out;
    if ((rc = scope(req, in, &tenant)) != GP_EOK)
        return rc;
    if (tenant_query(req, tenant, "SELECT period, issued_ms, hash FROM statements"
                                  " WHERE tenant = $1 ORDER BY period DESC LIMIT 240",
                     1, &tenant, statements_read) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

/* ---- balances and usage ------------------------------------------------------------ */

static void
list_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req            *req = arg;
    const gp_msg_desc *d = gp_req_op(req)->out;
    const char        *field = d == &msg_usage_list_desc ? "records"
                             : d == &msg_price_list_desc ? "prices" : "balances";

    if (err != GP_EOK || nres < 1) {
        gp_req_done(req, gp_req_fail(req, GP_EUNAVAIL, "database: %s", detail));
        return;
    }
    err = gp_dbrow_named_to_array(d, field, res[nres - 1], gp_req_out(req));
    if (err == GP_EOK && d == &msg_usage_list_desc) {
        msg_usage_list *u = gp_req_out(req);
        const msg_billing_query *q = gp_req_in(req);
        uint32_t limit = q->limit ? q->limit : USAGE_PAGE;

        if (u->records.n == limit)
            snprintf(u->next, sizeof(u->next), "%s",
                     ((msg_billed_usage *)u->records.v)[u->records.n - 1].id);
    }
    gp_req_done(req, err == GP_EOK ? GP_EOK : gp_req_fail(req, err, "rows"));
}

static gp_err
on_balances(gp_req *req, const void *in, void *out)
{
    const char *tenant;
    gp_err      rc;

    (void)out;
    if ((rc = scope(req, in, &tenant)) != GP_EOK)
        return rc;
    if (tenant_query(req, tenant,
                    "SELECT a.id AS account, a.tenant, a.purpose, a.currency,"
                    " sum(e.amount) AS amount_nanos,"
                    " bill_minor(sum(e.amount)::bigint, x.exponent) AS amount_minor"
                    " FROM ledger_accounts a JOIN ledger_entries e ON e.account = a.id"
                    " JOIN currency_exponents x ON x.code = a.currency"
                    " WHERE a.tenant = $1 GROUP BY a.id, x.exponent ORDER BY a.id LIMIT 1000",
                    1, &tenant, list_read) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

static gp_err
on_usage(gp_req *req, const void *in, void *out)
{
    const msg_billing_query *q = in;
    billing                 *b = gp_req_state(req);
    const char              *tenant, *p[6];
    char                     lim[16];
    gp_err                   rc;

    (void)out;
    if ((rc = scope(req, q, &tenant)) != GP_EOK)
        return rc;
    snprintf(lim, sizeof(lim), "%u", q->limit ? q->limit : USAGE_PAGE);
    p[0] = tenant;
    p[1] = q->site;
    p[2] = q->period;
    p[3] = q->after;
    p[4] = lim;
    p[5] = b->cfg->operator_tenant;
    if (tenant_query(req, tenant,
                    "SELECT u.id, u.tenant, u.site, u.site_owner, u.job_id, u.attempt, u.node,"
                    " u.window_idx * u.window_ms AS window_start_ms, u.gpu_ms, u.energy_mj,"
                    " u.currency, u.gpu_nanos AS charge_nanos, u.power_currency, u.power_nanos,"
                    " coalesce(c.uncharged_gpu_ms, 0) AS credited_gpu_ms, u.final, u.fault,"
                    " u.period FROM usage_records u"
                    " LEFT JOIN fault_credits c ON c.record_id = u.id"
                    " WHERE ($1 = $6 OR u.tenant = $1 OR u.site_owner = $1)"
                    " AND ($2 = '' OR u.site = $2) AND ($3 = '' OR u.period = $3)"
                    " AND u.id > $4 ORDER BY u.id LIMIT $5::int",
                    6, p, list_read) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

/* ---- the price book (operator) ----------------------------------------------------- */

/* A version in force from the past would re-rate nothing already posted
 * and everything late: it is refused.  A minute of grace for the clocks of
 * the operator's machine and ours. */
#define PRICE_PAST_GRACE_MS 60000

static void
price_set_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req      *req = arg;
    billing     *b = gp_req_state(req);
    msg_price   *out = gp_req_out(req);
    const msg_price *in = gp_req_in(req);

    if (err != GP_EOK || nres < 1 || PQntuples(res[0]) != 1) {
        gp_req_done(req, gp_req_fail(req, err != GP_EOK ? err : GP_EINTERNAL, "database: %s",
                                     detail));
        return;
    }
    if (strcmp(PQgetvalue(res[0], 0, 0), in->currency) != 0 ||
        strtoull(PQgetvalue(res[0], 0, 1), NULL, 10) != in->micros_per_gpu_hour) {
        gp_req_done(req, gp_req_fail(req, GP_ECONFLICT, "product %s has another price from %s ms"
                                     " (%s %s micros a GPU-hour); a version never changes",
                                     in->product, PQgetvalue(res[0], 0, 2), PQgetvalue(res[0], 0, 0),
                                     PQgetvalue(res[0], 0, 1)));
        return;
    }
    *out = *in;
    out->from_ms = strtoull(PQgetvalue(res[0], 0, 2), NULL, 10);
    GP_SET_HAS(out, MSG_PRICE__FROM_MS);
    GP_INFO("price_set", "product=%s currency=%s micros_per_gpu_hour=%llu from_ms=%llu",
            out->product, out->currency, (unsigned long long)out->micros_per_gpu_hour,
            (unsigned long long)out->from_ms);
    billing_book_run(b->app, b);          /* rate with it from now on */
    gp_req_done(req, GP_EOK);
}

static gp_err
on_price_set(gp_req *req, const void *in, void *out)
{
    const msg_price *p = in;
    uint64_t         now = gp_wall_ms(), from = p->from_ms ? p->from_ms : now;
    char             micros[24], fr[24];
    const char      *params[4] = {p->product, p->currency, micros, fr};

    (void)out;
    if (!gp_id_ok(p->product))
        return gp_req_fail(req, GP_EINVAL, "product: must be 1 to 63 of [A-Za-z0-9_-]");
    if (gp_currency_exponent(p->currency) < 0)
        return gp_req_fail(req, GP_EINVAL, "currency %s: not an ISO 4217 code we know",
                           p->currency);
    if (from + PRICE_PAST_GRACE_MS < now)
        return gp_req_fail(req, GP_EINVAL, "from_ms %llu is in the past: a version starts now or "
                           "later (records already rated keep their price)",
                           (unsigned long long)from);
    snprintf(micros, sizeof(micros), "%llu", (unsigned long long)p->micros_per_gpu_hour);
    snprintf(fr, sizeof(fr), "%llu", (unsigned long long)from);
    /* the same version again returns itself; another price at it: CONFLICT */
    if (gp_db_query(gp_app_db(gp_req_app(req)),
                    "WITH i AS (INSERT INTO price_book VALUES ($1, $2, $3::bigint, $4::bigint)"
                    "  ON CONFLICT (product, from_ms) DO NOTHING"
                    "  RETURNING currency, micros_per_gpu_hour, from_ms)"
                    " SELECT * FROM i UNION ALL SELECT currency, micros_per_gpu_hour, from_ms"
                    " FROM price_book WHERE product = $1 AND from_ms = $4::bigint"
                    " AND NOT EXISTS (SELECT 1 FROM i)",
                    4, params, 0, price_set_done, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

static gp_err
on_price_list(gp_req *req, const void *in, void *out)
{
    (void)in;
    (void)out;
    if (gp_db_query(gp_app_db(gp_req_app(req)),
                    "SELECT product, currency, micros_per_gpu_hour, from_ms FROM price_book"
                    " ORDER BY product, from_ms LIMIT 1000",
                    0, NULL, 0, list_read, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

const gp_route billing_api_routes[] = {
    {GP_OP_API_BILLING_USAGE, on_usage, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_BILLING_STATEMENTS, on_statements, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_BILLING_STATEMENT, on_statement, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_BILLING_BALANCES, on_balances, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_BILLING_CLOSE, on_close, GP_R_QUEUE, 30000, NULL, NULL},
    {GP_OP_ADMIN_BILLING_PRICE_SET, on_price_set, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_BILLING_PRICE_LIST, on_price_list, GP_R_QUEUE, 0, NULL, NULL},
    {NULL},
};
