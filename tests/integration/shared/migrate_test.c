/* migrate_test.c -- versioned migrations (gp/db.h) against a real
 * PostgreSQL from tests/harness/stack.sh.
 *
 * A test-only service "shop": its database is first built as the version
 * before gp_migrations made it (the schema script, run as it was, with
 * rows in it and no record), then the new code adopts it (step 1, the old
 * idempotent script) and applies step 2, an ALTER TABLE.  Then: a second
 * start applies nothing; four pools starting at once apply each step of
 * another service once; a failing step leaves nothing behind; a database
 * newer than the steps, or naming a step differently, is refused.  The
 * roles mode (gp/dbrole.h): tables the owner's (an older one too), the
 * login's pool with exactly its grants, the list revoking what it drops,
 * a bad grant or an over-privileged login failing the phase, and a
 * check-only pool waiting for a migration.
 *
 * The test's own checks use blocking libpq (PQexec) on a separate
 * connection: only the code under test must not block. */
#include <ev.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp/db.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "test.h"

#define T_EQ(a, b) do {                                                        \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        T_OKM(a_ == b_, "%s == %s (%lld vs %lld)", #a, #b, a_, b_);            \
    } while (0)

static struct ev_loop *L;
static const char     *conninfo;
static PGconn         *admin;              /* the test's own, blocking */

/* ---- helpers ---------------------------------------------------------- */

static void
tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop; (void)w; (void)revents;
}

static void
quiet(void *arg, const char *msg)
{
    (void)arg; (void)msg;                  /* "relation already exists, skipping" */
}

static void
spin(double secs)
{
    ev_tstamp end = ev_time() + secs;

    while (ev_time() < end)
        ev_run(L, EVRUN_ONCE);
}

/* First value of a one-row query on the admin connection, "" on none,
 * "ERROR: ..." on failure. */
static const char *
sql1(const char *sql)
{
    static char out[512];
    PGresult   *r = PQexec(admin, sql);

    out[0] = '\0';
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0)
        snprintf(out, sizeof(out), "%s", PQgetvalue(r, 0, 0));
    else if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
        snprintf(out, sizeof(out), "ERROR: %s", PQresultErrorMessage(r));
    PQclear(r);
    return out;
}

static bool
exec_ok(const char *sql)
{
    PGresult *r = PQexec(admin, sql);
    bool      ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;

    if (!ok)
        printf("# %s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    return ok;
}

typedef struct qres {
    int    calls;
    gp_err err;
    char   v[256];
    char   detail[GP_ERRBUF_LEN];
} qres;

static void
q_cb(void *arg, gp_err err, struct pg_result *const *results, int nres, const char *detail)
{
    qres *q = arg;

    q->calls++;
    q->err = err;
    snprintf(q->detail, sizeof(q->detail), "%s", detail ? detail : "");
    if (err == GP_EOK && nres > 0 && PQntuples(results[0]) > 0)
        snprintf(q->v, sizeof(q->v), "%s", PQgetvalue(results[0], 0, 0));
}

static bool
wait_calls(const int *calls, int n, double secs)
{
    ev_tstamp end = ev_time() + secs;

    while (*calls < n && ev_time() < end)
        ev_run(L, EVRUN_ONCE);
    return *calls >= n;
}

static gp_db_stats
stats(gp_db *db)
{
    gp_db_stats st;

    gp_db_get_stats(db, &st);
    return st;
}

static bool
wait_connected(gp_db *db, uint32_t n, double secs)
{
    ev_tstamp end = ev_time() + secs;

    while (stats(db).connected < n && ev_time() < end)
        ev_run(L, EVRUN_ONCE);
    return stats(db).connected >= n;
}

typedef struct failst {
    int    calls;
    gp_err err;
    char   detail[GP_ERRBUF_LEN];
} failst;

static void
fail_cb(void *arg, gp_err err, const char *detail)
{
    failst *f = arg;

    f->calls++;
    f->err = err;
    snprintf(f->detail, sizeof(f->detail), "%s", detail);
}

static gp_db *
pool(const char *service, const gp_migration *steps, unsigned size, failst *f)
{
    gp_db     *db = NULL;
    gp_db_opts o = {.conninfo = conninfo, .pool_size = size, .migrations = steps,
                    .service = service, .fail_cb = fail_cb, .fail_arg = f};

    T_EQ(gp_db_new(L, &o, NULL, NULL, &db), GP_EOK);
    return db;
}

/* ---- the "shop" service ----------------------------------------------- */

/* What the previous version ran on every connection: idempotent. */
#define SHOP_V1                                                                \
    "CREATE TABLE IF NOT EXISTS items (\n"                                     \
    "  id text PRIMARY KEY,\n"                                                 \
    "  qty int NOT NULL CHECK (qty >= 0),\n"                                   \
    "  price_micros bigint NOT NULL);\n"                                       \
    "CREATE INDEX IF NOT EXISTS items_qty ON items(qty);\n"                    \
    "-- a trailing comment without a newline must not swallow the record"

static const gp_migration shop_steps[] = {
    {1, "items", SHOP_V1},
    /* Not idempotent: a second run fails ("already exists"). */
    {2, "items.currency", "ALTER TABLE items ADD COLUMN currency text NOT NULL DEFAULT 'EUR' "
                          "CHECK (currency ~ '^[A-Z]{3}$')"},
    GP_MIGRATION_END
};

static void
t_upgrade(void)
{
    failst f = {0};
    qres   early = {0};

    /* the database as the previous version left it: its script, run as it
     * ran it (under the same lock key, in one transaction), and rows */
    T_OK(exec_ok("SELECT pg_advisory_xact_lock(7453010373645655553);\n" SHOP_V1));
    T_OK(exec_ok("INSERT INTO items VALUES ('apple', 3, 250000), ('pear', 0, 1990000)"));
    T_OK(strcmp(sql1("SELECT to_regclass('gp_migrations') IS NULL"), "t") == 0);

    gp_db *db = pool("shop", shop_steps, 3, &f);
    /* a query sent before the migration ran waits for it */
    T_EQ(gp_db_query(db, "SELECT string_agg(id || ':' || qty || ':' || price_micros || ':' || "
                         "currency, ',' ORDER BY id) FROM items", 0, NULL, 20000, q_cb, &early),
         GP_EOK);
    T_OK(wait_connected(db, 3, 20));
    T_OK(wait_calls(&early.calls, 1, 10));
    T_EQ(early.err, GP_EOK);
    T_OKM(strcmp(early.v, "apple:3:250000:EUR,pear:0:1990000:EUR") == 0, "rows: %s", early.v);
    T_EQ(stats(db).schema_version, 2);
    T_EQ(stats(db).migrations_applied, 2);       /* 1 adopted (re-run, idempotent), 2 applied */
    T_EQ(stats(db).reconnects, 0);
    T_EQ(f.calls, 0);
    T_OK(strcmp(sql1("SELECT string_agg(version || ' ' || name, ',' ORDER BY version) "
                     "FROM gp_migrations WHERE service = 'shop'"),
                "1 items,2 items.currency") == 0);
    T_OK(strcmp(sql1("SELECT count(*) FROM items"), "2") == 0);
    T_OK(strncmp(sql1("INSERT INTO items VALUES ('fig', 1, 1, 'eur')"), "ERROR", 5) == 0);
    gp_db_free(db);
}

static void
t_second_start(void)
{
    failst f = {0};
    char   before[128];

    snprintf(before, sizeof(before), "%s",
             sql1("SELECT string_agg(applied_at::text, ',' ORDER BY version) FROM gp_migrations "
                  "WHERE service = 'shop'"));
    gp_db *db = pool("shop", shop_steps, 2, &f);
    T_OK(wait_connected(db, 2, 20));
    T_EQ(stats(db).schema_version, 2);
    T_EQ(stats(db).migrations_applied, 0);
    T_EQ(stats(db).reconnects, 0);
    T_OK(strcmp(sql1("SELECT string_agg(applied_at::text, ',' ORDER BY version) FROM gp_migrations "
                     "WHERE service = 'shop'"), before) == 0);
    T_OK(strcmp(sql1("SELECT count(*) FROM gp_migrations WHERE service = 'shop'"), "2") == 0);
    gp_db_free(db);
}

/* ---- concurrent starts ------------------------------------------------ */

static const gp_migration race_steps[] = {
    {1, "log", "CREATE TABLE race_log (step int PRIMARY KEY, at timestamptz DEFAULT now());"
               "INSERT INTO race_log (step) VALUES (1)"},
    /* slow, so the other pools are waiting on the lock meanwhile */
    {2, "slow", "SELECT pg_sleep(0.5); INSERT INTO race_log (step) VALUES (2)"},
    {3, "alter", "ALTER TABLE race_log ADD COLUMN who text; INSERT INTO race_log (step) VALUES (3)"},
    GP_MIGRATION_END
};

static void
t_concurrent(void)
{
    enum { N = 4 };
    gp_db   *dbs[N];
    failst   f[N];
    uint32_t applied = 0, reconnects = 0;
    bool     all = true;

    memset(f, 0, sizeof(f));
    for (int i = 0; i < N; i++)
        dbs[i] = pool("race", race_steps, 3, &f[i]);
    for (int i = 0; i < N; i++)
        all &= wait_connected(dbs[i], 3, 30);
    T_OK(all);
    for (int i = 0; i < N; i++) {
        gp_db_stats st = stats(dbs[i]);
        applied += st.migrations_applied;
        reconnects += (uint32_t)st.reconnects;
        T_EQ(st.schema_version, 3);
        T_EQ(f[i].calls, 0);
    }
    T_EQ(applied, 3);                             /* each step once, whichever pool */
    T_EQ(reconnects, 0);                          /* no step ran twice and failed */
    T_OK(strcmp(sql1("SELECT string_agg(step::text, ',' ORDER BY step) FROM race_log"), "1,2,3") == 0);
    T_OK(strcmp(sql1("SELECT count(*) FROM gp_migrations WHERE service = 'race'"), "3") == 0);
    for (int i = 0; i < N; i++)
        gp_db_free(dbs[i]);
}

/* ---- a failing step --------------------------------------------------- */

static void
t_failed_step(void)
{
    static const gp_migration bad[] = {
        {1, "t", "CREATE TABLE half_ok (id int)"},
        {2, "broken", "CREATE TABLE half_bad (id int); SELECT 1/0"},
        GP_MIGRATION_END
    };
    failst f = {0};
    qres   q = {0};

    gp_db *db = pool("half", bad, 1, &f);
    T_EQ(gp_db_query(db, "SELECT 1", 0, NULL, 1500, q_cb, &q), GP_EOK);
    T_OK(wait_calls(&q.calls, 1, 10));
    T_EQ(q.err, GP_ETIMEOUT);                     /* waited: the schema never became current */
    T_OK(!gp_db_is_connected(db));
    T_OK(stats(db).reconnects >= 1);              /* the step is retried after the backoff */
    T_EQ(f.calls, 0);                             /* not a refusal */
    gp_db_free(db);
    T_OK(strcmp(sql1("SELECT string_agg(version::text, ',') FROM gp_migrations "
                     "WHERE service = 'half'"), "1") == 0);
    T_OK(strcmp(sql1("SELECT to_regclass('half_ok') IS NOT NULL"), "t") == 0);
    T_OK(strcmp(sql1("SELECT to_regclass('half_bad') IS NULL"), "t") == 0);   /* rolled back */
}

/* ---- refusals --------------------------------------------------------- */

static void
t_too_new(void)
{
    failst      f = {0};
    qres        q = {0};
    const char *why = NULL;

    T_OK(exec_ok("INSERT INTO gp_migrations (service, version, name) VALUES ('shop', 7, 'future')"));
    gp_db *db = pool("shop", shop_steps, 2, &f);
    T_EQ(gp_db_query(db, "SELECT 1", 0, NULL, 20000, q_cb, &q), GP_EOK);
    for (ev_tstamp end = ev_time() + 20; f.calls == 0 && ev_time() < end;)
        ev_run(L, EVRUN_ONCE);
    T_EQ(f.calls, 1);
    T_EQ(f.err, GP_ECONFLICT);
    T_OKM(strstr(f.detail, "version 7") != NULL && strstr(f.detail, "up to version 2") != NULL,
          "detail: %s", f.detail);
    T_EQ(q.calls, 1);                             /* the queued query failed, typed */
    T_EQ(q.err, GP_ECONFLICT);
    T_EQ(gp_db_refused(db, &why), GP_ECONFLICT);
    T_OK(why != NULL && strcmp(why, f.detail) == 0);
    T_EQ(gp_db_query(db, "SELECT 1", 0, NULL, 0, q_cb, &q), GP_ECONFLICT);
    spin(0.5);
    T_OK(!gp_db_is_connected(db));
    T_EQ(stats(db).reconnects, 0);                /* no retrying */
    T_EQ(f.calls, 1);
    T_EQ(q.calls, 1);
    gp_db_free(db);
    /* nothing was applied or removed */
    T_OK(strcmp(sql1("SELECT string_agg(version::text, ',' ORDER BY version) FROM gp_migrations "
                     "WHERE service = 'shop'"), "1,2,7") == 0);
    T_OK(exec_ok("DELETE FROM gp_migrations WHERE service = 'shop' AND version = 7"));
}

static void
t_renamed(void)
{
    static const gp_migration other[] = {
        {1, "items", SHOP_V1},
        {2, "items.colour", "ALTER TABLE items ADD COLUMN colour text"},
        GP_MIGRATION_END
    };
    failst f = {0};

    gp_db *db = pool("shop", other, 1, &f);
    for (ev_tstamp end = ev_time() + 20; f.calls == 0 && ev_time() < end;)
        ev_run(L, EVRUN_ONCE);
    T_EQ(f.calls, 1);
    T_EQ(f.err, GP_ECONFLICT);
    T_OKM(strstr(f.detail, "items.currency") != NULL && strstr(f.detail, "items.colour") != NULL,
          "detail: %s", f.detail);
    gp_db_free(db);
    T_OK(strcmp(sql1("SELECT to_regclass('items') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "
                     "information_schema.columns WHERE table_name = 'items' AND column_name = "
                     "'colour')"), "t") == 0);
}

static void
t_bad_lists(void)
{
    static const gp_migration unordered[] = {
        {2, "b", "SELECT 1"}, {1, "a", "SELECT 1"}, GP_MIGRATION_END};
    static const gp_migration dup[] = {
        {1, "a", "SELECT 1"}, {1, "b", "SELECT 1"}, GP_MIGRATION_END};
    static const gp_migration zero[] = {{0, "a", "SELECT 1"}, GP_MIGRATION_END};
    static const gp_migration nosql[] = {{1, "a", NULL}, GP_MIGRATION_END};
    gp_db_opts o = {.conninfo = conninfo, .service = "shop"};
    gp_db     *db = (gp_db *)1;

    o.migrations = unordered;
    T_EQ(gp_db_new(L, &o, NULL, NULL, &db), GP_EINVAL);
    T_OK(db == NULL);
    o.migrations = dup;
    T_EQ(gp_db_new(L, &o, NULL, NULL, &db), GP_EINVAL);
    o.migrations = zero;
    T_EQ(gp_db_new(L, &o, NULL, NULL, &db), GP_EINVAL);
    o.migrations = nosql;
    T_EQ(gp_db_new(L, &o, NULL, NULL, &db), GP_EINVAL);
    o.migrations = shop_steps;
    o.service = "shop'; DROP TABLE items; --";
    T_EQ(gp_db_new(L, &o, NULL, NULL, &db), GP_EINVAL);
    o.service = NULL;
    T_EQ(gp_db_new(L, &o, NULL, NULL, &db), GP_EINVAL);
}

/* ---- least privilege: the roles mode (gp/dbrole.h) --------------------- */

#define LOGIN "gp_test_ledger"

#define LEDGER_V1                                                              \
    "CREATE TABLE books (id serial PRIMARY KEY, tenant text NOT NULL, "        \
    "  amount bigint NOT NULL);\n"                                             \
    "ALTER TABLE books ENABLE ROW LEVEL SECURITY;\n"                           \
    "CREATE TABLE vault (secret text)"

static const gp_migration ledger_v1[] = {{1, "books", LEDGER_V1}, GP_MIGRATION_END};
static const gp_migration ledger_v2[] = {
    {1, "books", LEDGER_V1}, {2, "notes", "CREATE TABLE notes (n text)"}, GP_MIGRATION_END};
static const gp_grant     rw_books[] = {{"SELECT, INSERT", "TABLE books"}, GP_GRANT_END};

/* One gp_db_migrate run to its end: its error (TIMEOUT: no end). */
static gp_err
migrate_pw(const char *login, const gp_migration *steps, const gp_grant *grants,
           const char *password, failst *f)
{
    gp_db_roles r = {.owner = GP_DB_OWNER_ROLE, .login = login, .grants = grants,
                     .password = password};
    gp_db_opts  o = {.conninfo = conninfo, .migrations = steps, .service = "ledger", .roles = &r};
    gp_db      *db = NULL;

    memset(f, 0, sizeof(*f));
    if (gp_db_migrate(L, &o, fail_cb, f, &db) != GP_EOK)
        return GP_EINVAL;
    for (ev_tstamp end = ev_time() + 30; f->calls == 0 && ev_time() < end;)
        ev_run(L, EVRUN_ONCE);
    gp_db_free(db);
    return f->calls == 1 ? f->err : GP_ETIMEOUT;
}

static gp_err
migrate_as(const char *login, const gp_migration *steps, const gp_grant *grants, failst *f)
{
    return migrate_pw(login, steps, grants, NULL, f);
}

/* The service's own pool: logs in as LOGIN and only checks. */
static gp_db *
login_pool(const gp_migration *steps, failst *f)
{
    gp_db     *db = NULL;
    gp_db_opts o = {.conninfo = conninfo, .pool_size = 2, .migrations = steps, .service = "ledger",
                    .user = LOGIN, .app_name = "migrate_test", .check_only = true,
                    .fail_cb = fail_cb, .fail_arg = f};

    T_EQ(gp_db_new(L, &o, NULL, NULL, &db), GP_EOK);
    return db;
}

/* One statement on db: its error; q has the detail or the first value. */
static gp_err
run1(gp_db *db, const char *sql, qres *q)
{
    memset(q, 0, sizeof(*q));
    if (gp_db_query(db, sql, 0, NULL, 10000, q_cb, q) != GP_EOK)
        return GP_EINVAL;
    return wait_calls(&q->calls, 1, 15) ? q->err : GP_ETIMEOUT;
}

static bool
refused(gp_db *db, const char *sql, const char *why)
{
    qres q;

    return run1(db, sql, &q) == GP_EINTERNAL && strstr(q.detail, why) != NULL;
}

static void
t_roles(void)
{
    failst f, pf = {0};
    qres   q;

    /* what an older database holds: made by the superuser the services
     * logged in as before */
    T_OK(exec_ok("CREATE TABLE ledger_old (x int)"));
    T_EQ(migrate_as(LOGIN, ledger_v1, rw_books, &f), GP_EOK);
    T_OK(strcmp(sql1("SELECT rolsuper || ',' || rolinherit || ',' || rolcanlogin || ',' || "
                     "rolcreaterole FROM pg_roles WHERE rolname = '" LOGIN "'"),
                "false,false,true,false") == 0);
    T_OK(strcmp(sql1("SELECT rolsuper || ',' || rolcanlogin || ',' || rolcreaterole FROM "
                     "pg_roles WHERE rolname = 'gridpool_owner'"), "false,false,true") == 0);
    T_OKM(strcmp(sql1("SELECT string_agg(DISTINCT relowner::regrole::text, ',') FROM pg_class "
                      "WHERE relname IN ('books', 'books_id_seq', 'vault', 'ledger_old', "
                      "'gp_migrations', 'items')"), "gridpool_owner") == 0,
          "every table the owner's, an older one too: %s",
          sql1("SELECT string_agg(relname || '=' || relowner::regrole::text, ',') FROM pg_class "
               "WHERE relname IN ('books', 'vault', 'ledger_old', 'items')"));

    gp_db *db = login_pool(ledger_v1, &pf);
    T_OK(wait_connected(db, 2, 20));
    T_EQ(stats(db).schema_version, 1);
    T_EQ(stats(db).migrations_applied, 0);
    /* its grants, the serial's sequence and every row (its policy) */
    T_EQ(run1(db, "INSERT INTO books (tenant, amount) VALUES ('t1', 5) RETURNING id", &q), GP_EOK);
    T_EQ(run1(db, "SELECT count(*) FROM books", &q), GP_EOK);
    T_OKM(strcmp(q.v, "1") == 0, "the login sees its row under row-level security: %s", q.v);
    T_EQ(run1(db, "SELECT current_user || ',' || session_user", &q), GP_EOK);
    T_OKM(strcmp(q.v, LOGIN "," LOGIN) == 0, "logged in as: %s", q.v);
    /* and nothing else */
    T_OK(refused(db, "SELECT * FROM vault", "permission denied for table vault"));
    T_OK(refused(db, "SELECT * FROM ledger_old", "permission denied for table ledger_old"));
    T_OK(refused(db, "DELETE FROM books", "permission denied for table books"));
    T_OK(refused(db, "TRUNCATE books", "permission denied for table books"));
    T_OK(refused(db, "CREATE TABLE mine (i int)", "permission denied for schema public"));
    T_OK(refused(db, "DROP TABLE books", "must be owner of table books"));
    T_OK(refused(db, "SET ROLE gridpool_owner", "permission denied to set role"));
    T_OK(refused(db, "INSERT INTO gp_migrations VALUES ('ledger', 9, 'x')",
                 "permission denied for table gp_migrations"));

    /* the list is the whole truth: a privilege it drops is revoked */
    static const gp_grant ro[] = {{"SELECT", "TABLE books"}, GP_GRANT_END};
    T_EQ(migrate_as(LOGIN, ledger_v1, ro, &f), GP_EOK);
    T_OK(refused(db, "INSERT INTO books (tenant, amount) VALUES ('t1', 6)",
                 "permission denied for table books"));
    T_EQ(run1(db, "SELECT count(*) FROM books", &q), GP_EOK);

    /* a grant naming what does not exist fails the phase, which changes nothing */
    static const gp_grant missing[] = {{"SELECT", "TABLE books"}, {"SELECT", "TABLE nosuch"},
                                       GP_GRANT_END};
    T_EQ(migrate_as(LOGIN, ledger_v1, missing, &f), GP_EINTERNAL);
    T_OKM(strstr(f.detail, "nosuch") != NULL, "detail: %s", f.detail);
    T_EQ(run1(db, "SELECT count(*) FROM books", &q), GP_EOK);
    T_EQ(pf.calls, 0);
    gp_db_free(db);

    /* a password given is set as a SCRAM verifier, not as the cleartext */
    T_OK(strcmp(sql1("SELECT rolpassword IS NULL FROM pg_authid WHERE rolname = '" LOGIN "'"),
                "t") == 0);
    T_EQ(migrate_pw(LOGIN, ledger_v1, rw_books, "pw-'quoted'-123", &f), GP_EOK);
    T_OKM(strncmp(sql1("SELECT rolpassword FROM pg_authid WHERE rolname = '" LOGIN "'"),
                  "SCRAM-SHA-256$", 14) == 0, "the login's password: a SCRAM verifier");
    T_OK(strcmp(sql1("SELECT count(*) FROM pg_authid WHERE rolpassword LIKE '%quoted%'"), "0") == 0);
}

/* A role that may do more than its grants is refused, not changed. */
static void
t_roles_refused(void)
{
    failst f;

    T_OK(exec_ok("CREATE ROLE gp_test_super LOGIN SUPERUSER"));
    T_OK(exec_ok("CREATE ROLE gp_test_mkrole LOGIN CREATEROLE"));
    T_OK(exec_ok("CREATE ROLE gp_test_member LOGIN IN ROLE gridpool_owner"));
    T_EQ(migrate_as("gp_test_super", ledger_v1, rw_books, &f), GP_EINTERNAL);
    T_OKM(strstr(f.detail, "gp_test_super may do more than its grants") != NULL, "detail: %s",
          f.detail);
    T_EQ(migrate_as("gp_test_mkrole", ledger_v1, rw_books, &f), GP_EINTERNAL);
    T_EQ(migrate_as("gp_test_member", ledger_v1, rw_books, &f), GP_EINTERNAL);
    T_OK(strcmp(sql1("SELECT rolsuper FROM pg_roles WHERE rolname = 'gp_test_super'"), "t") == 0);
    T_OK(strcmp(sql1("SELECT count(*) FROM pg_class WHERE relname = 'books' AND relacl::text "
                     "~ 'gp_test_(super|mkrole|member)'"), "0") == 0);             /* no grant was made */
}

/* A check-only pool whose schema is behind waits (not ready, queries
 * queued) until a migration makes it current, then serves. */
static void
t_check_waits(void)
{
    static const gp_grant v2[] = {{"SELECT, INSERT", "TABLE books"}, {"SELECT", "TABLE notes"},
                                  GP_GRANT_END};
    failst f, pf = {0};
    qres   early = {0}, q;

    gp_db *db = login_pool(ledger_v2, &pf);
    T_EQ(gp_db_query(db, "SELECT count(*) FROM notes", 0, NULL, 30000, q_cb, &early), GP_EOK);
    spin(1.5);
    T_OK(!gp_db_is_connected(db));
    T_EQ(early.calls, 0);                         /* waiting, not failed */
    T_EQ(stats(db).schema_version, 1);            /* what it read */
    T_EQ(pf.calls, 0);
    T_EQ(migrate_as(LOGIN, ledger_v2, v2, &f), GP_EOK);
    T_OK(wait_connected(db, 2, 20));
    T_OK(wait_calls(&early.calls, 1, 5));
    T_EQ(early.err, GP_EOK);
    T_EQ(stats(db).schema_version, 2);
    T_EQ(run1(db, "SELECT count(*) FROM notes", &q), GP_EOK);
    gp_db_free(db);
    /* a newer schema is refused, as for a migrating pool */
    gp_db *old = login_pool(ledger_v1, &pf);
    for (ev_tstamp end = ev_time() + 20; pf.calls == 0 && ev_time() < end;)
        ev_run(L, EVRUN_ONCE);
    T_EQ(pf.calls, 1);
    T_EQ(pf.err, GP_ECONFLICT);
    gp_db_free(old);
}

static void
alarm_h(int sig)
{
    (void)sig;
    static const char m[] = "not ok - migrate_test hung (alarm)\n";
    if (write(1, m, sizeof(m) - 1) < 0)
        _exit(3);
    _exit(2);
}

int
main(void)
{
    ev_timer guard;

    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, alarm_h);
    alarm(240);
    gp_log_setup("migrate_test", getenv("GP_LOG_LEVEL") ? getenv("GP_LOG_LEVEL") : "info", 2);
    conninfo = getenv("GP_PG_CONNINFO");
    if (conninfo == NULL) {
        printf("not ok 1 - GP_PG_CONNINFO not set (run under tests/harness/with-stack.sh)\n");
        return 1;
    }
    admin = PQconnectdb(conninfo);
    if (PQstatus(admin) != CONNECTION_OK) {
        printf("not ok 1 - admin connection: %s", PQerrorMessage(admin));
        return 1;
    }
    PQsetNoticeProcessor(admin, quiet, NULL);
    L = ev_loop_new(EVFLAG_AUTO);
    ev_timer_init(&guard, tick_cb, 0.05, 0.05);
    ev_timer_start(L, &guard);

    t_upgrade();
    t_second_start();
    t_concurrent();
    t_failed_step();
    t_too_new();
    t_renamed();
    t_bad_lists();
    t_roles();
    t_roles_refused();
    t_check_waits();

    ev_timer_stop(L, &guard);
    ev_loop_destroy(L);
    PQfinish(admin);
    return T_DONE();
}
