/* billing_test.c -- gridpool-billing against real servers, with a case
 * computed by hand.  A partner 'bp1' (30% revenue share) owns site 'bsite'
 * (power billed in KWD, exponent 3: 0.030 KWD/kWh before 06:00 local,
 * 0.075 after; PUE 1.25; latency tier 0, x1.20); product 'bh100' is sold in
 * USD (exponent 2) at 2.50 per GPU-hour until 06:00 UTC on 2026-12-01 and
 * 3.00 after; the platform fee is 5%.
 *
 *   R1 (the hour from 05:00): 1 GPU-hour, 1 kWh
 *     GPU   2.50 x 1.20 = 3.00 USD = 300 cents: partner 90, operator 195, fee 15
 *     power 1 x 0.030 x 1.25 = 0.0375 KWD = 37.5 fils -> 38 (half to even)
 *   R2 (the hour from 06:00): 0.5 GPU-hour, 0.5 kWh
 *     GPU   0.5 x 3.00 x 1.20 = 1.80 USD = 180 cents: partner 54, operator 117, fee 9
 *     power 0.5 x 0.075 x 1.25 = 0.046875 KWD = 46.875 fils -> 47
 *
 * So, in the ledger's nanos: bc1.receivable.USD 4.80, bp1.payable.USD -1.44,
 * op.revenue.USD -3.12, op.fees.USD -0.24; bc1.receivable.KWD 0.084375,
 * bp1.power.KWD -0.084375 (a statement rounds its lines to cents and fils).  R1 sent again
 * (another Nats-Msg-Id, so the stream keeps both) is a no-op.  Refused and
 * kept for review: impossible counters, an unknown site, a currency that
 * is not the product's, a record without a tenant (unknown attempt).  The
 * database itself refuses an unbalanced transfer and any UPDATE or DELETE
 * of the ledger.  bc2's attempt lost after its checkpoint (publish_fault)
 * is charged only up to the checkpoint. */
#include <libpq-fe.h>

#include "gp/call.h"
#include "gp/clock.h"
#include "gp/money.h"
#include "msg_gen.h"
#include "test_stack.h"

static struct ev_loop *loop;
static gp_bus         *bus;
static PGconn         *pg;
static int             acked;

static void
on_ack(void *arg, gp_err err)
{
    (void)arg;
    acked += err == GP_EOK;
}

static char *
q1(const char *sql)
{
    static char out[512];
    PGresult   *r = PQexec(pg, sql);

    snprintf(out, sizeof(out), "%s",
             PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0)
                 ? PQgetvalue(r, 0, 0)
                 : PQresultStatus(r) == PGRES_TUPLES_OK ? "" : PQresultErrorMessage(r));
    PQclear(r);
    return out;
}

static gp_err
admin(const gp_op *op, const gp_msg_desc *d, const void *m, const gp_msg_desc *rd)
{
    char  subj[GP_MAX_SUBJECT], detail[256];
    void *out = calloc(1, 4096);
    gp_err rc;

    gp_op_subject(op, subj, sizeof(subj), NULL);
    rc = tl_call(loop, bus, subj, d, m, rd, out, 5000, detail, sizeof(detail));
    gp_msg_clear(rd, out);
    free(out);
    return rc;
}

static void
tenant(const char *id, int kind, const char *parent, int share)
{
    msg_tenant t = {0};

    snprintf(t.id, sizeof(t.id), "%s", id);
    snprintf(t.parent, sizeof(t.parent), "%s", parent);
    t.kind = kind;
    t.revenue_share_bp = share;
    GP_SET_HAS(&t, MSG_TENANT__REVENUE_SHARE_BP);
    gp_err rc = admin(GP_OP_ADMIN_TENANT_CREATE, &msg_tenant_desc, &t, &msg_tenant_desc);
    T_OKM(rc == GP_EOK || rc == GP_EEXISTS, "tenant %s (%s)", id, gp_err_name(rc));
}

/* 2026-12-01 00:00 UTC */
#define DAY_MS 1796083200000ull

static void
publish(const char *msgid, const char *id, const char *site, const char *tenant_id,
        uint64_t at_ms, uint64_t gpu_ms, uint64_t mj, uint64_t seq, const char *cur)
{
    msg_usage_record r = {0};
    gp_buf           b = GP_BUF_INIT;
    char             subj[GP_MAX_SUBJECT];

    snprintf(r.id, sizeof(r.id), "%s", id);
    snprintf(r.job_id, sizeof(r.job_id), "j-bill");
    r.attempt = 1;
    snprintf(r.tenant, sizeof(r.tenant), "%s", tenant_id);
    snprintf(r.site, sizeof(r.site), "%s", site);
    snprintf(r.node, sizeof(r.node), "bn1");
    snprintf(r.product, sizeof(r.product), "bh100");
    GP_SET_HAS(&r, MSG_USAGE_RECORD__PRODUCT);
    r.gpus = 1;
    r.window_ms = 3600000;                  /* hour windows: a GPU-hour fits */
    r.window = at_ms / 3600000;
    r.first_ms = at_ms;
    r.last_ms = at_ms + 3599000;
    r.gpu_ms = gpu_ms;
    r.energy_mj = mj;
    r.to_gpu_ms = gpu_ms;
    r.to_energy_mj = mj;
    r.site_seq = seq;
    if (cur != NULL) {
        snprintf(r.currency, sizeof(r.currency), "%s", cur);
        r.price_micros_per_gpu_hour = 2500000;
        GP_SET_HAS(&r, MSG_USAGE_RECORD__CURRENCY);
        GP_SET_HAS(&r, MSG_USAGE_RECORD__PRICE_MICROS_PER_GPU_HOUR);
    }
    gp_msg_encode(&msg_usage_record_desc, &r, &b);
    gp_op_subjectf(GP_OP_USAGE_RECORD, subj, sizeof(subj), site);
    T_OKM(gp_bus_js_pub(bus, subj, msgid, b.p, b.n, on_ack, NULL) == GP_EOK, "publish %s", msgid);
    gp_buf_fini(&b);
}

/* An attempt of customer bc2 lost after its checkpoint: one GPU-hour from
 * 05:00 (counted 0 -> 3,600,000 GPU-ms, 0 -> 3.6e9 mJ), its checkpoint at
 * 2,700,000 GPU-ms and 2.7e9 mJ, then a final record (the node was lost: a
 * platform fault).  The last quarter hour is not the customer's: 0.75 USD
 * and 0.009375 KWD go to the operator's failed_cost. */
static void
publish_fault(const char *msgid, bool final, uint64_t seq)
{
    msg_usage_record r = {0};
    gp_buf           b = GP_BUF_INIT;
    char             subj[GP_MAX_SUBJECT];

    snprintf(r.id, sizeof(r.id), "j-fail.1.bn1.%s", final ? "b" : "a");
    snprintf(r.job_id, sizeof(r.job_id), "j-fail");
    r.attempt = 1;
    snprintf(r.tenant, sizeof(r.tenant), "bc2");
    snprintf(r.site, sizeof(r.site), "bsite");
    snprintf(r.node, sizeof(r.node), "bn1");
    snprintf(r.product, sizeof(r.product), "bh100");
    GP_SET_HAS(&r, MSG_USAGE_RECORD__PRODUCT);
    r.gpus = 1;
    r.window_ms = 3600000;
    r.window = (DAY_MS + (final ? 360 : 300) * 60000ull) / 3600000;
    r.first_ms = r.window * 3600000;
    r.last_ms = r.first_ms + 3599000;
    r.gpu_ms = final ? 0 : 3600000;
    r.energy_mj = final ? 0 : 3600000000ull;
    r.from_gpu_ms = final ? 3600000 : 0;
    r.to_gpu_ms = 3600000;
    r.from_energy_mj = final ? 3600000000ull : 0;
    r.to_energy_mj = 3600000000ull;
    r.site_seq = seq;
    r.final = final;
    if (final) {
        r.fault = true;
        r.end = MSG_USAGE_RECORD_END_LOST;
        r.end_event = MSG_USAGE_RECORD_END_EVENT_NONE;
        r.ckpt_gpu_ms = 2700000;
        r.ckpt_energy_mj = 2700000000ull;
        GP_SET_HAS(&r, MSG_USAGE_RECORD__FAULT);
        GP_SET_HAS(&r, MSG_USAGE_RECORD__END);
        GP_SET_HAS(&r, MSG_USAGE_RECORD__END_EVENT);
        GP_SET_HAS(&r, MSG_USAGE_RECORD__CKPT_GPU_MS);
        GP_SET_HAS(&r, MSG_USAGE_RECORD__CKPT_ENERGY_MJ);
    }
    gp_msg_encode(&msg_usage_record_desc, &r, &b);
    gp_op_subjectf(GP_OP_USAGE_RECORD, subj, sizeof(subj), "bsite");
    T_OKM(gp_bus_js_pub(bus, subj, msgid, b.p, b.n, on_ack, NULL) == GP_EOK, "publish %s", msgid);
    gp_buf_fini(&b);
}

static void
wait_for(const char *sql, const char *want, double s)
{
    for (double t0 = tl_now(); tl_now() - t0 < s && strcmp(q1(sql), want) != 0;)
        tl_spin(loop, 0.1);
}

static gp_err
ask(const gp_op *op, const char *tenant, const msg_billing_query *q, const gp_msg_desc *rd,
    void *out, char *detail, size_t dlen)
{
    char subj[GP_MAX_SUBJECT];

    if (tenant != NULL)
        gp_op_subjectf(op, subj, sizeof(subj), tenant);
    else
        gp_op_subject(op, subj, sizeof(subj), NULL);
    return tl_call(loop, bus, subj, &msg_billing_query_desc, q, rd, out, 10000, detail, dlen);
}

static const char *
line_of(const msg_statement *st, const char *cur, const char *purpose, const char *up)
{
    static char out[160];
    const msg_statement_line *l = st->lines.v;

    out[0] = '\0';
    for (uint32_t i = 0; i < st->lines.n; i++)
        if (!strcmp(l[i].currency, cur) && !strcmp(l[i].purpose, purpose) &&
            !strcmp(l[i].usage_period, up) && !strcmp(l[i].kind, "charge"))
            snprintf(out, sizeof(out), "%lld/%lld%s", (long long)l[i].amount_nanos,
                     (long long)l[i].amount_minor, l[i].correction ? " correction" : "");
    return out;
}

/* The price book through gp.admin.billing.price.*: a version is added,
 * the same again is a no-op, another price at it is CONFLICT, one that
 * starts in the past is refused, and the list shows the book. */
static void
price_book_api(void)
{
    msg_price      p = {0}, out = {0};
    msg_list_request lq = {0};
    msg_price_list l = {0};
    char           detail[256], from[24];
    uint64_t       t = gp_wall_ms() + 3600000;
    gp_err         rc;

    snprintf(p.product, sizeof(p.product), "bprod-api");
    snprintf(p.currency, sizeof(p.currency), "EUR");
    p.micros_per_gpu_hour = 2500000;
    p.from_ms = t;
    GP_SET_HAS(&p, MSG_PRICE__FROM_MS);
    rc = tl_call(loop, bus, GP_SUBJ_ADMIN_BILLING_PRICE_SET, &msg_price_desc, &p, &msg_price_desc,
                 &out, 10000, detail, sizeof(detail));
    T_OKM(rc == GP_EOK && out.from_ms == t && out.micros_per_gpu_hour == 2500000,
          "a price version is set (%s %s)", gp_err_name(rc), detail);
    gp_msg_clear(&msg_price_desc, &out);
    snprintf(from, sizeof(from), "%llu", (unsigned long long)t);
    T_OKM(strcmp(q1("SELECT count(*) || ' ' || max(micros_per_gpu_hour) FROM price_book"
                    " WHERE product = 'bprod-api'"), "1 2500000") == 0, "it is in price_book");
    rc = tl_call(loop, bus, GP_SUBJ_ADMIN_BILLING_PRICE_SET, &msg_price_desc, &p, &msg_price_desc,
                 &out, 10000, detail, sizeof(detail));
    gp_msg_clear(&msg_price_desc, &out);
    T_OKM(rc == GP_EOK, "the same version again: a no-op (%s)", gp_err_name(rc));
    p.micros_per_gpu_hour = 3000000;
    rc = tl_call(loop, bus, GP_SUBJ_ADMIN_BILLING_PRICE_SET, &msg_price_desc, &p, &msg_price_desc,
                 &out, 10000, detail, sizeof(detail));
    gp_msg_clear(&msg_price_desc, &out);
    T_OKM(rc == GP_ECONFLICT, "another price at the same version: CONFLICT (%s: %s)",
          gp_err_name(rc), detail);
    p.from_ms = gp_wall_ms() - 86400000;
    rc = tl_call(loop, bus, GP_SUBJ_ADMIN_BILLING_PRICE_SET, &msg_price_desc, &p, &msg_price_desc,
                 &out, 10000, detail, sizeof(detail));
    gp_msg_clear(&msg_price_desc, &out);
    T_OKM(rc == GP_EINVAL && strstr(detail, "in the past") != NULL,
          "a version starting yesterday is refused (%s: %s)", gp_err_name(rc), detail);
    snprintf(p.currency, sizeof(p.currency), "XYZ");
    p.from_ms = 0;
    rc = tl_call(loop, bus, GP_SUBJ_ADMIN_BILLING_PRICE_SET, &msg_price_desc, &p, &msg_price_desc,
                 &out, 10000, detail, sizeof(detail));
    gp_msg_clear(&msg_price_desc, &out);
    T_OKM(rc == GP_EINVAL, "an unknown currency is refused (%s: %s)", gp_err_name(rc), detail);
    rc = tl_call(loop, bus, GP_SUBJ_ADMIN_BILLING_PRICE_LIST, &msg_list_request_desc, &lq,
                 &msg_price_list_desc, &l, 10000, detail, sizeof(detail));
    int found = 0;
    for (uint32_t i = 0; rc == GP_EOK && i < l.prices.n; i++) {
        const msg_price *v = (const msg_price *)l.prices.v + i;

        found += strcmp(v->product, "bprod-api") == 0 && v->from_ms == t &&
                 v->micros_per_gpu_hour == 2500000;
    }
    T_OKM(rc == GP_EOK && found == 1 && (int)l.prices.n == atoi(q1("SELECT count(*) FROM price_book")),
          "the list is the book (%u versions)", l.prices.n);
    gp_msg_clear(&msg_price_list_desc, &l);
}

/* Periods and statements; who sees what through gp.api.<tenant>.billing. */
static void
statements_and_scopes(void)
{
    msg_billing_query  q = {0};
    msg_statement     *st = calloc(1, sizeof(*st)), *st2 = calloc(1, sizeof(*st2));
    msg_usage_list     ul = {0};
    msg_balance_list   bl = {0};
    char               detail[256], hash1[80], content1[MSG_STATEMENT_CONTENT_MAXLEN + 1];
    gp_err             rc;

    snprintf(q.tenant, sizeof(q.tenant), "bc1");
    snprintf(q.period, sizeof(q.period), "2026-12");
    rc = ask(GP_OP_ADMIN_BILLING_CLOSE, NULL, &q, &msg_statement_desc, st, detail, sizeof(detail));
    T_OKM(rc == GP_EOK, "bc1's 2026-12 closed (%s %s)", gp_err_name(rc), detail);
    snprintf(hash1, sizeof(hash1), "%s", st->hash);
    snprintf(content1, sizeof(content1), "%s", st->content);
    T_OKM(strcmp(line_of(st, "USD", "receivable", "2026-12"), "4800000000/480") == 0,
          "statement: USD 4.80 owed, 480 cents (%s)", line_of(st, "USD", "receivable", "2026-12"));
    T_OKM(strstr(st->content, "total KWD 84\n") != NULL && strstr(st->content, "total USD 480\n"),
          "totals: 480 cents, 84 fils (84.375 rounded half to even)");
    T_OKM(strstr(st->content, "line KWD rounding rounding 2026-12 375000 0\n") != NULL,
          "the 0.375 fils the rounding took are a line of the statement (0 minor units)");
    T_OKM(strcmp(q1("SELECT count(*) || ' ' || sum(e.amount) FROM ledger_transfers t"
                    " JOIN ledger_entries e ON e.transfer_id = t.id"
                    " JOIN statement_items s ON s.transfer_id = t.id"
                    " WHERE t.kind = 'rounding' AND s.tenant = 'bc1' AND s.period = '2026-12'"
                    " AND e.account = 'bc1.rounding.KWD'"), "1 375000") == 0,
          "closing booked them on bc1's rounding account, in a transfer on the statement (%s)",
          q1("SELECT string_agg(e.account || '=' || e.amount, ' ') FROM ledger_transfers t"
             " JOIN ledger_entries e ON e.transfer_id = t.id WHERE t.kind = 'rounding'"));
    T_OKM(strcmp(q1("SELECT count(*) FROM (SELECT a.id, sum(e.amount) AS n, x.exponent"
                    " FROM statement_items s JOIN ledger_entries e ON e.transfer_id = s.transfer_id"
                    " JOIN ledger_accounts a ON a.id = e.account"
                    " JOIN currency_exponents x ON x.code = a.currency"
                    " WHERE s.tenant = 'bc1' AND s.period = '2026-12' AND a.tenant = 'bc1'"
                    " AND a.purpose <> 'rounding' GROUP BY 1, 3) z"
                    " WHERE n % (10::bigint ^ (9 - exponent))::bigint <> 0"), "0") == 0 &&
              strcmp(q1("SELECT count(*) FROM (SELECT transfer_id FROM ledger_entries"
                        " GROUP BY transfer_id, currency HAVING sum(amount) <> 0) u"), "0") == 0,
          "every account's part of the statement is whole minor units, every transfer balanced");
    gp_msg_clear(&msg_statement_desc, st);

    /* a late record of 2026-12: 0.25 GPU-hour from 07:00 = 0.90 USD */
    publish("m10", "j-bill.1.bn1.g", "bsite", "bc1", DAY_MS + 420 * 60000, 900000, 0, 8, NULL);
    wait_for("SELECT count(*) FROM usage_records WHERE id = 'j-bill.1.bn1.g'", "1", 20);
    rc = ask(GP_OP_ADMIN_BILLING_CLOSE, NULL, &q, &msg_statement_desc, st, detail, sizeof(detail));
    T_OKM(rc == GP_EOK && strcmp(st->hash, hash1) == 0 && strcmp(st->content, content1) == 0,
          "closing 2026-12 again: the same statement, hash unchanged");
    gp_msg_clear(&msg_statement_desc, st);
    snprintf(q.period, sizeof(q.period), "2027-01");
    rc = ask(GP_OP_ADMIN_BILLING_CLOSE, NULL, &q, &msg_statement_desc, st2, detail, sizeof(detail));
    T_OKM(rc == GP_EOK && strcmp(line_of(st2, "USD", "receivable", "2026-12"),
                                 "900000000/90 correction") == 0,
          "the late record is a correction on 2027-01 naming 2026-12 (%s)",
          line_of(st2, "USD", "receivable", "2026-12"));
    gp_msg_clear(&msg_statement_desc, st2);
    T_OKM(strcmp(q1("SELECT hash FROM statements WHERE tenant = 'bc1' AND period = '2026-12'"),
                 hash1) == 0 &&
              strcmp(q1("SELECT count(*) FROM statements WHERE hash <>"
                        " encode(sha256(convert_to(content, 'UTF8')), 'hex')"), "0") == 0,
          "the closed statement's hash is unchanged and is sha256 of its content");
    T_OKM(strcmp(q1("SELECT count(*) FROM currency_exponents"), "50") == 0,
          "currency exponents: 50 in the database");
    PGresult *r = PQexec(pg, "SELECT code, exponent FROM currency_exponents");
    int       bad = 0;
    for (int i = 0; i < PQntuples(r); i++)
        bad += gp_currency_exponent(PQgetvalue(r, i, 0)) != atoi(PQgetvalue(r, i, 1));
    PQclear(r);
    T_OKM(bad == 0, "... each the same as gp/money.h's (%d differ)", bad);

    /* scopes */
    q = (msg_billing_query){0};
    q.limit = 500;
    rc = ask(GP_OP_API_BILLING_USAGE, "bc2", &q, &msg_usage_list_desc, &ul, detail, sizeof(detail));
    T_OKM(rc == GP_EOK && ul.records.n == 2, "bc2 sees its 2 records (%u %s %s)", ul.records.n, gp_err_name(rc), detail);
    gp_msg_clear(&msg_usage_list_desc, &ul);
    rc = ask(GP_OP_API_BILLING_USAGE, "bp1", &q, &msg_usage_list_desc, &ul, detail, sizeof(detail));
    T_OKM(rc == GP_EOK && ul.records.n == 5, "partner bp1 sees the 5 records of its site (%u)",
          ul.records.n);
    gp_msg_clear(&msg_usage_list_desc, &ul);
    snprintf(q.period, sizeof(q.period), "2026-12");
    rc = ask(GP_OP_API_BILLING_STATEMENT, "bc2", &q, &msg_statement_desc, st, detail,
             sizeof(detail));
    T_OKM(rc == GP_ENOTFOUND, "bc2 does not see bc1's statement (%s)", gp_err_name(rc));
    gp_msg_clear(&msg_statement_desc, st);
    snprintf(q.tenant, sizeof(q.tenant), "bc1");
    rc = ask(GP_OP_API_BILLING_USAGE, "bc2", &q, &msg_usage_list_desc, &ul, detail, sizeof(detail));
    T_OKM(rc == GP_EDENIED, "a query naming another tenant is refused (%s)", gp_err_name(rc));
    gp_msg_clear(&msg_usage_list_desc, &ul);
    q = (msg_billing_query){0};
    rc = ask(GP_OP_API_BILLING_BALANCES, "bp1", &q, &msg_balance_list_desc, &bl, detail,
             sizeof(detail));
    long long payable = 0;
    for (uint32_t i = 0; rc == GP_EOK && i < bl.balances.n; i++)
        if (!strcmp(((msg_balance *)bl.balances.v)[i].account, "bp1.payable.USD"))
            payable = ((msg_balance *)bl.balances.v)[i].amount_nanos;
    T_OKM(rc == GP_EOK && payable == -2610000000LL &&
              strcmp(q1("SELECT sum(amount) FROM ledger_entries WHERE account = 'bp1.payable.USD'"),
                     "-2610000000") == 0,
          "bp1's visible revenue share = its payable account in the ledger (%lld)", payable);
    gp_msg_clear(&msg_balance_list_desc, &bl);
    free(st);
    free(st2);
}

/* Row-level security: a partner's own PostgreSQL login (a member of its
 * tenant role) reads only its rows, and writes nothing; the refusals come
 * from PostgreSQL itself. */
static PGconn *
login_as(const char *role)
{
    char        ci[512];
    const char *base = tl_env("GP_PG_CONNINFO"), *at = strchr(base, '@');

    snprintf(ci, sizeof(ci), "postgresql://%s%s", role, at != NULL ? at : "");
    return PQconnectdb(ci);
}

static long long
count_as(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    long long v = PQresultStatus(r) == PGRES_TUPLES_OK ? strtoll(PQgetvalue(r, 0, 0), NULL, 10)
                                                       : -1;
    PQclear(r);
    return v;
}

static void
row_security(void)
{
    PGconn   *p1, *c2;
    PGresult *r;

    PQclear(PQexec(pg, "DROP ROLE IF EXISTS bp1_login; DROP ROLE IF EXISTS bc2_login"));
    r = PQexec(pg, "CREATE ROLE bp1_login LOGIN IN ROLE gpt_bp1;"
                   " CREATE ROLE bc2_login LOGIN IN ROLE gpt_bc2");
    T_OKM(PQresultStatus(r) == PGRES_COMMAND_OK, "logins for partner bp1 and customer bc2 (%s)",
          PQresultErrorMessage(r));
    PQclear(r);
    p1 = login_as("bp1_login");
    c2 = login_as("bc2_login");
    T_OK(PQstatus(p1) == CONNECTION_OK && PQstatus(c2) == CONNECTION_OK);
    T_OKM(count_as(p1, "SELECT count(*) FROM usage_records") == 5 &&
              count_as(pg, "SELECT count(*) FROM usage_records") == 5,
          "bp1 (SQL, its own login) sees the 5 records of its site");
    T_OKM(count_as(c2, "SELECT count(*) FROM usage_records") == 2,
          "bc2 (SQL) sees its own 2 records only (%lld)",
          count_as(c2, "SELECT count(*) FROM usage_records"));
    T_OKM(count_as(p1, "SELECT count(*) FROM ledger_accounts WHERE tenant <> 'bp1'") == 0 &&
              count_as(p1, "SELECT count(*) FROM ledger_accounts") == 2,
          "bp1 sees only its 2 accounts (of %lld)",
          count_as(pg, "SELECT count(*) FROM ledger_accounts"));
    T_OKM(count_as(p1, "SELECT count(*) FROM statements") == 0 &&
              count_as(pg, "SELECT count(*) FROM statements WHERE tenant = 'bc1'") == 2,
          "bp1 sees none of bc1's statements");
    T_OKM(count_as(p1, "SELECT sum(amount) FROM ledger_entries WHERE account = 'bp1.payable.USD'")
              == count_as(pg, "SELECT sum(amount) FROM ledger_entries"
                              " WHERE account = 'bp1.payable.USD'") &&
              count_as(p1, "SELECT count(*) FROM ledger_entries e JOIN ledger_accounts a"
                           " ON a.id = e.account WHERE a.tenant <> 'bp1'") == 0,
          "bp1's visible revenue share is its payable account's ledger sum, and no one else's "
          "entries");
    r = PQexec(p1, "INSERT INTO ledger_accounts VALUES ('bp1.revenue.USD', 'bp1', 'revenue',"
                   " 'USD')");
    T_OKM(PQresultStatus(r) == PGRES_FATAL_ERROR &&
              strcmp(PQresultErrorField(r, PG_DIAG_SQLSTATE), "42501") == 0,
          "PostgreSQL refuses bp1 a write: %s", PQresultErrorMessage(r));
    PQclear(r);
    r = PQexec(c2, "SET ROLE gpt_bp1");
    T_OKM(PQresultStatus(r) == PGRES_FATAL_ERROR, "... and bc2 another tenant's role: %s",
          PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(p1);
    PQfinish(c2);
}

int
main(void)
{
    gp_bus_opts    bo = {.url = tl_env("GP_NATS_URL"), .name = "billing-test", .jetstream = true};
    char           bin[512], bbin[512], port[16];
    const char    *rargv[] = {bin, "--http-port", "0", NULL};
    const char    *bargv[] = {bbin, "--http-port", port, "--book-ms", "200", NULL};
    msg_site       s = {0};
    msg_power_price pp[2] = {{0}};
    pid_t          reg, bil;
    PGresult      *res;

    loop = ev_default_loop(0);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    pg = PQconnectdb(tl_env("GP_PG_CONNINFO"));
    T_OK(PQstatus(pg) == CONNECTION_OK);
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-registry", tl_env("GP_BUILD"));
    snprintf(bbin, sizeof(bbin), "%s/bin/gridpool-billing", tl_env("GP_BUILD"));
    snprintf(port, sizeof(port), "%d", tl_free_port());
    reg = tl_spawn((char *const *)rargv);
    bil = tl_spawn((char *const *)bargv);
    wait_for("SELECT count(*) FROM gp_migrations WHERE service = 'billing'", "1", 20);
    wait_for("SELECT count(*) FROM gp_migrations WHERE service = 'registry' AND version >= 1",
             "1", 20);
    tl_spin(loop, 1.0);

    tenant("op", MSG_TENANT_KIND_OPERATOR, "", 0);
    tenant("bp1", MSG_TENANT_KIND_PARTNER, "op", 3000);
    tenant("bc1", MSG_TENANT_KIND_CUSTOMER, "op", 0);
    snprintf(s.id, sizeof(s.id), "bsite");
    snprintf(s.tenant, sizeof(s.tenant), "bp1");
    snprintf(s.region, sizeof(s.region), "eu");
    snprintf(s.currency, sizeof(s.currency), "KWD");
    s.latency_tier = 0;
    s.pue_milli = 1250;
    s.timezone_min = 0;
    pp[0].start_min = 0;
    pp[0].price_micros_per_kwh = 30000;
    pp[1].start_min = 360;
    pp[1].price_micros_per_kwh = 75000;
    s.power_prices.v = pp;
    s.power_prices.n = 2;
    s.has = ~0ull & ~((uint64_t)1 << MSG_SITE__UPLINK_RTT_MS | (uint64_t)1 << MSG_SITE__NODES |
                      (uint64_t)1 << MSG_SITE__GPUS);
    gp_err rc = admin(GP_OP_ADMIN_SITE_CREATE, &msg_site_desc, &s, &msg_site_desc);
    s.power_prices.v = NULL;
    T_OKM(rc == GP_EOK, "site bsite of partner bp1 (%s)", gp_err_name(rc));
    PQclear(PQexec(pg, "INSERT INTO price_book VALUES ('bh100', 'USD', 2500000, 0),"
                       " ('bh100', 'USD', 3000000, 1796104800000)"));   /* 06:00 UTC */
    tl_spin(loop, 0.5);                               /* the book reloads every 200 ms */

    publish("m1", "j-bill.1.bn1.a", "bsite", "bc1", DAY_MS + 300 * 60000, 3600000, 3600000000ull,
            1, NULL);
    publish("m2", "j-bill.1.bn1.b", "bsite", "bc1", DAY_MS + 360 * 60000, 1800000, 1800000000ull,
            2, NULL);
    publish("m3", "j-bill.1.bn1.a", "bsite", "bc1", DAY_MS + 300 * 60000, 3600000, 3600000000ull,
            1, NULL);                                  /* R1 again */
    publish("m4", "j-bill.1.bn1.c", "bsite", "bc1", DAY_MS, 999999999999ull, 1, 3, NULL);
    publish("m5", "j-bill.1.bn1.d", "nosuchsite", "bc1", DAY_MS, 1000, 1000, 1, NULL);
    publish("m6", "j-bill.1.bn1.e", "bsite", "bc1", DAY_MS, 1000, 1000, 4, "EUR");
    publish("m7", "j-bill.1.bn1.f", "bsite", "", DAY_MS, 1000, 1000, 5, NULL);
    tenant("bc2", MSG_TENANT_KIND_CUSTOMER, "op", 0);
    publish_fault("m8", true, 6);                /* the final first: a late record after it */
    publish_fault("m9", false, 7);
    for (double t0 = tl_now(); acked < 9 && tl_now() - t0 < 10;)
        tl_spin(loop, 0.05);
    T_EQ_INT(acked, 9);

    wait_for("SELECT count(DISTINCT id) FROM rejected_records", "4", 20);
    wait_for("SELECT count(*) FROM usage_records", "4", 20);
    T_OKM(strcmp(q1("SELECT count(*) FROM usage_records"), "4") == 0, "4 records posted (%s)",
          q1("SELECT count(*) FROM usage_records"));
    wait_for("SELECT count(*) FROM fault_credits", "2", 10);
    res = PQexec(pg, "SELECT account, sum(amount) FROM ledger_entries WHERE account LIKE 'bc2.%'"
                     " OR account LIKE '%failed_cost%' GROUP BY account ORDER BY account");
    char fgot[1024] = "";
    for (int i = 0; i < PQntuples(res); i++)
        snprintf(fgot + strlen(fgot), sizeof(fgot) - strlen(fgot), "%s=%s ",
                 PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
    PQclear(res);
    T_OKM(strcmp(fgot, "bc2.receivable.KWD=28125000 bc2.receivable.USD=2250000000 "
                       "op.failed_cost.KWD=9375000 op.failed_cost.USD=750000000 ") == 0,
          "lost after its checkpoint: the last quarter hour is failed_cost, not the customer's: %s",
          fgot);
    T_OKM(strcmp(q1("SELECT string_agg(uncharged_gpu_ms::text, ',' ORDER BY record_id) FROM"
                    " fault_credits"), "900000,0") == 0, "uncharged GPU-ms per record: %s",
          q1("SELECT string_agg(uncharged_gpu_ms::text, ',' ORDER BY record_id) FROM"
             " fault_credits"));
    res = PQexec(pg, "SELECT account, sum(amount) FROM ledger_entries WHERE account NOT LIKE"
                     " 'bc2.%' AND account NOT LIKE '%failed_cost%' GROUP BY account"
                     " ORDER BY account");
    char got[1024] = "";
    for (int i = 0; i < PQntuples(res); i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s=%s ", PQgetvalue(res, i, 0),
                 PQgetvalue(res, i, 1));
    PQclear(res);
    T_OKM(strcmp(got, "bc1.receivable.KWD=84375000 bc1.receivable.USD=4800000000 "
                      "bp1.payable.USD=-2340000000 bp1.power.KWD=-121875000 "
                      "op.fees.USD=-390000000 op.revenue.USD=-5070000000 ") == 0,
          "ledger (nanos) matches the hand computation: %s", got);
    T_OKM(strcmp(q1("SELECT string_agg(charge_minor || '/' || power_minor, ',' ORDER BY id)"
                    " FROM usage_records WHERE tenant = 'bc1'"), "300/38,180/47") == 0,
          "each record's own line in minor units: 300 cents / 38 fils, 180 cents / 47 fils (%s)",
          q1("SELECT string_agg(charge_minor || '/' || power_minor, ',' ORDER BY id)"
             " FROM usage_records WHERE tenant = 'bc1'"));
    T_OKM(strcmp(q1("SELECT count(*) FROM (SELECT currency FROM ledger_entries GROUP BY currency"
                    " HAVING sum(amount) <> 0) x"), "0") == 0, "trial balance zero per currency");
    T_OKM(strcmp(q1("SELECT string_agg(power_residue_nanos::text, ',' ORDER BY id) FROM"
                    " usage_records WHERE tenant = 'bc1'"), "-500000,-125000") == 0,
          "power rounded half to even, residues kept (%s)",
          q1("SELECT string_agg(power_residue_nanos::text, ',' ORDER BY id) FROM usage_records"
             " WHERE tenant = 'bc1'"));
    T_OKM(strcmp(q1("SELECT count(*) FROM ledger_transfers t WHERE kind = 'charge' AND"
                    " (SELECT -sum(amount) FROM ledger_entries e WHERE e.transfer_id = t.id AND"
                    "  amount < 0) <> (SELECT gpu_nanos FROM usage_records u WHERE"
                    "  u.id = t.record_id)"), "0") == 0,
          "each charge's revenue-share legs sum exactly to the charge");
    T_OKM(strstr(q1("SELECT reason FROM rejected_records WHERE id = 'j-bill.1.bn1.c'"),
                 "more than") != NULL, "impossible counters refused: %s",
          q1("SELECT reason FROM rejected_records WHERE id = 'j-bill.1.bn1.c'"));
    T_OKM(strstr(q1("SELECT reason FROM rejected_records WHERE id = 'j-bill.1.bn1.d'"),
                 "unknown site") != NULL, "unknown site refused: %s",
          q1("SELECT reason FROM rejected_records WHERE id = 'j-bill.1.bn1.d'"));
    T_OKM(strstr(q1("SELECT reason FROM rejected_records WHERE id = 'j-bill.1.bn1.e'"),
                 "currency EUR") != NULL, "wrong currency refused: %s",
          q1("SELECT reason FROM rejected_records WHERE id = 'j-bill.1.bn1.e'"));
    T_OKM(strstr(q1("SELECT reason FROM rejected_records WHERE id = 'j-bill.1.bn1.f'"),
                 "unknown attempt") != NULL, "record without a tenant refused: %s",
          q1("SELECT reason FROM rejected_records WHERE id = 'j-bill.1.bn1.f'"));
    T_OKM(strcmp(q1("SELECT count(*) FROM ledger_transfers WHERE record_id IN"
                    " ('j-bill.1.bn1.c','j-bill.1.bn1.d','j-bill.1.bn1.e','j-bill.1.bn1.f')"),
                 "0") == 0, "refused records are never posted");

    statements_and_scopes();
    price_book_api();
    row_security();

    res = PQexec(pg, "WITH t AS (INSERT INTO ledger_transfers (record_id, kind, currency, period,"
                     " at_ms) VALUES ('j-bill.1.bn1.b', 'correction', 'USD', '2026-12', 0)"
                     " RETURNING id) INSERT INTO ledger_entries SELECT id, 'bc1.receivable.USD',"
                     " 'USD', 5 FROM t");
    T_OKM(PQresultStatus(res) == PGRES_FATAL_ERROR &&
              strstr(PQresultErrorMessage(res), "does not balance") != NULL,
          "PostgreSQL refuses an unbalanced transfer: %s", PQresultErrorMessage(res));
    PQclear(res);
    res = PQexec(pg, "WITH t AS (INSERT INTO ledger_transfers (record_id, kind, currency, period,"
                     " at_ms) VALUES ('j-bill.1.bn1.b', 'correction', 'USD', '2026-12', 0)"
                     " RETURNING id) INSERT INTO ledger_entries SELECT id, x.a, 'USD', x.n FROM t,"
                     " (VALUES ('bc1.receivable.USD', 5), ('nobody.revenue.USD', -5)) x(a, n)");
    T_OKM(PQresultStatus(res) == PGRES_FATAL_ERROR &&
              strstr(PQresultErrorMessage(res), "no such account") != NULL,
          "... and an entry on an account that does not exist: %s", PQresultErrorMessage(res));
    PQclear(res);
    res = PQexec(pg, "INSERT INTO ledger_transfers (record_id, kind, currency, period, at_ms)"
                     " VALUES ('no-such-record', 'correction', 'USD', '2026-12', 0)");
    T_OKM(PQresultStatus(res) == PGRES_FATAL_ERROR &&
              strstr(PQresultErrorMessage(res), "no such record") != NULL,
          "... and a transfer of no record: %s", PQresultErrorMessage(res));
    PQclear(res);
    res = PQexec(pg, "UPDATE ledger_entries SET amount = amount + 1");
    T_OKM(PQresultStatus(res) == PGRES_FATAL_ERROR, "PostgreSQL refuses an UPDATE of the ledger");
    PQclear(res);
    res = PQexec(pg, "DELETE FROM usage_records");
    T_OKM(PQresultStatus(res) == PGRES_FATAL_ERROR, "... and a DELETE of usage records");
    PQclear(res);

    kill(bil, SIGTERM);
    kill(reg, SIGTERM);
    T_EQ_INT(tl_wait_exit(bil, 15), 0);
    T_EQ_INT(tl_wait_exit(reg, 15), 0);
    PQfinish(pg);
    gp_bus_free(bus);
    gp_lib_close();
    return T_DONE();
}
