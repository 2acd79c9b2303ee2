/* ledger_bench.c -- usage records per second rated and posted double-entry
 * by gridpool-billing with durable commits (run.sh restarts PostgreSQL with
 * fsync and synchronous_commit on: ledger_fsync_on=1 says they were), next
 * to COPY of the same rows into PostgreSQL
 * and to one-row-per-commit INSERTs, in the same run; bytes per record and
 * WAL fsyncs per record.
 *
 * N records (GP_BENCH_LEDGER_RECORDS, default 100,000: one GPU-minute each
 * on 100 sites, half of them a partner's, energy at two time-of-day
 * prices) are published to USAGE while billing is stopped, then billing
 * starts and drains the backlog: the time from its start to the last
 * record posted is the figure (what a reconnecting region's backlog
 * costs).  Then the references run on the rows billing wrote.
 *
 * Keys: ledger_records ledger_per_s ledger_copy_rows_per_s ledger_copy_ratio
 * ledger_row_commit_per_s ledger_row_ratio ledger_bytes_per_record
 * ledger_wal_syncs_per_record ledger_wal_bytes_per_record
 * ledger_transfers_per_record ledger_entries_per_record ledger_batches
 * ledger_records_per_batch ledger_trial_balance_nonzero ledger_publish_per_s
 * ledger_cpu_us_{billing,postgres,nats} (CPU per record, during the drain) */
#include <ev.h>
#include <libpq-fe.h>

#include "bench.h"
#include "gp/bus.h"
#include "gp/call.h"
#include "gp/clock.h"
#include "gp/limits.h"

#define SITES 100

static struct ev_loop *loop;
static gp_bus         *bus;
static PGconn         *pg;
static long            acked, failed;

static void
on_ack(void *arg, gp_err err)
{
    (void)arg;
    if (err == GP_EOK)
        acked++;
    else
        failed++;
}

static long long
q1(const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    long long v = -1;

    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    else if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
        b_note("ledger: %s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    return v;
}

static void
exec1(const char *sql)
{
    PGresult *r = PQexec(pg, sql);

    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        b_note("ledger: %s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

static gp_err
admin(const gp_op *op, const gp_msg_desc *d, const void *m, const gp_msg_desc *rd)
{
    char   subj[GP_MAX_SUBJECT], detail[256];
    void  *out = calloc(1, 8192);
    gp_err rc;

    gp_op_subject(op, subj, sizeof(subj), NULL);
    rc = gp_call_wait(loop, bus, subj, d, m, rd, out, 10000, detail, sizeof(detail), NULL);
    gp_msg_clear(rd, out);
    free(out);
    return rc;
}

static void
inventory(void)
{
    msg_tenant      t = {0};
    msg_site        s = {0};
    msg_power_price pp[2] = {{.start_min = 0, .price_micros_per_kwh = 150000},
                             {.start_min = 720, .price_micros_per_kwh = 280000}};

    snprintf(t.id, sizeof(t.id), "op");
    t.kind = MSG_TENANT_KIND_OPERATOR;
    admin(GP_OP_ADMIN_TENANT_CREATE, &msg_tenant_desc, &t, &msg_tenant_desc);
    snprintf(t.id, sizeof(t.id), "lp1");
    snprintf(t.parent, sizeof(t.parent), "op");
    t.kind = MSG_TENANT_KIND_PARTNER;
    t.revenue_share_bp = 3000;
    GP_SET_HAS(&t, MSG_TENANT__REVENUE_SHARE_BP);
    admin(GP_OP_ADMIN_TENANT_CREATE, &msg_tenant_desc, &t, &msg_tenant_desc);
    for (int i = 0; i < SITES; i++) {
        snprintf(s.id, sizeof(s.id), "ls%04d", i);
        snprintf(s.tenant, sizeof(s.tenant), "%s", i % 2 ? "lp1" : "op");
        snprintf(s.region, sizeof(s.region), "eu");
        snprintf(s.currency, sizeof(s.currency), "EUR");
        s.latency_tier = i % 4;
        s.pue_milli = 1200;
        s.power_prices.v = pp;
        s.power_prices.n = 2;
        s.has = (uint64_t)1 << MSG_SITE__ID | (uint64_t)1 << MSG_SITE__TENANT |
                (uint64_t)1 << MSG_SITE__REGION | (uint64_t)1 << MSG_SITE__CURRENCY |
                (uint64_t)1 << MSG_SITE__LATENCY_TIER | (uint64_t)1 << MSG_SITE__PUE_MILLI |
                (uint64_t)1 << MSG_SITE__POWER_PRICES;
        admin(GP_OP_ADMIN_SITE_CREATE, &msg_site_desc, &s, &msg_site_desc);
    }
    s.power_prices.v = NULL;
}

static double
publish(long n)
{
    uint64_t         seq[SITES] = {0}, base = (uint64_t)time(NULL) * 1000 - 86400000;
    msg_usage_record r = {0};
    gp_buf           b = GP_BUF_INIT;
    char             subj[GP_MAX_SUBJECT];
    double           t0 = b_now();

    for (long i = 0; i < n; i++) {
        int site = (int)(i % SITES);

        while (i - acked - failed >= 2000)
            ev_run(loop, EVRUN_ONCE);
        memset(&r, 0, sizeof(r));
        snprintf(r.id, sizeof(r.id), "lb%ld.1.n%d.%ld", i / 64, site, i);
        snprintf(r.job_id, sizeof(r.job_id), "lb%ld", i / 64);
        r.attempt = 1;
        snprintf(r.tenant, sizeof(r.tenant), "lc%d", (int)(i % 10));
        snprintf(r.site, sizeof(r.site), "ls%04d", site);
        snprintf(r.node, sizeof(r.node), "n%d", site);
        snprintf(r.product, sizeof(r.product), "lprod");
        GP_SET_HAS(&r, MSG_USAGE_RECORD__PRODUCT);
        r.gpus = 1;
        r.window_ms = 60000;
        r.window = (base + (uint64_t)i * 1000) / 60000;
        r.first_ms = r.window * 60000;
        r.last_ms = r.first_ms + 55000;
        r.gpu_ms = 60000;
        r.energy_mj = 60000ull * 350;            /* 350 W */
        r.to_gpu_ms = r.gpu_ms;
        r.to_energy_mj = r.energy_mj;
        r.site_seq = ++seq[site];
        gp_buf_reset(&b);
        gp_msg_encode(&msg_usage_record_desc, &r, &b);
        gp_op_subjectf(GP_OP_USAGE_RECORD, subj, sizeof(subj), r.site);
        if (gp_bus_js_pub(bus, subj, r.id, b.p, b.n, on_ack, NULL) != GP_EOK) {
            failed++;
            ev_run(loop, EVRUN_NOWAIT);
        }
    }
    while (acked + failed < n && b_now() - t0 < 600)
        ev_run(loop, EVRUN_ONCE);
    gp_buf_fini(&b);
    return n / (b_now() - t0);
}

static double
metric_of(int port, const char *series)
{
    char  *body = NULL;
    double v = -1;

    if (b_http_get(port, "/metrics", &body) == 200)
        v = b_metric(body, series);
    free(body);
    return v;
}

/* COPY of the rows billing wrote into a bare table of the same shape. */
static double
copy_ref(long *rows)
{
    PGresult *r;
    char     *buf = NULL, *line;
    size_t    len = 0, cap = 0;
    int       n;
    double    t0, dt;

    exec1("DROP TABLE IF EXISTS bench_copy");
    exec1("CREATE TABLE bench_copy (LIKE usage_records)");
    r = PQexec(pg, "COPY usage_records TO STDOUT");
    PQclear(r);
    while ((n = PQgetCopyData(pg, &line, 0)) > 0) {
        if (len + (size_t)n > cap) {
            cap = (cap + (size_t)n) * 2;
            buf = realloc(buf, cap);
        }
        memcpy(buf + len, line, (size_t)n);
        len += (size_t)n;
        PQfreemem(line);
        (*rows)++;
    }
    PQclear(PQgetResult(pg));
    t0 = b_now();
    r = PQexec(pg, "COPY bench_copy FROM STDIN");
    PQclear(r);
    PQputCopyData(pg, buf, (int)len);
    PQputCopyEnd(pg, NULL);
    r = PQgetResult(pg);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        b_note("ledger: COPY: %s", PQresultErrorMessage(r));
    PQclear(r);
    dt = b_now() - t0;
    free(buf);
    return *rows / dt;
}

/* The same rows, one INSERT per transaction (synchronous_commit on): each
 * row's values sent as text parameters, as a service inserting a row per
 * request would. */
static double
row_ref(long rows)
{
    PGresult *src = PQexec(pg, "SELECT * FROM bench_copy ORDER BY id");
    int       nf = PQnfields(src), n = PQntuples(src);
    char      sql[8192];
    size_t    k;
    double    t0, dt;

    exec1("DROP TABLE IF EXISTS bench_rows");
    exec1("CREATE TABLE bench_rows (LIKE usage_records INCLUDING ALL)");
    k = (size_t)snprintf(sql, sizeof(sql), "INSERT INTO bench_rows VALUES (");
    for (int c = 0; c < nf && k < sizeof(sql) - 16; c++)
        k += (size_t)snprintf(sql + k, sizeof(sql) - k, "%s$%d", c ? ", " : "", c + 1);
    snprintf(sql + k, sizeof(sql) - k, ")");
    if (rows > n)
        rows = n;
    t0 = b_now();
    for (long i = 0; i < rows; i++) {
        const char *v[64];

        for (int c = 0; c < nf && c < 64; c++)
            v[c] = PQgetisnull(src, (int)i, c) ? NULL : PQgetvalue(src, (int)i, c);
        PQclear(PQexecParams(pg, sql, nf, NULL, v, NULL, NULL, 0));
    }
    dt = b_now() - t0;
    PQclear(src);
    return rows / dt;
}

/* pg_stat_statements (run.sh loads it): reset before billing drains, with
 * statements inside functions and triggers tracked too; after, the ones
 * that cost PostgreSQL most go to the notes.  Without the module: a note. */
static void
pg_stats_reset(void)
{
    PGresult *r = PQexec(pg, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");

    PQclear(r);
    r = PQexec(pg, "ALTER SYSTEM SET pg_stat_statements.track = 'all'");
    PQclear(r);
    r = PQexec(pg, "SELECT pg_reload_conf()");
    PQclear(r);
    r = PQexec(pg, "SELECT pg_stat_statements_reset()");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        b_note("ledger: pg_stat_statements not loaded: %s", PQerrorMessage(pg));
    PQclear(r);
}

static void
pg_stats_note(void)
{
    PGresult *r = PQexec(pg,
        "SELECT calls, round((total_plan_time + total_exec_time)::numeric, 0),\n"
        "  round(total_plan_time::numeric, 0), toplevel,\n"
        "  regexp_replace(left(query, 120), '\\s+', ' ', 'g')\n"
        "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database\n"
        "  WHERE datname = current_database())\n"
        "ORDER BY total_plan_time + total_exec_time DESC LIMIT 12");

    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        for (int i = 0; i < PQntuples(r); i++)
            b_note("ledger: pg %s calls, %s ms (plan %s, top level %s): %s", PQgetvalue(r, i, 0),
                   PQgetvalue(r, i, 1), PQgetvalue(r, i, 2), PQgetvalue(r, i, 3),
                   PQgetvalue(r, i, 4));
    PQclear(r);
}

int
main(void)
{
    const char *build = b_env("GP_BUILD"), *stack = b_env("GP_STACK_DIR");
    long        n = getenv("GP_BENCH_LEDGER_RECORDS") ? atol(getenv("GP_BENCH_LEDGER_RECORDS"))
                                                      : 100000;
    gp_bus_opts bo = {.url = b_env("GP_NATS_URL"), .name = "ledger-bench", .jetstream = true};
    char        bin[512], rbin[512], port[16], logp[512], rlog[512];
    int         bport = b_free_port();
    pid_t       reg, bil;
    double      pub_rate, t0, t1, posted = 0, batches;
    long long   wal_sync0, wal_bytes0, size0, size1;
    long        copy_rows = 0;

    loop = ev_default_loop(0);
    pg = PQconnectdb(b_env("GP_PG_CONNINFO"));
    if (PQstatus(pg) != CONNECTION_OK || gp_bus_new(loop, &bo, NULL, NULL, &bus) != GP_EOK) {
        b_note("ledger: PostgreSQL or NATS not reachable");
        return 1;
    }
    snprintf(rbin, sizeof(rbin), "%s/bin/gridpool-registry", build);
    snprintf(rlog, sizeof(rlog), "%s/ledger-registry.log", stack);
    reg = b_spawn((char *const *)(const char *const[]){rbin, "--http-port", "0", "--log-level", "warn", NULL}, rlog);
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-billing", build);
    snprintf(port, sizeof(port), "%d", bport);
    snprintf(logp, sizeof(logp), "%s/ledger-billing.log", stack);
    bil = b_spawn((char *const *)(const char *const[]){bin, "--http-port", port, "--log-level", "warn", NULL}, logp);
    b_wait_healthy(bil, bport, 30);
    for (t0 = b_now(); q1("SELECT count(*) FROM gp_migrations WHERE service = 'billing'") < 10 &&
                       b_now() - t0 < 30;)
        usleep(100000);
    inventory();
    exec1("INSERT INTO price_book VALUES ('lprod', 'EUR', 2000000, 0) ON CONFLICT DO NOTHING");
    b_stop(bil, 15);

    pub_rate = publish(n);
    b_note("ledger: %ld records published (%.0f/s, %ld failed); billing starts", n, pub_rate,
           failed);
    pg_stats_reset();
    exec1("CHECKPOINT");
    wal_sync0 = q1("SELECT wal_sync FROM pg_stat_wal");
    wal_bytes0 = q1("SELECT wal_bytes FROM pg_stat_wal");
    size0 = q1("SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['usage_records',"
               "'ledger_transfers','ledger_entries','ledger_accounts']::regclass[]) c");
    b_kv("ledger_fsync_on", q1("SELECT (current_setting('fsync') = 'on' AND"
                               " current_setting('synchronous_commit') = 'on')::int"));
    pid_t  pgpid = b_pid_file(stack, "pg/data/postmaster.pid");
    pid_t  natspid = b_pid_file(stack, "nats.pid");
    double cpu_pg0 = b_cpu_tree(pgpid), cpu_nats0 = b_cpu_of(natspid), cpu_bil = 0;
    t0 = b_now();
    bil = b_spawn((char *const *)(const char *const[]){bin, "--http-port", port, "--log-level", "warn", NULL}, logp);
    t1 = t0;
    while (b_now() - t0 < 600) {
        posted = metric_of(bport, "gp_billing_records_posted_total");
        if (posted >= n)
            break;
        usleep(50000);
    }
    t1 = b_now();
    pg_stats_note();
    cpu_bil = b_cpu_of(bil);
    double cpu_pg = b_cpu_tree(pgpid) - cpu_pg0, cpu_nats = b_cpu_of(natspid) - cpu_nats0;
    batches = metric_of(bport, "gp_billing_batches_total");
    b_kv("ledger_records", posted);
    b_kv("ledger_per_s", posted / (t1 - t0));
    b_kv("ledger_publish_per_s", pub_rate);
    b_kv("ledger_cpu_us_billing", posted > 0 ? cpu_bil * 1e6 / posted : 0);
    b_kv("ledger_cpu_us_postgres", posted > 0 ? cpu_pg * 1e6 / posted : 0);
    b_kv("ledger_cpu_us_nats", posted > 0 ? cpu_nats * 1e6 / posted : 0);
    b_kv("ledger_batches", batches);
    b_kv("ledger_records_per_batch", batches > 0 ? posted / batches : 0);
    b_kv("ledger_wal_syncs_per_record", (q1("SELECT wal_sync FROM pg_stat_wal") - wal_sync0) /
                                            (posted > 0 ? posted : 1));
    b_kv("ledger_wal_bytes_per_record", (q1("SELECT wal_bytes FROM pg_stat_wal") - wal_bytes0) /
                                            (posted > 0 ? posted : 1));
    size1 = q1("SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['usage_records',"
               "'ledger_transfers','ledger_entries','ledger_accounts']::regclass[]) c");
    b_kv("ledger_bytes_per_record", (double)(size1 - size0) / (posted > 0 ? posted : 1));
    b_kv("ledger_transfers_per_record",
         (double)q1("SELECT count(*) FROM ledger_transfers") / (posted > 0 ? posted : 1));
    b_kv("ledger_entries_per_record",
         (double)q1("SELECT count(*) FROM ledger_entries") / (posted > 0 ? posted : 1));
    b_kv("ledger_trial_balance_nonzero",
         (double)q1("SELECT count(*) FROM (SELECT currency FROM ledger_entries GROUP BY 1"
                    " HAVING sum(amount) <> 0) x"));
    b_stop(bil, 15);
    b_stop(reg, 15);

    double copy = copy_ref(&copy_rows), row = row_ref(copy_rows < 5000 ? copy_rows : 5000);
    b_kv("ledger_copy_rows_per_s", copy);
    b_kv("ledger_copy_ratio", copy > 0 ? posted / (t1 - t0) / copy : 0);
    b_kv("ledger_row_commit_per_s", row);
    b_kv("ledger_row_ratio", row > 0 ? posted / (t1 - t0) / row : 0);
    exec1("DROP TABLE IF EXISTS bench_copy");
    exec1("DROP TABLE IF EXISTS bench_rows");
    PQfinish(pg);
    gp_bus_free(bus);
    return posted >= n ? 0 : 1;
}
