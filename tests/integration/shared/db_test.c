/* db_test.c -- gp/db.h against a real PostgreSQL from tests/harness/stack.sh.
 *
 * Needs GP_PG_CONNINFO, GP_STACK_DIR and GP_HARNESS (with-stack.sh sets
 * them).  Each step runs the loop until its callbacks came. */
#include <ev.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp/db.h"
#include "gp/dbarray.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "test.h"

/* test.h's T_EQ_INT evaluates its arguments twice; these calls have side
 * effects, so evaluate once. */
#define T_EQ(a, b) do {                                                        \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        T_OKM(a_ == b_, "%s == %s (%lld vs %lld)", #a, #b, a_, b_);            \
    } while (0)

static struct ev_loop *L;
static const char     *conninfo;

/* ---- helpers ---------------------------------------------------------- */

typedef struct qres {
    int      calls;
    gp_err   err;
    int      nres;
    int      ntuples;
    char     v[4][128];            /* first row, first 4 columns of the last result */
    bool     isnull[4];
    int      ntuples_each[8];
    char     detail[GP_ERRBUF_LEN];
    ev_tstamp t;
} qres;

static void
q_cb(void *arg, gp_err err, struct pg_result *const *results, int nres, const char *detail)
{
    qres *q = arg;

    q->calls++;
    q->err = err;
    q->nres = nres;
    q->t = ev_time();
    snprintf(q->detail, sizeof(q->detail), "%s", detail ? detail : "(null)");
    if (err != GP_EOK || nres <= 0)
        return;
    for (int i = 0; i < nres && i < 8; i++)
        q->ntuples_each[i] = PQntuples(results[i]);
    const PGresult *r = results[nres - 1];
    q->ntuples = PQntuples(r);
    if (q->ntuples > 0)
        for (int c = 0; c < PQnfields(r) && c < 4; c++) {
            q->isnull[c] = PQgetisnull(r, 0, c);
            snprintf(q->v[c], sizeof(q->v[c]), "%s", PQgetvalue(r, 0, c));
        }
}

static void
tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop; (void)w; (void)revents;
}

/* Runs the loop until *calls >= n or secs pass. */
static bool
wait_calls(const int *calls, int n, double secs)
{
    ev_tstamp end = ev_time() + secs;

    while (*calls < n && ev_time() < end)
        ev_run(L, EVRUN_ONCE);
    return *calls >= n;
}

static void
spin(double secs)
{
    ev_tstamp end = ev_time() + secs;

    while (ev_time() < end)
        ev_run(L, EVRUN_ONCE);
}

typedef struct connst {
    int  up, down;
    bool last;
} connst;

static void
conn_cb(void *arg, bool connected)
{
    connst *s = arg;

    if (connected)
        s->up++;
    else
        s->down++;
    s->last = connected;
}

static uint32_t
n_connected(gp_db *db)
{
    gp_db_stats st;

    gp_db_get_stats(db, &st);
    return st.connected;
}

static bool
wait_connected(gp_db *db, uint32_t n, double secs)
{
    ev_tstamp end = ev_time() + secs;

    while (n_connected(db) < n && ev_time() < end)
        ev_run(L, EVRUN_ONCE);
    return n_connected(db) >= n;
}

/* Runs one query to completion. */
static gp_err
run_q(gp_db *db, qres *q, const char *sql, int n, const char *const *p)
{
    memset(q, 0, sizeof(*q));
    gp_err e = gp_db_query(db, sql, n, p, 10000, q_cb, q);
    if (e != GP_EOK)
        return e;
    if (!wait_calls(&q->calls, 1, 15))
        return GP_EINTERNAL;
    return q->err;
}

static int
stack(const char *what)
{
    char        cmd[1024];
    const char *h = getenv("GP_HARNESS"), *d = getenv("GP_STACK_DIR");

    if (h == NULL || d == NULL)
        return -1;
    snprintf(cmd, sizeof(cmd), "'%s/stack.sh' %s '%s'", h, what, d);
    return system(cmd);
}

static const char migrate_sql[] =
    "CREATE TABLE IF NOT EXISTS parent (id int PRIMARY KEY);\n"
    "CREATE TABLE IF NOT EXISTS child (\n"
    "  id serial PRIMARY KEY,\n"
    "  parent_id int REFERENCES parent(id),\n"
    "  name text NOT NULL UNIQUE,\n"
    "  note text,\n"
    "  qty int CONSTRAINT child_qty_nonneg CHECK (qty >= 0));\n"
    "CREATE INDEX IF NOT EXISTS child_parent_idx ON child(parent_id)";

static const gp_migration steps[] = {
    {1, "parent and child", migrate_sql},
    GP_MIGRATION_END
};

/* ---- cases ------------------------------------------------------------ */

static void
t_basic(gp_db *db)
{
    qres q;

    T_EQ(run_q(db, &q, "SELECT to_regclass('public.child') IS NOT NULL", 0, NULL), GP_EOK);
    T_OK(strcmp(q.v[0], "t") == 0);
    T_EQ(q.calls, 1);
    T_EQ(q.nres, 1);

    const char *p1[] = {"1"};
    T_EQ(run_q(db, &q, "INSERT INTO parent (id) VALUES ($1::int)", 1, p1), GP_EOK);

    const char *name = "O'Brien \"the\" ; DROP TABLE child; --";
    const char *p2[] = {"1", name, NULL, "5"};
    T_EQ(run_q(db, &q,
                   "INSERT INTO child (parent_id, name, note, qty) VALUES ($1, $2, $3, $4) "
                   "RETURNING name, note IS NULL, qty, note",
                   4, p2),
             GP_EOK);
    T_OK(strcmp(q.v[0], name) == 0);
    T_OK(strcmp(q.v[1], "t") == 0);
    T_OK(strcmp(q.v[2], "5") == 0);
    T_OK(q.isnull[3]);
    T_EQ(q.ntuples, 1);

    /* errors mapped by SQLSTATE, detail names the constraint */
    const char *p3[] = {"1", name, "x", "1"};
    T_EQ(run_q(db, &q, "INSERT INTO child (parent_id, name, note, qty) VALUES ($1,$2,$3,$4)",
                   4, p3), GP_EEXISTS);
    T_OKM(strstr(q.detail, "child_name_key") != NULL, "unique detail: %s", q.detail);
    const char *p4[] = {"999", "orphan", NULL, "1"};
    T_EQ(run_q(db, &q, "INSERT INTO child (parent_id, name, note, qty) VALUES ($1,$2,$3,$4)",
                   4, p4), GP_ENOTFOUND);
    T_OKM(strstr(q.detail, "child_parent_id_fkey") != NULL, "fk detail: %s", q.detail);
    const char *p5[] = {"1", "negative", NULL, "-3"};
    T_EQ(run_q(db, &q, "INSERT INTO child (parent_id, name, note, qty) VALUES ($1,$2,$3,$4)",
                   4, p5), GP_EINVAL);
    T_OKM(strstr(q.detail, "child_qty_nonneg") != NULL, "check detail: %s", q.detail);
    T_OK(q.nres == 0);
    const char *p6[] = {"1", NULL};
    T_EQ(run_q(db, &q, "INSERT INTO child (parent_id, name) VALUES ($1,$2)", 2, p6),
             GP_EINVAL);                    /* not null */
    const char *p7[] = {"abc"};
    T_EQ(run_q(db, &q, "SELECT $1::int", 1, p7), GP_EINVAL);   /* invalid text */
    T_EQ(run_q(db, &q, "SELECT * FROM no_such_table", 0, NULL), GP_EINTERNAL);
    T_OK(q.calls == 1);

    /* argument checks: no callback */
    T_EQ(gp_db_query(db, NULL, 0, NULL, 0, q_cb, &q), GP_EINVAL);
    T_EQ(gp_db_query(db, "SELECT 1", 1, NULL, 0, q_cb, &q), GP_EINVAL);
    T_EQ(gp_db_query(db, "SELECT 1", 0, NULL, 0, NULL, NULL), GP_EINVAL);
    T_EQ(gp_db_query(db, "SELECT 1", GP_DB_MAX_PARAMS + 1, p1, 0, q_cb, &q), GP_ETOOBIG);
}

/* gp/dbarray.h: PostgreSQL reads every element back exactly. */
/* Connections run with JIT off (short statements only), unless the
 * conninfo's own options turn it on: those win. */
static void
t_session_settings(gp_db *db)
{
    qres   q;
    char   ci[1024];
    gp_db *db2 = NULL;
    connst cs2 = {0};

    T_EQ(run_q(db, &q, "SHOW jit", 0, NULL), GP_EOK);
    T_OKM(strcmp(q.v[0], "off") == 0, "jit is '%s' on a gridpool connection", q.v[0]);
    snprintf(ci, sizeof(ci), "%s%soptions=-c%%20jit%%3Don", conninfo,
             strchr(conninfo, '?') != NULL ? "&" : "?");
    gp_db_opts o = {.conninfo = ci, .pool_size = 1, .migrations = steps, .service = "db_test"};
    T_EQ(gp_db_new(L, &o, conn_cb, &cs2, &db2), GP_EOK);
    for (ev_tstamp end = ev_time() + 10; cs2.up == 0 && ev_time() < end;)
        ev_run(L, EVRUN_ONCE);
    T_EQ(run_q(db2, &q, "SHOW jit", 0, NULL), GP_EOK);
    T_OKM(strcmp(q.v[0], "on") == 0, "the conninfo's options=-c jit=on wins: jit is '%s'", q.v[0]);
    gp_db_free(db2);
}

static void
t_array_literal(gp_db *db)
{
    static const char *const v[] = {"a b", "c\"d", "x\\y", "{e,f}", "", "NULL", " lead", "é"};
    gp_buf b = GP_BUF_INIT;
    qres   q;
    bool   same = true;

    gp_pgarr_begin(&b);
    for (size_t i = 0; i < GP_NELEM(v); i++)
        gp_pgarr_add(&b, v[i]);
    gp_pgarr_add(&b, NULL);
    gp_pgarr_end(&b);
    for (size_t i = 0; i < GP_NELEM(v); i++) {
        char        idx[8];
        const char *p[] = {b.p, idx};
        snprintf(idx, sizeof(idx), "%zu", i + 1);
        if (run_q(db, &q, "SELECT ($1::text[])[$2::int]", 2, p) != GP_EOK || q.isnull[0] ||
            strcmp(q.v[0], v[i]) != 0) {
            printf("# element %zu: got '%s' want '%s'\n", i + 1, q.v[0], v[i]);
            same = false;
        }
    }
    T_OKM(same, "every element of %s read back as written", b.p);
    const char *p2[] = {b.p};
    T_EQ(run_q(db, &q, "SELECT cardinality($1::text[]), ($1::text[])[9] IS NULL, "
                       "'c\"d' = ANY($1::text[])", 1, p2), GP_EOK);
    T_OK(strcmp(q.v[0], "9") == 0 && strcmp(q.v[1], "t") == 0 && strcmp(q.v[2], "t") == 0);
    gp_pgarr_begin(&b);
    gp_pgarr_end(&b);
    const char *p3[] = {b.p};
    T_EQ(run_q(db, &q, "SELECT cardinality($1::text[])", 1, p3), GP_EOK);
    T_OK(strcmp(q.v[0], "0") == 0);
    gp_buf_fini(&b);
}

static void
t_tx(gp_db *db)
{
    qres      q;
    gp_db_tx *tx;

    /* 3rd statement fails: nothing of the first two stays */
    tx = gp_db_tx_new(db);
    const char *a[] = {"tx-a", "1"};
    const char *b[] = {"tx-b", "2"};
    const char *c[] = {"tx-c", "77"};              /* no parent 77 */
    T_EQ(gp_db_tx_add(tx, "INSERT INTO child (name, qty) VALUES ($1, $2::int)", 2, a), GP_EOK);
    T_EQ(gp_db_tx_add(tx, "INSERT INTO child (name, qty) VALUES ($1, $2::int)", 2, b), GP_EOK);
    T_EQ(gp_db_tx_add(tx, "INSERT INTO child (name, parent_id) VALUES ($1, $2::int)", 2, c),
             GP_EOK);
    T_EQ(gp_db_tx_add(tx, "SELECT 1", 0, NULL), GP_EOK);
    memset(&q, 0, sizeof(q));
    T_EQ(gp_db_tx_run(tx, 0, q_cb, &q), GP_EOK);
    T_OK(wait_calls(&q.calls, 1, 10));
    T_EQ(q.err, GP_ENOTFOUND);
    T_OKM(strstr(q.detail, "child_parent_id_fkey") != NULL, "tx detail: %s", q.detail);
    T_EQ(run_q(db, &q, "SELECT count(*) FROM child WHERE name LIKE 'tx-%'", 0, NULL), GP_EOK);
    T_OK(strcmp(q.v[0], "0") == 0);

    /* both connections still usable after the rollback */
    qres q1, q2;
    memset(&q1, 0, sizeof(q1));
    memset(&q2, 0, sizeof(q2));
    T_EQ(gp_db_query(db, "SELECT 1", 0, NULL, 0, q_cb, &q1), GP_EOK);
    T_EQ(gp_db_query(db, "SELECT 2", 0, NULL, 0, q_cb, &q2), GP_EOK);
    T_OK(wait_calls(&q1.calls, 1, 10) && wait_calls(&q2.calls, 1, 10));
    T_OK(q1.err == GP_EOK && q2.err == GP_EOK);

    /* committed: every statement's result, rows visible afterwards */
    tx = gp_db_tx_new(db);
    const char *d[] = {"tx-d", "3"};
    const char *e[] = {"tx-e", "4"};
    gp_db_tx_add(tx, "INSERT INTO child (name, qty) VALUES ($1, $2::int) RETURNING id", 2, d);
    gp_db_tx_add(tx, "INSERT INTO child (name, qty) VALUES ($1, $2::int) RETURNING id", 2, e);
    gp_db_tx_add(tx, "SELECT name FROM child WHERE name LIKE 'tx-%' ORDER BY name", 0, NULL);
    memset(&q, 0, sizeof(q));
    T_EQ(gp_db_tx_run(tx, 0, q_cb, &q), GP_EOK);
    T_OK(wait_calls(&q.calls, 1, 10));
    T_EQ(q.err, GP_EOK);
    T_EQ(q.nres, 3);
    T_EQ(q.ntuples_each[0], 1);
    T_EQ(q.ntuples_each[1], 1);
    T_EQ(q.ntuples_each[2], 2);
    T_EQ(run_q(db, &q, "SELECT count(*) FROM child WHERE name LIKE 'tx-%'", 0, NULL), GP_EOK);
    T_OK(strcmp(q.v[0], "2") == 0);

    /* serialization-style conflict mapping via a raised SQLSTATE */
    T_EQ(run_q(db, &q, "DO $$BEGIN RAISE EXCEPTION 'boom' USING ERRCODE = '40001'; END$$",
                   0, NULL), GP_ECONFLICT);

    /* builder errors are sticky and reported by run; run frees */
    tx = gp_db_tx_new(db);
    T_EQ(gp_db_tx_add(tx, NULL, 0, NULL), GP_EINVAL);
    T_EQ(gp_db_tx_add(tx, "SELECT 1", 0, NULL), GP_EINVAL);
    T_EQ(gp_db_tx_run(tx, 0, q_cb, &q), GP_EINVAL);
    tx = gp_db_tx_new(db);
    T_EQ(gp_db_tx_run(tx, 0, q_cb, &q), GP_EINVAL);   /* empty */
}

static int ticks;
static void
count_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop; (void)w; (void)revents;
    ticks++;
}

static void
t_nonblocking(gp_db *db)
{
    qres     slow, fast;
    ev_timer tick;

    T_OK(wait_connected(db, 2, 10));
    memset(&slow, 0, sizeof(slow));
    memset(&fast, 0, sizeof(fast));
    ev_timer_init(&tick, count_tick, 0.01, 0.01);
    ev_now_update(L);
    ev_tstamp t0 = ev_time();
    ticks = 0;
    ev_timer_start(L, &tick);
    T_EQ(gp_db_query(db, "SELECT pg_sleep(1)", 0, NULL, 5000, q_cb, &slow), GP_EOK);
    T_EQ(gp_db_query(db, "SELECT 1", 0, NULL, 5000, q_cb, &fast), GP_EOK);
    T_OK(wait_calls(&slow.calls, 1, 5));
    int during = ticks;
    ev_timer_stop(L, &tick);
    T_EQ(slow.err, GP_EOK);
    T_EQ(fast.err, GP_EOK);
    T_OKM(fast.calls == 1 && fast.t - t0 < 0.2, "SELECT 1 took %.3f s", fast.t - t0);
    T_OKM(fast.t < slow.t, "SELECT 1 done before the sleep");
    T_OKM(slow.t - t0 >= 0.95, "sleep took %.3f s", slow.t - t0);
    T_OKM(during >= 50, "ticks during the sleep: %d", during);
}

static void
t_timeout(gp_db *db)
{
    qres        q;
    gp_db_stats st0, st;

    gp_db_get_stats(db, &st0);
    memset(&q, 0, sizeof(q));
    ev_now_update(L);
    ev_tstamp t0 = ev_time();
    T_EQ(gp_db_query(db, "SELECT pg_sleep(5)", 0, NULL, 300, q_cb, &q), GP_EOK);
    T_OK(wait_calls(&q.calls, 1, 5));
    T_EQ(q.err, GP_ETIMEOUT);
    T_OKM(q.t - t0 >= 0.28 && q.t - t0 < 0.8, "timeout after %.3f s", q.t - t0);
    gp_db_get_stats(db, &st);
    T_EQ(st.timeouts, st0.timeouts + 1);
    T_EQ(run_q(db, &q, "SELECT 41 + 1", 0, NULL), GP_EOK);
    T_OK(strcmp(q.v[0], "42") == 0);
    T_OK(wait_connected(db, 2, 10));       /* the dropped one came back */
    gp_db_get_stats(db, &st);
    T_OK(st.reconnects >= st0.reconnects + 1);
}

static void
t_restart(gp_db *db, connst *cs)
{
    qres        q;
    gp_db_stats st;
    int         down0 = cs->down, up0 = cs->up;

    T_OK(wait_connected(db, 2, 10));
    T_EQ(stack("stop-pg"), 0);
    /* both pooled connections notice: conn_cb(false) once */
    for (ev_tstamp end = ev_time() + 10; cs->down == down0 && ev_time() < end;)
        ev_run(L, EVRUN_ONCE);
    T_EQ(cs->down, down0 + 1);
    T_OK(!gp_db_is_connected(db));
    memset(&q, 0, sizeof(q));
    T_EQ(gp_db_query(db, "SELECT 40 + 2", 0, NULL, 30000, q_cb, &q), GP_EOK);
    spin(0.3);                              /* a few failed attempts */
    gp_db_get_stats(db, &st);
    T_EQ(st.queued, 1);
    T_EQ(q.calls, 0);
    T_EQ(stack("start-pg"), 0);
    T_OK(wait_calls(&q.calls, 1, 30));
    T_EQ(q.err, GP_EOK);
    T_OK(strcmp(q.v[0], "42") == 0);
    T_EQ(cs->up, up0 + 1);
    T_EQ(cs->down, down0 + 1);
    T_OK(gp_db_is_connected(db));
    gp_db_get_stats(db, &st);
    T_OK(st.reconnects >= 2);
    T_EQ(run_q(db, &q, "SELECT count(*) FROM child", 0, NULL), GP_EOK);
}

/* A pool that never connects: queue-wait timeout, queue limit, free. */
static int  *calls_each;
static int   unavail_each;
static void
each_cb(void *arg, gp_err err, struct pg_result *const *r, int n, const char *detail)
{
    (void)r; (void)n; (void)detail;
    calls_each[(intptr_t)arg]++;
    if (err == GP_EUNAVAIL)
        unavail_each++;
}

static void
t_queue_limit(void)
{
    gp_db      *db;
    gp_db_opts  o = {.conninfo = "host=127.0.0.1 port=1 user=postgres dbname=x", .pool_size = 1};
    qres        q;
    gp_db_stats st;

    T_EQ(gp_db_new(L, &o, NULL, NULL, &db), GP_EOK);
    memset(&q, 0, sizeof(q));
    T_EQ(gp_db_query(db, "SELECT 1", 0, NULL, 200, q_cb, &q), GP_EOK);
    T_OK(wait_calls(&q.calls, 1, 5));
    T_EQ(q.err, GP_ETIMEOUT);
    T_OK(!gp_db_is_connected(db));

    calls_each = calloc(GP_DB_MAX_QUEUE + 1, sizeof(int));
    unavail_each = 0;
    int ok = 0;
    for (intptr_t i = 0; i < GP_DB_MAX_QUEUE; i++)
        ok += gp_db_query(db, "SELECT 1", 0, NULL, 60000, each_cb, (void *)i) == GP_EOK;
    T_EQ(ok, GP_DB_MAX_QUEUE);
    T_EQ(gp_db_query(db, "SELECT 1", 0, NULL, 60000, each_cb, (void *)(intptr_t)GP_DB_MAX_QUEUE),
             GP_ETOOBIG);
    gp_db_tx *tx = gp_db_tx_new(db);
    gp_db_tx_add(tx, "SELECT 1", 0, NULL);
    T_EQ(gp_db_tx_run(tx, 0, each_cb, (void *)(intptr_t)GP_DB_MAX_QUEUE), GP_ETOOBIG);
    gp_db_get_stats(db, &st);
    T_EQ(st.queued, GP_DB_MAX_QUEUE);
    spin(0.2);
    T_EQ(unavail_each, 0);
    gp_db_free(db);
    T_EQ(unavail_each, GP_DB_MAX_QUEUE);
    int once = 1;
    for (int i = 0; i < GP_DB_MAX_QUEUE; i++)
        once &= calls_each[i] == 1;
    T_OK(once);
    T_EQ(calls_each[GP_DB_MAX_QUEUE], 0);
    spin(0.1);
    T_EQ(unavail_each, GP_DB_MAX_QUEUE);
    free(calls_each);
    calls_each = NULL;

    /* bad conninfo is refused up front */
    gp_db_opts bad = {.conninfo = "host=127.0.0.1 nosuchkeyword=1"};
    T_EQ(gp_db_new(L, &bad, NULL, NULL, &db), GP_EINVAL);
    T_OK(db == NULL);
}

/* gp_db_free from inside a callback: the rest get UNAVAIL once. */
typedef struct freer {
    gp_db *db;
    qres   q;
    gp_err after;
} freer;

static void
free_cb(void *arg, gp_err err, struct pg_result *const *r, int n, const char *detail)
{
    freer *f = arg;

    q_cb(&f->q, err, r, n, detail);
    gp_db_free(f->db);
    gp_db_free(f->db);                      /* twice is harmless */
    f->after = gp_db_query(f->db, "SELECT 1", 0, NULL, 0, q_cb, &f->q);
    /* still valid until this callback returns */
    T_OK(!gp_db_is_connected(f->db));
}

static void
t_free_in_cb(void)
{
    gp_db     *db;
    gp_db_opts o = {.conninfo = conninfo, .pool_size = 2, .migrations = steps,
                    .service = "db_test"};
    freer      f;
    qres       b, c;

    T_EQ(gp_db_new(L, &o, NULL, NULL, &db), GP_EOK);
    T_OK(wait_connected(db, 2, 10));
    memset(&f, 0, sizeof(f));
    memset(&b, 0, sizeof(b));
    memset(&c, 0, sizeof(c));
    f.db = db;
    T_EQ(gp_db_query(db, "SELECT 1", 0, NULL, 0, free_cb, &f), GP_EOK);
    T_EQ(gp_db_query(db, "SELECT pg_sleep(2)", 0, NULL, 0, q_cb, &b), GP_EOK);
    T_EQ(gp_db_query(db, "SELECT 3", 0, NULL, 0, q_cb, &c), GP_EOK);    /* queued */
    T_OK(wait_calls(&f.q.calls, 1, 5));
    T_EQ(f.q.err, GP_EOK);
    T_EQ(f.after, GP_EUNAVAIL);
    T_EQ(b.calls, 1);
    T_EQ(b.err, GP_EUNAVAIL);
    T_EQ(c.calls, 1);
    T_EQ(c.err, GP_EUNAVAIL);
    spin(0.1);
    T_EQ(f.q.calls, 1);
    T_EQ(b.calls + c.calls, 2);
}

/* Two pools of three connections migrating one service at once; the
 * steps are not idempotent, so a second run would fail and reconnect.
 * (migrate_test covers migrations in depth.) */
static void
t_concurrent_migrate(void)
{
    static const gp_migration race[] = {
        {1, "race table", "CREATE TABLE mig_race (id int)"},
        {2, "race table 2", "CREATE TABLE mig_race2 (id int)"},
        GP_MIGRATION_END
    };
    gp_db     *a, *b;
    gp_db_opts o = {.conninfo = conninfo, .pool_size = 3, .migrations = race,
                    .service = "db_test_race"};

    T_EQ(gp_db_new(L, &o, NULL, NULL, &a), GP_EOK);
    T_EQ(gp_db_new(L, &o, NULL, NULL, &b), GP_EOK);
    T_OK(wait_connected(a, 3, 15));
    T_OK(wait_connected(b, 3, 15));
    gp_db_stats st;
    gp_db_get_stats(a, &st);
    T_EQ(st.reconnects, 0);             /* no migration failed */
    T_EQ(st.schema_version, 2);
    uint32_t applied = st.migrations_applied;
    gp_db_get_stats(b, &st);
    T_EQ(st.reconnects, 0);
    T_EQ(st.schema_version, 2);
    T_EQ(applied + st.migrations_applied, 2);     /* each step once, by either */
    gp_db_free(a);
    gp_db_free(b);
}

static void
alarm_h(int sig)
{
    (void)sig;
    static const char m[] = "not ok - db_test hung (alarm)\n";
    if (write(1, m, sizeof(m) - 1) < 0)
        _exit(3);
    _exit(2);
}

int
main(void)
{
    gp_db     *db;
    connst     cs = {0};
    ev_timer   guard;

    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, alarm_h);
    alarm(240);
    gp_log_setup("db_test", getenv("GP_LOG_LEVEL") ? getenv("GP_LOG_LEVEL") : "info", 2);
    conninfo = getenv("GP_PG_CONNINFO");
    if (conninfo == NULL) {
        printf("not ok 1 - GP_PG_CONNINFO not set (run under tests/harness/with-stack.sh)\n");
        return 1;
    }
    L = ev_loop_new(EVFLAG_AUTO);
    /* keeps EVRUN_ONCE from blocking forever while a step waits */
    ev_timer_init(&guard, tick_cb, 0.05, 0.05);
    ev_timer_start(L, &guard);

    gp_db_opts o = {.conninfo = conninfo, .pool_size = 2, .migrations = steps,
                    .service = "db_test"};
    T_EQ(gp_db_new(L, &o, conn_cb, &cs, &db), GP_EOK);
    T_OK(!gp_db_is_connected(db));
    for (ev_tstamp end = ev_time() + 10; cs.up == 0 && ev_time() < end;)
        ev_run(L, EVRUN_ONCE);
    T_EQ(cs.up, 1);
    T_OK(gp_db_is_connected(db));

    t_basic(db);
    t_session_settings(db);
    t_array_literal(db);
    t_tx(db);
    t_concurrent_migrate();
    t_nonblocking(db);
    t_timeout(db);
    t_queue_limit();
    t_free_in_cb();
    t_restart(db, &cs);

    /* free with a running and a queued query: each UNAVAIL once, at once */
    qres r1, r2, r3;
    memset(&r1, 0, sizeof(r1));
    memset(&r2, 0, sizeof(r2));
    memset(&r3, 0, sizeof(r3));
    T_OK(wait_connected(db, 2, 10));
    T_EQ(gp_db_query(db, "SELECT pg_sleep(3)", 0, NULL, 0, q_cb, &r1), GP_EOK);
    T_EQ(gp_db_query(db, "SELECT pg_sleep(3)", 0, NULL, 0, q_cb, &r2), GP_EOK);
    T_EQ(gp_db_query(db, "SELECT 3", 0, NULL, 0, q_cb, &r3), GP_EOK);
    spin(0.1);
    int down0 = cs.down;
    gp_db_free(db);
    T_OK(r1.calls == 1 && r2.calls == 1 && r3.calls == 1);
    T_OK(r1.err == GP_EUNAVAIL && r2.err == GP_EUNAVAIL && r3.err == GP_EUNAVAIL);
    T_EQ(cs.down, down0);               /* no conn_cb for our own free */
    gp_db_free(NULL);

    /* every watcher is gone: ev_run returns by itself */
    ev_timer_stop(L, &guard);
    alarm(20);
    T_OKM(ev_run(L, 0) == 0, "ev_run returned by itself: no active watcher left");
    alarm(0);
    ev_loop_destroy(L);
    return T_DONE();
}
