/* db.c -- non-blocking PostgreSQL pool on one libev loop (see gp/db.h).
 *
 * Each pooled connection is a small state machine:
 *
 *                                         +-> MIGRATING ---+
 *   WAIT --timer--> CONNECTING --poll OK--+                 +--> READY <--> BUSY
 *     ^                 |                 +-> SCHEMA_WAIT --+      |         |
 *     +---- break (PQfinish, backoff) -----------------------------+---------+
 *
 * CONNECTING is PQconnectStart + PQconnectPoll driven by an ev_io on
 * PQsocket (fd and direction re-armed at every step) under a deadline.
 * Until the service's schema is migrated, the first connection up is the
 * migrator (MIGRATING, one round trip per phase, simple protocol, each
 * under a deadline): LOCK (session advisory lock, gp_migrations created if
 * missing, recorded versions read), one STEP per missing version (the
 * step's SQL and its gp_migrations row in one implicit transaction), then
 * UNLOCK.  Connections coming up meanwhile wait (SCHEMA_WAIT, socket
 * watched so a close is noticed); when the migrator breaks one of them
 * takes over, starting again from LOCK.  Once migrated, connections go
 * straight to READY, also after reconnects.  In the roles mode the LOCK
 * phase also runs the roles' setup (the session turns into the owner) and
 * UNLOCK the grants first (gp/dbrole.h).  A check-only pool's first
 * connection up is the checker instead: CHECK reads the recorded versions
 * (no lock: a step and its record commit together); behind, it waits in
 * SCHEMA_WAIT under a backoff timer (WAIT) and checks again.  A
 * gp_db_migrate pool (once) closes its one connection after UNLOCK, or
 * gives up at the first failed phase.  READY
 * connections are in pipeline mode: a job (one statement, or BEGIN, the
 * statements and COMMIT) is sent as one pipeline closed by a Sync, so a
 * transaction costs one round trip.  After the Sync, a connection left
 * inside a transaction (a failed statement in BEGIN..COMMIT) gets a ROLLBACK
 * (CLEANUP) before it takes the next job.
 *
 * One ev_timer per job counts from submission (queue wait included); on
 * expiry a queued job leaves the queue, a running one drops its connection
 * (PQcancel blocks), which reconnects at once.
 *
 * User callbacks run only from libev callbacks or gp_db_free, never from
 * gp_db_query/gp_db_tx_run; gp_db_free inside a callback is deferred to
 * the end of the libev callback that is running (db->depth). */
#include "gp/db.h"

#include <ev.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp/backoff.h"
#include "gp/buf.h"
#include "gp/dbrole.h"
#include "gp/limits.h"
#include "gp/log.h"

#define DB_MAX_POOL            64
#define DB_DEFAULT_POOL        2
#define DB_DEFAULT_TIMEOUT_MS  5000
/* Connect (migrations have their own deadline); libpq's connect_timeout only applies to the
 * blocking calls we never make. */
#define DB_CONNECT_TIMEOUT_MS  10000
/* A ROLLBACK after a failed transaction. */
#define DB_CLEANUP_TIMEOUT_MS  5000
/* Advisory lock key serializing migrations across connections/processes
 * (the same key the unversioned migrations of the previous version took). */
#define DB_MIGRATE_LOCK_KEY    7453010373645655553LL   /* "gpdbmig\1" */
#define DB_MIGRATE_TIMEOUT_MS  60000

typedef enum conn_state {
    CS_WAIT,            /* no connection; timer = backoff */
    CS_CONNECTING,      /* PQconnectPoll; timer = deadline */
    CS_MIGRATING,       /* the migrator: a migration phase in flight; timer = deadline */
    CS_SCHEMA_WAIT,     /* connected, waiting for the migrator */
    CS_READY,           /* idle, pipeline mode */
    CS_BUSY,            /* job in flight */
    CS_CLEANUP          /* ROLLBACK in flight; timer = deadline */
} conn_state;

typedef enum mig_phase {
    MP_LOCK,            /* lock, (roles' setup), create gp_migrations, read the versions */
    MP_STEP,            /* one step and its record */
    MP_UNLOCK,          /* (the grants,) unlock */
    MP_CHECK,           /* check only: read the recorded versions */
    MP_WAIT             /* check only: behind; the checker's timer checks again */
} mig_phase;

typedef struct db_stmt {
    char  *blob;        /* one allocation: params array, sql, params */
    size_t size;        /* of blob: zeroed before it is freed */
    char  *sql;
    char **params;
    int    nparams;
} db_stmt;

typedef struct db_job {
    struct db_job  *prev, *next;   /* queue links */
    gp_db          *db;
    struct db_conn *conn;          /* while running */
    gp_db_cb       *cb;
    void           *arg;
    ev_timer        timer;
    bool            tx;
    int             nstmts, capstmts;
    db_stmt        *stmts;
    gp_err          build_err;     /* tx: first gp_db_tx_add failure (sticky) */
    int             rx;            /* command results received */
    PGresult      **res;           /* nstmts slots */
    gp_err          err;
    char            detail[GP_ERRBUF_LEN];
} db_job;

struct gp_db_tx {
    db_job job;
};

typedef struct db_conn {
    gp_db     *db;
    unsigned   idx;
    PGconn    *pg;
    conn_state state;
    ev_io      io;
    int        io_fd, io_ev;
    ev_timer   timer;
    gp_backoff backoff;        /* reconnect delays */
    unsigned   fails;          /* failed attempts since last up */
    bool       started;        /* an attempt was made before */
    bool       up;             /* counted in db->nready */
    bool       want_write;     /* PQflush said 1 */
    bool       fail_pending;   /* break at next timer callback */
    bool       mig_failed;
    db_job    *job;
    char       detail[GP_ERRBUF_LEN];
} db_conn;

struct gp_db {
    struct ev_loop *loop;
    char           *conninfo;
    char           *user;          /* NULL: the conninfo's */
    char           *app_name;
    bool            check_only;    /* never migrate (MP_CHECK) */
    bool            held;          /* not started yet (gp_db_start) */
    bool            once;          /* gp_db_migrate: close after, fail at once */
    char           *setup_sql;     /* roles mode: after the lock */
    char           *grants_sql;    /* roles mode: before the unlock */
    char           *owner;         /* roles mode: the role the steps run as */
    char           *login;
    char           *password;      /* the login's, or NULL (wiped at free) */
    char            service[GP_MAX_ID + 1];
    gp_migration   *steps;         /* copy of opts->migrations */
    int             nsteps;
    unsigned        mig_timeout_ms;
    bool            schema_ok;     /* migrated (or nothing to migrate) */
    db_conn        *migrator;      /* the connection migrating, or NULL */
    mig_phase       phase;
    int             next_step;     /* index into steps */
    PGresult       *recorded;      /* MP_LOCK: the recorded versions */
    gp_err          refused;       /* gave up for good */
    char            refusal[GP_ERRBUF_LEN];
    gp_db_fail_cb  *fail_cb;
    void           *fail_arg;
    unsigned        pool_size;
    unsigned        timeout_ms;
    gp_db_conn_cb  *conn_cb;
    void           *conn_arg;
    db_conn        *conns;
    db_job         *qhead, *qtail;
    unsigned        qlen;
    unsigned        nready;
    gp_db_stats     st;
    int             depth;         /* libev callbacks / destroy on the stack */
    bool            closing;       /* gp_db_free started */
    bool            free_pending;  /* gp_db_free called inside a callback */
    bool            destroying;
};

static void conn_start(db_conn *c);
static void conn_break(db_conn *c, const char *why, bool fast);
static void db_dispatch(gp_db *db);
static void db_destroy(gp_db *db);
static void mig_takeover(gp_db *db);

/* ---- small helpers ---------------------------------------------------- */

/* Copies s into out on one line: newlines/tabs become spaces, runs of
 * spaces collapse, trailing space goes; quote_safe also turns '"' into '\''
 * (for log values in quotes). */
static void
clean_text(char *out, size_t cap, const char *s, bool quote_safe)
{
    size_t n = 0;
    bool   sp = false;

    if (s == NULL)
        s = "";
    for (; *s != '\0' && n + 1 < cap; s++) {
        char ch = *s;
        if (ch == '\n' || ch == '\r' || ch == '\t' || ch == ' ') {
            sp = n > 0;
            continue;
        }
        if (sp) {
            if (n + 2 >= cap)
                break;
            out[n++] = ' ';
            sp = false;
        }
        out[n++] = quote_safe && ch == '"' ? '\'' : ch;
    }
    out[n] = '\0';
}

static gp_err
map_sqlstate(const char *s)
{
    if (s == NULL || s[0] == '\0')
        return GP_EUNAVAIL;                 /* libpq's own: connection trouble */
    if (strcmp(s, "23505") == 0)
        return GP_EEXISTS;
    if (strcmp(s, "23503") == 0)
        return GP_ENOTFOUND;
    if (strcmp(s, "23502") == 0 || strcmp(s, "23514") == 0 || strncmp(s, "22", 2) == 0)
        return GP_EINVAL;
    if (strcmp(s, "40001") == 0 || strcmp(s, "40P01") == 0)
        return GP_ECONFLICT;
    if (strncmp(s, "08", 2) == 0 || strcmp(s, "57P01") == 0 || strcmp(s, "57P02") == 0 ||
        strcmp(s, "57P03") == 0)
        return GP_EUNAVAIL;
    if (strcmp(s, "57014") == 0)
        return GP_ETIMEOUT;                 /* statement_timeout / canceled */
    return GP_EINTERNAL;
}

/* "primary message (constraint name)" */
static void
result_detail(char *out, size_t cap, const PGresult *r)
{
    const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    const char *cn = PQresultErrorField(r, PG_DIAG_CONSTRAINT_NAME);
    char        tmp[GP_ERRBUF_LEN];

    if (m == NULL)
        m = PQresultErrorMessage(r);
    if (m == NULL || m[0] == '\0')
        m = PQresStatus(PQresultStatus(r));
    if (cn != NULL)
        snprintf(tmp, sizeof(tmp), "%s (constraint %s)", m, cn);
    else
        snprintf(tmp, sizeof(tmp), "%s", m);
    clean_text(out, cap, tmp, false);
}

static void
notice_cb(void *arg, const char *msg)
{
    db_conn *c = arg;
    char     t[GP_ERRBUF_LEN];

    if (!gp_log_enabled(GP_LOG_DEBUG))
        return;
    clean_text(t, sizeof(t), msg, true);
    GP_DEBUG("pg_notice", "conn=%u detail=\"%s\"", c->idx, t);
}

static void
db_enter(gp_db *db)
{
    db->depth++;
}

static void
db_leave(gp_db *db)
{
    if (--db->depth == 0 && db->free_pending && !db->destroying)
        db_destroy(db);
}

/* ---- statements and jobs ---------------------------------------------- */

static gp_err
stmt_check(const char *sql, int nparams, const char *const *params)
{
    if (sql == NULL || nparams < 0 || (nparams > 0 && params == NULL))
        return GP_EINVAL;
    if (nparams > GP_DB_MAX_PARAMS)
        return GP_ETOOBIG;
    return GP_EOK;
}

static gp_err
stmt_init(db_stmt *s, const char *sql, int nparams, const char *const *params)
{
    size_t hdr = (size_t)nparams * sizeof(char *);
    size_t len = strlen(sql) + 1;
    char  *p;

    for (int i = 0; i < nparams; i++)
        if (params[i] != NULL)
            len += strlen(params[i]) + 1;
    s->blob = malloc(hdr + len);
    if (s->blob == NULL)
        return GP_ENOMEM;
    s->size = hdr + len;
    s->params = nparams > 0 ? (char **)(void *)s->blob : NULL;
    p = s->blob + hdr;
    s->sql = p;
    memcpy(p, sql, strlen(sql) + 1);
    p += strlen(sql) + 1;
    for (int i = 0; i < nparams; i++) {
        if (params[i] == NULL) {
            s->params[i] = NULL;
            continue;
        }
        size_t n = strlen(params[i]) + 1;
        memcpy(p, params[i], n);
        s->params[i] = p;
        p += n;
    }
    s->nparams = nparams;
    return GP_EOK;
}

static gp_err
job_add(db_job *job, const char *sql, int nparams, const char *const *params)
{
    gp_err e = stmt_check(sql, nparams, params);

    if (e != GP_EOK)
        return e;
    if (job->nstmts >= GP_DB_MAX_TX_STMTS)
        return GP_ETOOBIG;
    if (job->nstmts == job->capstmts) {
        int      cap = job->capstmts ? job->capstmts * 2 : 4;
        db_stmt *n = realloc(job->stmts, (size_t)cap * sizeof(*n));
        if (n == NULL)
            return GP_ENOMEM;
        job->stmts = n;
        job->capstmts = cap;
    }
    e = stmt_init(&job->stmts[job->nstmts], sql, nparams, params);
    if (e == GP_EOK)
        job->nstmts++;
    return e;
}

static void
job_free(db_job *job)
{
    for (int i = 0; i < job->nstmts; i++) {
        /* parameters may be secrets (a tenant's, the key of them): no
         * copy is left in freed memory */
        explicit_bzero(job->stmts[i].blob, job->stmts[i].size);
        free(job->stmts[i].blob);
        if (job->res != NULL && job->res[i] != NULL)
            PQclear(job->res[i]);
    }
    free(job->stmts);
    free(job->res);
    free(job);
}

static void
queue_push(gp_db *db, db_job *job)
{
    job->next = NULL;
    job->prev = db->qtail;
    if (db->qtail != NULL)
        db->qtail->next = job;
    else
        db->qhead = job;
    db->qtail = job;
    db->qlen++;
}

static void
queue_remove(gp_db *db, db_job *job)
{
    if (job->prev != NULL)
        job->prev->next = job->next;
    else
        db->qhead = job->next;
    if (job->next != NULL)
        job->next->prev = job->prev;
    else
        db->qtail = job->prev;
    job->prev = job->next = NULL;
    db->qlen--;
}

/* Calls the callback once and frees the job.  The job is in no queue and
 * on no connection. */
static void
job_finish(db_job *job, gp_err err, const char *detail)
{
    gp_db *db = job->db;

    ev_timer_stop(db->loop, &job->timer);
    if (err != GP_EOK)
        db->st.errors++;
    if (err == GP_EOK)
        job->cb(job->arg, GP_EOK, (struct pg_result *const *)job->res, job->nstmts, "");
    else
        job->cb(job->arg, err, NULL, 0, detail != NULL ? detail : gp_err_str(err));
    job_free(job);
}

static void
job_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    db_job *job = GP_CONTAINER_OF(w, db_job, timer);
    gp_db  *db = job->db;

    (void)loop;
    (void)revents;
    db_enter(db);
    db->st.timeouts++;
    if (job->conn != NULL) {
        db_conn *c = job->conn;
        c->job = NULL;
        job->conn = NULL;
        GP_WARN("pg_query_timeout", "conn=%u err=TIMEOUT", c->idx);
        conn_break(c, "query timeout", true);
    } else {
        queue_remove(db, job);
    }
    job_finish(job, GP_ETIMEOUT, "timeout");
    db_leave(db);
}

/* Files one command's result: statement results are kept for the
 * callback, the first error is remembered, the rest is cleared. */
static void
job_result(db_job *job, PGresult *r)
{
    int            k = job->rx++;
    int            si = job->tx ? k - 1 : k;
    ExecStatusType st = PQresultStatus(r);

    switch (st) {
    case PGRES_COMMAND_OK:
    case PGRES_TUPLES_OK:
    case PGRES_EMPTY_QUERY:
    case PGRES_SINGLE_TUPLE:
        if (si >= 0 && si < job->nstmts && job->res[si] == NULL) {
            job->res[si] = r;
            return;
        }
        break;
    case PGRES_PIPELINE_ABORTED:
        break;
    case PGRES_FATAL_ERROR:
        if (job->err == GP_EOK) {
            job->err = map_sqlstate(PQresultErrorField(r, PG_DIAG_SQLSTATE));
            result_detail(job->detail, sizeof(job->detail), r);
        }
        break;
    default:                                /* COPY, bad response, ... */
        if (job->err == GP_EOK) {
            job->err = GP_EINTERNAL;
            snprintf(job->detail, sizeof(job->detail), "unexpected result %s",
                     PQresStatus(st));
        }
        break;
    }
    PQclear(r);
}

/* ---- connections ------------------------------------------------------ */

/* Watches the connection's current socket for events. */
static bool
conn_watch(db_conn *c, int events)
{
    struct ev_loop *loop = c->db->loop;
    int             fd = PQsocket(c->pg);

    if (fd < 0)
        return false;
    if (fd != c->io_fd || events != c->io_ev || !ev_is_active(&c->io)) {
        ev_io_stop(loop, &c->io);
        ev_io_set(&c->io, fd, events);
        ev_io_start(loop, &c->io);
        c->io_fd = fd;
        c->io_ev = events;
    }
    return true;
}

static bool
conn_arm(db_conn *c)
{
    return conn_watch(c, EV_READ | (c->want_write ? EV_WRITE : 0));
}

static void
conn_deadline(db_conn *c, unsigned ms)
{
    ev_timer_stop(c->db->loop, &c->timer);
    ev_timer_set(&c->timer, ms / 1000.0, 0.);
    ev_timer_start(c->db->loop, &c->timer);
}

/* PQflush, arming EV_WRITE while libpq has more to send. */
static bool
conn_flush(db_conn *c)
{
    int f = PQflush(c->pg);

    if (f < 0)
        return false;
    c->want_write = f == 1;
    return conn_arm(c);
}

/* Breaks the connection at the next loop iteration (from paths where the
 * caller must not see callbacks). */
static void
conn_fail_later(db_conn *c)
{
    clean_text(c->detail, sizeof(c->detail), PQerrorMessage(c->pg), false);
    c->fail_pending = true;
    ev_io_stop(c->db->loop, &c->io);
    conn_deadline(c, 0);
}

/* Drops the connection: running job fails UNAVAIL, a reconnect is
 * scheduled (at once when fast, else after the backoff). */
static void
conn_break(db_conn *c, const char *why, bool fast)
{
    gp_db  *db = c->db;
    db_job *job = c->job;
    bool    was_up = c->up;
    bool    was_migrator = db->migrator == c;
    char    detail[GP_ERRBUF_LEN], logd[GP_ERRBUF_LEN];

    if (was_migrator) {
        db->migrator = NULL;
        PQclear(db->recorded);
        db->recorded = NULL;
    }
    clean_text(detail, sizeof(detail), why, false);
    clean_text(logd, sizeof(logd), why, true);
    c->job = NULL;
    c->fail_pending = false;
    c->want_write = false;
    c->mig_failed = false;
    ev_io_stop(db->loop, &c->io);
    c->io_fd = -1;
    ev_timer_stop(db->loop, &c->timer);
    if (c->pg != NULL) {
        PQfinish(c->pg);
        c->pg = NULL;
    }
    c->state = CS_WAIT;
    if (was_up) {
        c->up = false;
        db->nready--;
        c->fails = 0;
        GP_WARN("pg_down", "conn=%u ready=%u err=UNAVAIL detail=\"%s\"", c->idx, db->nready, logd);
    } else if (++c->fails == 1) {
        GP_WARN("pg_connect_failed", "conn=%u err=UNAVAIL detail=\"%s\"", c->idx, logd);
    } else {
        GP_DEBUG("pg_connect_failed", "conn=%u fails=%u err=UNAVAIL detail=\"%s\"", c->idx,
                 c->fails, logd);
    }
    if (!db->closing) {
        ev_timer_set(&c->timer, fast ? 0. : gp_backoff_next_ms(&c->backoff) / 1000.0, 0.);
        ev_timer_start(db->loop, &c->timer);
    }
    if (was_migrator && !db->closing)
        mig_takeover(db);
    if (was_up && db->nready == 0 && db->conn_cb != NULL && !db->closing)
        db->conn_cb(db->conn_arg, false);
    if (job != NULL) {
        job->conn = NULL;
        job_finish(job, GP_EUNAVAIL, detail);
    }
}

static void
conn_ready(db_conn *c)
{
    gp_db *db = c->db;

    ev_timer_stop(db->loop, &c->timer);
    if (PQenterPipelineMode(c->pg) != 1) {
        conn_break(c, PQerrorMessage(c->pg), false);
        return;
    }
    c->want_write = false;
    if (!conn_arm(c)) {
        conn_break(c, "no socket", false);
        return;
    }
    c->state = CS_READY;
    c->up = true;
    c->fails = 0;
    gp_backoff_reset(&c->backoff);
    db->nready++;
    GP_INFO("pg_up", "conn=%u ready=%u", c->idx, db->nready);
    if (db->nready == 1 && db->conn_cb != NULL && !db->closing)
        db->conn_cb(db->conn_arg, true);
    db_dispatch(db);
}


/* ---- migrations ------------------------------------------------------- */

/* Sends one migration phase's text (simple protocol: several statements,
 * one implicit transaction) under the migration deadline.  Never calls
 * user callbacks: a failure breaks the connection at the next loop
 * iteration. */
static void
mig_send(db_conn *c, const char *sql)
{
    c->mig_failed = false;
    c->detail[0] = '\0';
    conn_deadline(c, c->db->mig_timeout_ms);
    if (!PQsendQuery(c->pg, sql) || !conn_flush(c))
        conn_fail_later(c);
}

/* The checker reads what is recorded, nothing else (check only). */
static void
check_send(db_conn *c)
{
    gp_db *db = c->db;
    char   sql[256];

    db->phase = MP_CHECK;
    c->state = CS_MIGRATING;
    snprintf(sql, sizeof(sql),
             "SELECT version, name FROM gp_migrations WHERE service = '%s' ORDER BY version",
             db->service);
    mig_send(c, sql);
}

/* Roles mode: the setup, the login's password (a SCRAM verifier made
 * here: no round trip, the cleartext never sent) and SET ROLE, into b. */
static gp_err
roles_enter(db_conn *c, gp_buf *b)
{
    gp_db *db = c->db;
    char  *v = NULL, *lit = NULL;
    gp_err rc = gp_buf_puts(b, db->setup_sql);

    if (rc == GP_EOK && db->password != NULL) {
        v = PQencryptPasswordConn(c->pg, db->password, db->login, "scram-sha-256");
        lit = v != NULL ? PQescapeLiteral(c->pg, v, strlen(v)) : NULL;
        rc = lit != NULL ? GP_EOK : GP_ENOMEM;
    }
    rc = rc ? rc : gp_dbrole_enter_sql(b, db->owner, db->login, lit);
    PQfreemem(lit);
    PQfreemem(v);
    return rc;
}

/* Takes the lock (waiting server-side for another instance's migration),
 * runs the roles' setup in the roles mode, makes sure the table exists and
 * reads what is recorded.  The service name is a checked token, safe to
 * inline.  A check-only pool checks instead. */
static void
mig_begin(db_conn *c)
{
    gp_db *db = c->db;
    gp_buf roles = GP_BUF_INIT;
    size_t n;
    char  *sql;

    db->migrator = c;
    if (db->check_only) {
        check_send(c);
        return;
    }
    db->phase = MP_LOCK;
    c->state = CS_MIGRATING;
    if (db->setup_sql != NULL && roles_enter(c, &roles) != GP_EOK) {
        gp_buf_fini(&roles);
        conn_fail_later(c);
        return;
    }
    n = roles.n + 1024;
    if ((sql = malloc(n)) == NULL) {
        gp_buf_fini(&roles);
        conn_fail_later(c);
        return;
    }
    snprintf(sql, n,
             "SELECT pg_advisory_lock(%lld);\n%s"
             "CREATE TABLE IF NOT EXISTS gp_migrations (\n"
             "  service text NOT NULL,\n"
             "  version int NOT NULL CHECK (version > 0),\n"
             "  name text NOT NULL,\n"
             "  applied_at timestamptz NOT NULL DEFAULT now(),\n"
             "  PRIMARY KEY (service, version));\n"
             "SELECT version, name FROM gp_migrations WHERE service = '%s' ORDER BY version",
             (long long)DB_MIGRATE_LOCK_KEY, roles.p != NULL ? roles.p : "", db->service);
    if (roles.p != NULL)
        explicit_bzero(roles.p, roles.n);        /* a verifier is a secret too */
    gp_buf_fini(&roles);
    mig_send(c, sql);
    explicit_bzero(sql, n);
    free(sql);
}

/* The migrator broke: a waiting connection starts again from the lock. */
static void
mig_takeover(gp_db *db)
{
    for (unsigned i = 0; i < db->pool_size && db->migrator == NULL; i++)
        if (db->conns[i].state == CS_SCHEMA_WAIT && !db->conns[i].fail_pending)
            mig_begin(&db->conns[i]);
}

/* Sends step db->next_step with the INSERT recording it. */
static void
mig_step(db_conn *c)
{
    gp_db              *db = c->db;
    const gp_migration *m = &db->steps[db->next_step];
    char               *name = PQescapeLiteral(c->pg, m->name, strlen(m->name));
    char               *sql = NULL;
    size_t              n = 0;
    char                logn[GP_ERRBUF_LEN];

    if (name != NULL) {
        n = strlen(m->sql) + strlen(name) + GP_MAX_ID + 128;
        sql = malloc(n);
    }
    if (sql == NULL) {
        PQfreemem(name);
        conn_break(c, "out of memory", false);
        return;
    }
    /* The newline ends a trailing -- comment of the step. */
    snprintf(sql, n, "%s\n;\nINSERT INTO gp_migrations (service, version, name) VALUES ('%s', %d, %s)",
             m->sql, db->service, m->version, name);
    PQfreemem(name);
    clean_text(logn, sizeof(logn), m->name, true);
    GP_INFO("pg_migrate_step", "conn=%u service=%s version=%d name=\"%s\"", c->idx, db->service,
            m->version, logn);
    db->phase = MP_STEP;
    mig_send(c, sql);
    free(sql);
}

/* Every connection closed (none was ready), none reconnects. */
static void
db_close_conns(gp_db *db)
{
    db->migrator = NULL;
    PQclear(db->recorded);
    db->recorded = NULL;
    for (unsigned i = 0; i < db->pool_size; i++) {
        db_conn *c = &db->conns[i];
        ev_io_stop(db->loop, &c->io);
        ev_timer_stop(db->loop, &c->timer);
        c->io_fd = -1;
        c->fail_pending = false;
        if (c->pg != NULL)
            PQfinish(c->pg);
        c->pg = NULL;
        c->state = CS_WAIT;
    }
}

/* For good: every connection closed, nothing reconnects, the queue and
 * later queries fail with err.  CONFLICT is a refused database (logged
 * here); a gp_db_migrate pool also ends so after a failed phase (logged
 * by its caller). */
static void
db_refuse(gp_db *db, gp_err err, const char *detail)
{
    char logd[GP_ERRBUF_LEN];

    clean_text(db->refusal, sizeof(db->refusal), detail, false);
    clean_text(logd, sizeof(logd), detail, true);
    if (err == GP_ECONFLICT)
        GP_ERROR("pg_schema_refused", "service=%s err=%s detail=\"%s\"", db->service,
                 gp_err_name(err), logd);
    db->refused = err;
    db_close_conns(db);
    while (db->qhead != NULL) {
        db_job *job = db->qhead;
        queue_remove(db, job);
        job_finish(job, err, db->refusal);
    }
    if (db->fail_cb != NULL && !db->closing)
        db->fail_cb(db->fail_arg, err, db->refusal);
}

static const gp_migration *
known_step(const gp_db *db, int version)
{
    for (int i = 0; i < db->nsteps; i++)
        if (db->steps[i].version == version)
            return &db->steps[i];
    return NULL;
}

/* Compares what the database records with the known steps.  false: the
 * database was refused. */
static bool
mig_check(gp_db *db, const PGresult *r)
{
    int  newest = db->nsteps > 0 ? db->steps[db->nsteps - 1].version : 0;
    char why[GP_ERRBUF_LEN];

    db->st.schema_version = 0;
    for (int row = 0; r != NULL && row < PQntuples(r); row++) {
        int                 v = atoi(PQgetvalue(r, row, 0));
        const char         *name = PQgetvalue(r, row, 1);
        const gp_migration *m = known_step(db, v);

        if (v > newest) {
            snprintf(why, sizeof(why),
                     "database has %s schema version %d, this build knows up to version %d: "
                     "run a newer build",
                     db->service, v, newest);
            db_refuse(db, GP_ECONFLICT, why);
            return false;
        }
        if (m != NULL && strcmp(m->name, name) != 0) {
            snprintf(why, sizeof(why),
                     "database has %s schema version %d named '%.60s', this build's version %d "
                     "is '%.60s'",
                     db->service, v, name, v, m->name);
            db_refuse(db, GP_ECONFLICT, why);
            return false;
        }
        if (v > db->st.schema_version)
            db->st.schema_version = v;
    }
    db->next_step = 0;
    while (db->next_step < db->nsteps && db->steps[db->next_step].version <= db->st.schema_version)
        db->next_step++;
    return true;
}

/* The schema is current: the migrator and every waiting connection turn
 * ready (conn_ready may call conn_cb, which may free the pool: deferred by
 * db->depth, and db->closing stops the rest). */
static void
mig_done(db_conn *c)
{
    gp_db *db = c->db;

    db->schema_ok = true;
    db->migrator = NULL;
    GP_INFO("pg_schema", "service=%s version=%d applied=%u%s", db->service, db->st.schema_version,
            db->st.migrations_applied, db->check_only ? " checked=true" : "");
    if (db->once) {                          /* gp_db_migrate: its work is done */
        db_close_conns(db);
        if (db->fail_cb != NULL && !db->closing)
            db->fail_cb(db->fail_arg, GP_EOK, "");
        return;
    }
    conn_ready(c);
    for (unsigned i = 0; i < db->pool_size && !db->closing; i++)
        if (db->conns[i].state == CS_SCHEMA_WAIT && !db->conns[i].fail_pending)
            conn_ready(&db->conns[i]);
}

/* Check only: the schema is behind, or gp_migrations could not be read
 * (why: the server's words); someone else must migrate.  The checker
 * waits with the backoff and checks again; the other connections wait. */
static void
check_wait(db_conn *c, const char *why)
{
    gp_db   *db = c->db;
    unsigned ms = gp_backoff_next_ms(&c->backoff);
    int      newest = db->nsteps > 0 ? db->steps[db->nsteps - 1].version : 0;
    char     logd[GP_ERRBUF_LEN + 2 * GP_MAX_ID + 128];

    if (why != NULL)
        clean_text(logd, sizeof(logd), why, true);
    else
        snprintf(logd, sizeof(logd), "the database has %s schema version %d, this build needs %d: "
                 "waiting for a migration (gridpool-%s --migrate-only with pg-migrate-conninfo)",
                 db->service, db->st.schema_version, newest, db->service);
    GP_WARN("pg_schema_behind", "conn=%u service=%s version=%d want=%d retry_ms=%u detail=\"%s\"",
            c->idx, db->service, db->st.schema_version, newest, ms, logd);
    db->phase = MP_WAIT;
    c->state = CS_SCHEMA_WAIT;
    if (!conn_watch(c, EV_READ)) {
        conn_break(c, "no socket", false);
        return;
    }
    conn_deadline(c, ms);
}

/* The last phase: the grants (roles mode), then the unlock. */
static void
mig_unlock(db_conn *c)
{
    gp_db *db = c->db;
    size_t n = (db->grants_sql != NULL ? strlen(db->grants_sql) : 0) + 64;
    char  *sql = malloc(n);

    db->phase = MP_UNLOCK;
    if (sql == NULL) {
        conn_fail_later(c);
        return;
    }
    snprintf(sql, n, "%sSELECT pg_advisory_unlock(%lld)",
             db->grants_sql != NULL ? db->grants_sql : "", (long long)DB_MIGRATE_LOCK_KEY);
    mig_send(c, sql);
    free(sql);
}

/* A phase failed: logged; the connection breaks and the phase is retried
 * after the backoff, but a gp_db_migrate pool gives up (a step that failed
 * fails again; its caller says so and exits). */
static void
mig_phase_failed(db_conn *c)
{
    gp_db *db = c->db;
    char   logd[GP_ERRBUF_LEN];

    clean_text(logd, sizeof(logd), c->detail, true);
    if (db->phase == MP_STEP)
        GP_ERROR("pg_migrate_failed", "conn=%u service=%s version=%d err=INTERNAL detail=\"%s\"",
                 c->idx, db->service, db->steps[db->next_step].version, logd);
    else
        GP_ERROR("pg_migrate_failed", "conn=%u service=%s phase=%s err=INTERNAL detail=\"%s\"",
                 c->idx, db->service, db->phase == MP_LOCK ? "setup" : "grants", logd);
    if (db->once)
        db_refuse(db, GP_EINTERNAL, c->detail);
    else
        conn_break(c, c->detail, false);
}

/* One migration phase's results are all in. */
static void
mig_phase_done(db_conn *c)
{
    gp_db *db = c->db;

    if (c->mig_failed && db->phase == MP_CHECK) {
        check_wait(c, c->detail);
        return;
    }
    if (c->mig_failed) {
        mig_phase_failed(c);
        return;
    }
    if (db->phase == MP_LOCK || db->phase == MP_CHECK) {
        bool ok = mig_check(db, db->recorded);
        PQclear(db->recorded);
        db->recorded = NULL;
        if (!ok)
            return;
        if (db->phase == MP_CHECK) {
            if (db->next_step < db->nsteps)
                check_wait(c, NULL);
            else
                mig_done(c);
            return;
        }
    } else if (db->phase == MP_STEP) {
        db->st.schema_version = db->steps[db->next_step].version;
        db->st.migrations_applied++;
        db->next_step++;
    } else {
        mig_done(c);
        return;
    }
    if (db->next_step < db->nsteps) {
        mig_step(c);
        return;
    }
    mig_unlock(c);
}

/* One result of a migration phase: the first error is kept; in MP_LOCK
 * the last rows are the recorded versions. */
static void
mig_result(db_conn *c, PGresult *r)
{
    gp_db *db = c->db;

    if (PQresultStatus(r) == PGRES_FATAL_ERROR && !c->mig_failed) {
        c->mig_failed = true;
        result_detail(c->detail, sizeof(c->detail), r);
    }
    if ((db->phase == MP_LOCK || db->phase == MP_CHECK) && PQresultStatus(r) == PGRES_TUPLES_OK &&
        PQnfields(r) == 2) {
        PQclear(db->recorded);
        db->recorded = r;
        return;
    }
    PQclear(r);
}

static void
conn_connected(db_conn *c)
{
    gp_db *db = c->db;

    if (PQsetnonblocking(c->pg, 1) != 0) {
        conn_break(c, PQerrorMessage(c->pg), false);
        return;
    }
    if (db->schema_ok) {
        conn_ready(c);
        return;
    }
    ev_timer_stop(db->loop, &c->timer);
    c->state = CS_SCHEMA_WAIT;
    if (!conn_watch(c, EV_READ)) {
        conn_break(c, "no socket", false);
        return;
    }
    if (db->migrator == NULL)
        mig_begin(c);
}

static void
conn_poll(db_conn *c)
{
    bool ok = true;

    switch (PQconnectPoll(c->pg)) {
    case PGRES_POLLING_READING:
        ok = conn_watch(c, EV_READ);
        break;
    case PGRES_POLLING_WRITING:
        ok = conn_watch(c, EV_WRITE);
        break;
    case PGRES_POLLING_OK:
        conn_connected(c);
        return;
    default:
        ok = false;
        break;
    }
    if (!ok)
        conn_break(c, PQerrorMessage(c->pg), false);
}

static void
conn_start(db_conn *c)
{
    gp_db *db = c->db;

    if (c->started)
        db->st.reconnects++;
    c->started = true;
    {
        /* JIT off unless the conninfo's own options say otherwise (they
         * come after, so they win): every statement here is short, and
         * a misestimated plan (statistics not yet analyzed after a fleet
         * registered) made PostgreSQL spend ~120 ms compiling one. */
        /* user after dbname: it wins over the conninfo's (an empty
         * value is no value) */
        static const char *const keys[] = {"options", "fallback_application_name", "dbname",
                                           "user", NULL};
        const char *const        vals[] = {"-c jit=off", db->app_name ? db->app_name : "",
                                           db->conninfo, db->user ? db->user : "", NULL};

        c->pg = PQconnectStartParams(keys, vals, 1);
    }
    if (c->pg == NULL) {
        conn_break(c, "out of memory", false);
        return;
    }
    if (PQstatus(c->pg) == CONNECTION_BAD) {
        conn_break(c, PQerrorMessage(c->pg), false);
        return;
    }
    PQsetNoticeProcessor(c->pg, notice_cb, c);
    c->state = CS_CONNECTING;
    c->want_write = false;
    conn_deadline(c, DB_CONNECT_TIMEOUT_MS);
    /* PQconnectStart acts as if PQconnectPoll had said WRITING. */
    if (!conn_watch(c, EV_WRITE))
        conn_break(c, PQerrorMessage(c->pg), false);
}

/* Sends job as one pipeline.  Never calls user callbacks: a failure breaks
 * the connection at the next loop iteration, failing the job then. */
static void
conn_send(db_conn *c, db_job *job)
{
    PGconn *pg = c->pg;
    bool    ok = true;

    c->job = job;
    job->conn = c;
    job->rx = 0;
    c->state = CS_BUSY;
    if (job->tx)
        ok = PQsendQueryParams(pg, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) == 1;
    for (int i = 0; ok && i < job->nstmts; i++) {
        const db_stmt *s = &job->stmts[i];
        ok = PQsendQueryParams(pg, s->sql, s->nparams, NULL, (const char *const *)s->params,
                               NULL, NULL, 0) == 1;
    }
    if (ok && job->tx)
        ok = PQsendQueryParams(pg, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) == 1;
    ok = ok && PQpipelineSync(pg) == 1;
    ok = ok && conn_flush(c);
    if (!ok)
        conn_fail_later(c);
}

static void
db_dispatch(gp_db *db)
{
    if (db->closing)
        return;
    for (unsigned i = 0; i < db->pool_size && db->qhead != NULL; i++) {
        db_conn *c = &db->conns[i];
        if (c->state != CS_READY || c->fail_pending)
            continue;
        db_job *job = db->qhead;
        queue_remove(db, job);
        conn_send(c, job);
    }
}

/* The job's Sync arrived: the connection is free (after a ROLLBACK when a
 * transaction was left open), the job is answered. */
static void
conn_done(db_conn *c)
{
    gp_db                  *db = c->db;
    db_job                 *job = c->job;
    PGTransactionStatusType ts = PQtransactionStatus(c->pg);

    c->job = NULL;
    if (job != NULL)
        job->conn = NULL;
    ev_timer_stop(db->loop, &c->timer);
    c->state = CS_READY;
    if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR) {
        c->state = CS_CLEANUP;
        conn_deadline(c, DB_CLEANUP_TIMEOUT_MS);
        if (PQsendQueryParams(c->pg, "ROLLBACK", 0, NULL, NULL, NULL, NULL, 0) != 1 ||
            PQpipelineSync(c->pg) != 1 || !conn_flush(c))
            conn_break(c, PQerrorMessage(c->pg), false);
    }
    if (job != NULL) {
        if (job->err == GP_EOK) {
            int want = job->tx ? job->nstmts + 2 : job->nstmts;
            for (int i = 0; i < job->nstmts; i++)
                if (job->res[i] == NULL)
                    want = -1;
            if (job->rx != want) {
                job->err = GP_EINTERNAL;
                snprintf(job->detail, sizeof(job->detail), "got %d results, expected %d",
                         job->rx, want);
            }
        }
        job_finish(job, job->err, job->detail);
    }
    db_dispatch(db);
}

/* Reads every complete result. */
static void
conn_drain(db_conn *c)
{
    int nulls = 0;

    while (!PQisBusy(c->pg)) {
        PGresult *r = PQgetResult(c->pg);
        if (r == NULL) {
            if (c->state == CS_MIGRATING) {
                mig_phase_done(c);
                return;
            }
            if (++nulls >= 2)               /* idle */
                break;
            continue;
        }
        nulls = 0;
        switch (c->state) {
        case CS_MIGRATING:
            mig_result(c, r);
            break;
        case CS_BUSY:
        case CS_CLEANUP:
            if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
                PQclear(r);
                conn_done(c);
                return;
            }
            if (c->job != NULL)
                job_result(c->job, r);
            else
                PQclear(r);
            break;
        default:
            PQclear(r);                     /* nothing asked: e.g. a FATAL at shutdown */
            break;
        }
    }
    if (PQstatus(c->pg) == CONNECTION_BAD)
        conn_break(c, PQerrorMessage(c->pg), false);
}

static void
conn_io(db_conn *c, int revents)
{
    if (c->want_write && !conn_flush(c)) {
        conn_break(c, PQerrorMessage(c->pg), false);
        return;
    }
    if (revents & EV_READ) {
        if (!PQconsumeInput(c->pg)) {
            conn_break(c, PQerrorMessage(c->pg), false);
            return;
        }
        if (c->want_write && !conn_flush(c)) {
            conn_break(c, PQerrorMessage(c->pg), false);
            return;
        }
        conn_drain(c);
    }
}

static void
conn_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    db_conn *c = GP_CONTAINER_OF(w, db_conn, io);
    gp_db   *db = c->db;

    (void)loop;
    db_enter(db);
    if (c->pg != NULL && !c->fail_pending) {     /* else the timer handles it */
        if (c->state == CS_CONNECTING)
            conn_poll(c);
        else
            conn_io(c, revents);
    }
    db_leave(db);
}

static void
conn_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    db_conn *c = GP_CONTAINER_OF(w, db_conn, timer);
    gp_db   *db = c->db;

    (void)loop;
    (void)revents;
    db_enter(db);
    if (c->fail_pending)
        conn_break(c, c->detail[0] ? c->detail : "send failed", false);
    else if (c->state == CS_WAIT)
        conn_start(c);
    else if (c->state == CS_SCHEMA_WAIT && db->migrator == c)
        check_send(c);                       /* the checker's wait is over */
    else if (c->state == CS_CONNECTING)
        conn_break(c, "connect timeout", false);
    else if (c->state == CS_MIGRATING)
        conn_break(c, "migration timeout", false);
    else if (c->state == CS_CLEANUP)
        conn_break(c, "rollback timeout", false);
    db_leave(db);
}

/* ---- API -------------------------------------------------------------- */

static bool
token_ok(const char *s)
{
    size_t n = 0;

    for (; s != NULL && s[n] != '\0'; n++)
        if (!(s[n] == '-' || s[n] == '_' || (s[n] >= '0' && s[n] <= '9') ||
              (s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z')))
            return false;
    return n >= 1 && n <= GP_MAX_ID;
}

/* The number of steps, or -1 (logged) when they are not usable: versions
 * must start at 1 or later and grow, every step needs a name and SQL. */
static int
check_steps(const gp_db_opts *o)
{
    int n = 0, prev = 0;

    if (o->migrations == NULL)
        return 0;
    if (!token_ok(o->service)) {
        GP_ERROR("pg_migrations_bad", "err=INVAL detail=\"service name must be 1-63 of [A-Za-z0-9_-]\"");
        return -1;
    }
    for (const gp_migration *m = o->migrations; m->sql != NULL || m->name != NULL; m++, n++) {
        if (m->version <= prev || m->name == NULL || m->sql == NULL) {
            GP_ERROR("pg_migrations_bad", "service=%s index=%d version=%d err=INVAL "
                     "detail=\"versions must grow from 1, each step needs a name and SQL\"",
                     o->service, n, m->version);
            return -1;
        }
        prev = m->version;
    }
    return n;
}

/* The conninfo parses (logged when not). */
static gp_err
conninfo_check(const char *conninfo)
{
    char             *errmsg = NULL;
    PQconninfoOption *ci = PQconninfoParse(conninfo, &errmsg);
    char              logd[GP_ERRBUF_LEN];

    if (ci != NULL) {
        PQconninfoFree(ci);
        return GP_EOK;
    }
    if (errmsg == NULL)
        return GP_ENOMEM;
    clean_text(logd, sizeof(logd), errmsg, true);
    GP_ERROR("pg_conninfo", "err=INVAL detail=\"%s\"", logd);
    PQfreemem(errmsg);
    return GP_EINVAL;
}

static char *
dup_or_null(const char *s, bool *oom)
{
    char *d;

    if (s == NULL || s[0] == '\0')
        return NULL;
    if ((d = strdup(s)) == NULL)
        *oom = true;
    return d;
}

static void
db_release(gp_db *db)
{
    PQclear(db->recorded);
    free(db->conninfo);
    free(db->user);
    free(db->app_name);
    free(db->setup_sql);
    free(db->grants_sql);
    free(db->owner);
    free(db->login);
    if (db->password != NULL)
        explicit_bzero(db->password, strlen(db->password));
    free(db->password);
    free(db->steps);
    free(db->conns);
    free(db);
}

/* What opts say, copied into db. */
static gp_err
db_copy(gp_db *db, const gp_db_opts *opts, unsigned pool, int nsteps)
{
    bool oom = false;

    db->timeout_ms = opts->query_timeout_ms ? opts->query_timeout_ms : DB_DEFAULT_TIMEOUT_MS;
    db->fail_cb = opts->fail_cb;
    db->fail_arg = opts->fail_arg;
    db->mig_timeout_ms = opts->migrate_timeout_ms ? opts->migrate_timeout_ms : DB_MIGRATE_TIMEOUT_MS;
    db->check_only = opts->check_only;
    db->schema_ok = opts->migrations == NULL;
    db->conninfo = strdup(opts->conninfo);
    db->user = dup_or_null(opts->user, &oom);
    db->app_name = dup_or_null(opts->app_name, &oom);
    db->conns = calloc(pool, sizeof(*db->conns));
    if (opts->service != NULL)
        snprintf(db->service, sizeof(db->service), "%s", opts->service);
    if (opts->migrations != NULL) {
        db->nsteps = nsteps;
        db->steps = calloc((size_t)nsteps + 1, sizeof(*db->steps));
        if (db->steps != NULL)
            memcpy(db->steps, opts->migrations, (size_t)nsteps * sizeof(*db->steps));
    }
    if (oom || db->conninfo == NULL || db->conns == NULL ||
        (opts->migrations != NULL && db->steps == NULL))
        return GP_ENOMEM;
    return GP_EOK;
}

/* A pool as opts say, its connections not started. */
static gp_err
db_make(struct ev_loop *loop, const gp_db_opts *opts, gp_db_conn_cb *conn_cb, void *conn_arg,
        gp_db **out)
{
    gp_db   *db;
    unsigned pool;
    int      nsteps;
    gp_err   rc;

    if (loop == NULL || opts == NULL || opts->conninfo == NULL || out == NULL)
        return GP_EINVAL;
    pool = opts->pool_size ? opts->pool_size : DB_DEFAULT_POOL;
    if (pool > DB_MAX_POOL)
        return GP_ERANGE;
    if ((nsteps = check_steps(opts)) < 0)
        return GP_EINVAL;
    if ((rc = conninfo_check(opts->conninfo)) != GP_EOK)
        return rc;
    if ((db = calloc(1, sizeof(*db))) == NULL)
        return GP_ENOMEM;
    db->loop = loop;
    db->pool_size = pool;
    db->conn_cb = conn_cb;
    db->conn_arg = conn_arg;
    if ((rc = db_copy(db, opts, pool, nsteps)) != GP_EOK) {
        db_release(db);
        return rc;
    }
    for (unsigned i = 0; i < pool; i++) {
        db_conn *c = &db->conns[i];
        c->db = db;
        c->idx = i;
        c->io_fd = -1;
        gp_backoff_init(&c->backoff, c);
        ev_io_init(&c->io, conn_io_cb, 0, EV_READ);
        ev_timer_init(&c->timer, conn_timer_cb, 0., 0.);
    }
    *out = db;
    return GP_EOK;
}

/* No user callback can run here: nothing is up and nothing queued yet
 * (gp_db_start: queued jobs wait for a ready connection). */
static void
db_start_conns(gp_db *db)
{
    db->held = false;
    for (unsigned i = 0; i < db->pool_size; i++)
        conn_start(&db->conns[i]);
}

gp_err
gp_db_new(struct ev_loop *loop, const gp_db_opts *opts, gp_db_conn_cb *conn_cb, void *conn_arg,
          gp_db **out)
{
    gp_db *db = NULL;
    gp_err rc;

    if (out != NULL)
        *out = NULL;
    if (opts != NULL && opts->roles != NULL)
        return GP_EINVAL;                    /* gp_db_migrate's */
    if ((rc = db_make(loop, opts, conn_cb, conn_arg, &db)) != GP_EOK)
        return rc;
    db->held = opts->held;
    if (!db->held)
        db_start_conns(db);
    *out = db;
    return GP_EOK;
}

void
gp_db_start(gp_db *db)
{
    if (db != NULL && db->held && !db->closing)
        db_start_conns(db);
}

/* The roles mode's two texts (gp/dbrole.h). */
static gp_err
roles_sql(gp_db *db, const gp_db_roles *r)
{
    gp_buf setup = GP_BUF_INIT, grants = GP_BUF_INIT;
    gp_err rc = gp_dbrole_setup_sql(&setup, r->owner, r->login);

    rc = rc ? rc : gp_dbrole_grants_sql(&grants, r->owner, r->login, r->grants);
    if (rc != GP_EOK) {
        gp_buf_fini(&setup);
        gp_buf_fini(&grants);
        GP_ERROR("pg_roles_bad", "service=%s err=%s detail=\"owner and login must be distinct "
                 "names of [a-z0-9_], grants plain words\"", db->service, gp_err_name(rc));
        return rc;
    }
    db->setup_sql = setup.p;
    db->grants_sql = grants.p;
    db->owner = strdup(r->owner);
    db->login = strdup(r->login);
    db->password = r->password != NULL && r->password[0] ? strdup(r->password) : NULL;
    if (db->owner == NULL || db->login == NULL ||
        (r->password != NULL && r->password[0] && db->password == NULL))
        return GP_ENOMEM;
    return GP_EOK;
}

gp_err
gp_db_migrate(struct ev_loop *loop, const gp_db_opts *opts, gp_db_fail_cb *done, void *arg,
              gp_db **out)
{
    gp_db     *db = NULL;
    gp_db_opts o;
    gp_err     rc;

    if (out != NULL)
        *out = NULL;
    if (opts == NULL || done == NULL || !token_ok(opts->service))
        return GP_EINVAL;
    o = *opts;
    o.pool_size = 1;
    o.fail_cb = done;
    o.fail_arg = arg;
    if ((rc = db_make(loop, &o, NULL, NULL, &db)) != GP_EOK)
        return rc;
    db->once = true;
    db->check_only = false;
    db->schema_ok = false;                   /* the phase runs without steps too */
    if (opts->roles != NULL && (rc = roles_sql(db, opts->roles)) != GP_EOK) {
        db_release(db);
        return rc;
    }
    db_start_conns(db);
    *out = db;
    return GP_EOK;
}

gp_err
gp_db_conninfo_get(const char *conninfo, const char *keyword, char *out, size_t cap)
{
    PQconninfoOption *ci = conninfo != NULL ? PQconninfoParse(conninfo, NULL) : NULL;
    gp_err            rc = GP_EOK;

    if (ci == NULL || out == NULL || cap == 0) {
        PQconninfoFree(ci);
        return GP_EINVAL;
    }
    out[0] = '\0';
    for (PQconninfoOption *o = ci; o->keyword != NULL; o++)
        if (strcmp(o->keyword, keyword) == 0 && o->val != NULL)
            rc = (size_t)snprintf(out, cap, "%s", o->val) >= cap ? GP_ETOOBIG : GP_EOK;
    PQconninfoFree(ci);
    return rc;
}

static void
db_destroy(gp_db *db)
{
    db_job *fail = NULL, **tail = &fail;

    db->destroying = true;
    db->closing = true;
    db->depth++;
    for (unsigned i = 0; i < db->pool_size; i++) {
        db_conn *c = &db->conns[i];
        ev_io_stop(db->loop, &c->io);
        ev_timer_stop(db->loop, &c->timer);
        if (c->job != NULL) {
            c->job->conn = NULL;
            c->job->next = NULL;
            *tail = c->job;
            tail = &c->job->next;
            c->job = NULL;
        }
        if (c->pg != NULL) {
            PQfinish(c->pg);
            c->pg = NULL;
        }
        if (c->up) {
            c->up = false;
            db->nready--;
        }
    }
    while (db->qhead != NULL) {
        db_job *job = db->qhead;
        queue_remove(db, job);
        *tail = job;
        tail = &job->next;
    }
    while (fail != NULL) {
        db_job *job = fail;
        fail = job->next;
        job_finish(job, GP_EUNAVAIL, "database client closed");
    }
    db_release(db);
}

void
gp_db_free(gp_db *db)
{
    if (db == NULL || db->destroying)
        return;
    db->closing = true;
    if (db->depth > 0) {
        db->free_pending = true;             /* at the end of the running callback */
        return;
    }
    db_destroy(db);
}

bool
gp_db_is_connected(const gp_db *db)
{
    return db != NULL && !db->closing && db->nready > 0;
}

void
gp_db_get_stats(const gp_db *db, gp_db_stats *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (db == NULL)
        return;
    *out = db->st;
    out->queued = db->qlen;
    out->connected = db->nready;
}

gp_err
gp_db_refused(const gp_db *db, const char **detail)
{
    if (detail != NULL)
        *detail = db != NULL && db->refused != GP_EOK ? db->refusal : "";
    return db != NULL ? db->refused : GP_EINVAL;
}

static gp_err
db_submit(gp_db *db, db_job *job, unsigned timeout_ms, gp_db_cb *cb, void *arg)
{
    if (cb == NULL || job->nstmts == 0)
        return GP_EINVAL;
    if (db->closing)
        return GP_EUNAVAIL;
    if (db->refused != GP_EOK)
        return db->refused;
    if (db->qlen >= GP_DB_MAX_QUEUE)
        return GP_ETOOBIG;
    job->res = calloc((size_t)job->nstmts, sizeof(*job->res));
    if (job->res == NULL)
        return GP_ENOMEM;
    job->db = db;
    job->cb = cb;
    job->arg = arg;
    job->err = GP_EOK;
    job->detail[0] = '\0';
    if (timeout_ms == 0)
        timeout_ms = db->timeout_ms;
    ev_timer_init(&job->timer, job_timer_cb, timeout_ms / 1000.0, 0.);
    ev_timer_start(db->loop, &job->timer);
    queue_push(db, job);
    db->st.queries++;
    db_dispatch(db);
    return GP_EOK;
}

gp_err
gp_db_query(gp_db *db, const char *sql, int nparams, const char *const *params,
            unsigned timeout_ms, gp_db_cb *cb, void *arg)
{
    db_job *job;
    gp_err  e;

    if (db == NULL)
        return GP_EINVAL;
    if (db->closing)
        return GP_EUNAVAIL;
    if (db->refused != GP_EOK)
        return db->refused;
    if ((e = stmt_check(sql, nparams, params)) != GP_EOK)
        return e;
    if (db->qlen >= GP_DB_MAX_QUEUE)
        return GP_ETOOBIG;
    job = calloc(1, sizeof(*job));
    if (job == NULL)
        return GP_ENOMEM;
    job->db = db;
    e = job_add(job, sql, nparams, params);
    if (e == GP_EOK)
        e = db_submit(db, job, timeout_ms, cb, arg);
    if (e != GP_EOK)
        job_free(job);
    return e;
}

gp_db_tx *
gp_db_tx_new(gp_db *db)
{
    gp_db_tx *tx;

    if (db == NULL)
        return NULL;
    tx = calloc(1, sizeof(*tx));
    if (tx == NULL)
        return NULL;
    tx->job.db = db;
    tx->job.tx = true;
    return tx;
}

gp_err
gp_db_tx_add(gp_db_tx *tx, const char *sql, int nparams, const char *const *params)
{
    gp_err e;

    if (tx == NULL)
        return GP_ENOMEM;                    /* gp_db_tx_new failed */
    if (tx->job.build_err != GP_EOK)
        return tx->job.build_err;
    e = job_add(&tx->job, sql, nparams, params);
    if (e != GP_EOK)
        tx->job.build_err = e;
    return e;
}

gp_err
gp_db_tx_run(gp_db_tx *tx, unsigned timeout_ms, gp_db_cb *cb, void *arg)
{
    gp_err e;

    if (tx == NULL)
        return GP_ENOMEM;
    e = tx->job.build_err;
    if (e == GP_EOK)
        e = db_submit(tx->job.db, &tx->job, timeout_ms, cb, arg);
    if (e != GP_EOK)
        job_free(&tx->job);
    return e;
}
