/* gp/db.h -- non-blocking PostgreSQL (libpq) on one libev loop.
 *
 * A small pool of connections, each with one query in flight; a bounded
 * queue of waiting queries; a deadline per query (on expiry the connection
 * is dropped and reopened, since PQcancel blocks); reconnect with capped
 * exponential backoff and jitter; versioned schema migrations applied
 * once, before the pool takes queries.
 *
 * Migrations.  A service lists its schema as ordered steps (version, name,
 * SQL).  The first connection that comes up takes a session advisory lock
 * (one key for every service, so two instances starting at once queue
 * up), creates gp_migrations(service, version, name, applied_at) if
 * missing, reads the service's recorded versions and applies each newer
 * step in its own transaction: the step's SQL and the row recording it
 * commit together, so a step is applied once or not at all and never
 * re-run.  Then it unlocks and every pooled connection turns ready; the
 * others wait meanwhile.  Queries submitted earlier wait in the queue.
 * A failed step breaks the connection and is retried after the backoff.
 * A database whose recorded version for the service is newer than the
 * newest step known (a newer build migrated it), or whose recorded step
 * carries another name than the known step of that version, is refused
 * for good: one ERROR line (event pg_schema_refused, naming both
 * versions), every connection closed, queued queries failed and later
 * ones refused with CONFLICT, and fail_cb called once.  The check runs
 * when the pool starts, not at reconnects.
 *
 * Roles mode (opts.roles; gp/dbrole.h says what it does): the migrator's
 * connection (a superuser's: it makes roles and hands tables over) runs
 * the roles' setup after the lock, so the steps run as the owner role,
 * and the login's grants after the steps.  gp_db_migrate runs that once
 * on its own connection and closes it; the service's pool logs in as the
 * login (opts.user) and only checks the schema (opts.check_only): it
 * reads gp_migrations, refuses a newer schema as above, and while the
 * schema is behind (or unreadable) waits with the backoff, one WARN line
 * (pg_schema_behind) a try, until a migration made it current.
 *
 * Never PQexec, never PQconnectdb: the loop never waits on the server.
 * All functions and callbacks: loop thread only. */
#ifndef GP_DB_H
#define GP_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/dbrole.h"
#include "gp/err.h"

struct ev_loop;
struct pg_result;                          /* PGresult from <libpq-fe.h> */

typedef struct gp_db    gp_db;
typedef struct gp_db_tx gp_db_tx;

/* One schema step.  sql may hold several statements; they run in one
 * transaction, so no BEGIN/COMMIT and nothing that refuses a transaction
 * block (CREATE INDEX CONCURRENTLY, VACUUM).  A step, once released, is
 * never edited or renumbered: a change is a new step. */
typedef struct gp_migration {
    int         version;                   /* 1, 2, 3...: strictly increasing */
    const char *name;                      /* recorded with the version */
    const char *sql;
} gp_migration;

#define GP_MIGRATION_END {0, NULL, NULL}

/* The pool gave up for good (see Migrations above); once, loop thread.
 * Also gp_db_migrate's end: err OK when the schema is current. */
typedef void gp_db_fail_cb(void *arg, gp_err err, const char *detail);

/* Roles mode: who owns, who logs in and with which privileges. */
typedef struct gp_db_roles {
    const char     *owner;                 /* GP_DB_OWNER_ROLE in practice */
    const char     *login;                 /* the service's login role */
    const gp_grant *grants;                /* ended by GP_GRANT_END; NULL = none */
    /* NULL or "": none set; else the login's password, set as a SCRAM
     * verifier made here (the cleartext is not sent; copied, wiped) */
    const char     *password;
} gp_db_roles;

typedef struct gp_db_opts {
    const char         *conninfo;          /* libpq keyword/value string or URI */
    unsigned            pool_size;         /* 0 = 2 */
    unsigned            query_timeout_ms;  /* default per query; 0 = 5000 */
    /* Steps in version order, ended by GP_MIGRATION_END; NULL = none.  The
     * array is copied, the strings are not (static text in practice). */
    const gp_migration *migrations;
    const char         *service;           /* with migrations: [A-Za-z0-9_-]{1,63} */
    unsigned            migrate_timeout_ms;/* per migration round trip, lock wait
                                            * included; 0 = 60000 */
    gp_db_fail_cb      *fail_cb;           /* may be NULL */
    void               *fail_arg;
    const char         *user;              /* NULL or "": the conninfo's; else this role */
    const char         *app_name;          /* application_name unless the conninfo says */
    /* Never migrate: check the recorded versions of service against the
     * steps, wait while they are behind (see Roles mode). */
    bool                check_only;
    bool                held;              /* connections start at gp_db_start */
    const gp_db_roles  *roles;             /* gp_db_migrate only (copied) */
} gp_db_opts;

/* Called exactly once per query/transaction, on the loop thread.
 *  err OK: results[0..nres) are the statements' results (for a plain
 *  query nres is 1), valid only during the call.
 *  Otherwise results is NULL and detail says why (server message or
 *  "timeout").  Server errors are mapped: unique violation -> EXISTS,
 *  foreign key violation -> NOTFOUND, check/not-null/invalid text ->
 *  INVAL, serialization failure -> CONFLICT, others -> INTERNAL;
 *  connection trouble -> UNAVAIL; deadline -> TIMEOUT. */
typedef void gp_db_cb(void *arg, gp_err err, struct pg_result *const *results, int nres,
                      const char *detail);

typedef void gp_db_conn_cb(void *arg, bool connected);

typedef struct gp_db_stats {
    uint64_t queries;
    uint64_t errors;
    uint64_t timeouts;
    uint64_t reconnects;
    uint32_t queued;
    uint32_t connected;                    /* pool connections ready */
    int32_t  schema_version;               /* the service's version once migrated, else 0 */
    uint32_t migrations_applied;           /* steps this pool applied */
} gp_db_stats;

/* INVAL: bad conninfo, migrations out of order or without a valid service. */
gp_err gp_db_new(struct ev_loop *loop, const gp_db_opts *opts,
                 gp_db_conn_cb *conn_cb, void *conn_arg, gp_db **out);
/* Migrates once (gp_db_new's opts: migrations and service; roles for the
 * roles mode, else the steps run as the conninfo's user) on one connection
 * of opts->conninfo, which it then closes.  done(arg, err, detail) once:
 * OK migrated; CONFLICT the database was refused; INTERNAL a step, the
 * setup or the grants failed (logged: pg_migrate_failed), not retried.  A
 * connection that fails is retried with the backoff.  Free with
 * gp_db_free (done may).  INVAL: as gp_db_new, or a bad role or grant. */
gp_err gp_db_migrate(struct ev_loop *loop, const gp_db_opts *opts, gp_db_fail_cb *done,
                     void *arg, gp_db **out);
/* A held pool (opts.held) starts connecting; otherwise nothing. */
void   gp_db_start(gp_db *db);
/* A keyword's value in conninfo ("user", "password"), into out ("" when it
 * names none).  INVAL: not a conninfo; TOOBIG past cap. */
gp_err gp_db_conninfo_get(const char *conninfo, const char *keyword, char *out, size_t cap);
/* Closes every connection; queued and running queries get UNAVAIL.  NULL ok. */
void   gp_db_free(gp_db *db);
bool   gp_db_is_connected(const gp_db *db);  /* at least one ready connection */
void   gp_db_get_stats(const gp_db *db, gp_db_stats *out);
/* GP_EOK, or why the pool refused the database for good (CONFLICT);
 * *detail (may be NULL) then says it in words. */
gp_err gp_db_refused(const gp_db *db, const char **detail);

/* Runs one parameterized statement (text parameters; NULL = SQL NULL).
 * Parameters are copied.  timeout_ms 0 = default.  UNAVAIL when the pool
 * is closing; CONFLICT when it refused the database; TOOBIG when the
 * queue is full; cb is not called then. */
gp_err gp_db_query(gp_db *db, const char *sql, int nparams, const char *const *params,
                   unsigned timeout_ms, gp_db_cb *cb, void *arg);

/* Transactions: statements run in order on one connection between BEGIN
 * and COMMIT; the first failure rolls back and fails the whole.  */
gp_db_tx *gp_db_tx_new(gp_db *db);
gp_err    gp_db_tx_add(gp_db_tx *tx, const char *sql, int nparams, const char *const *params);
/* Submits (takes ownership of tx, also on error). */
gp_err    gp_db_tx_run(gp_db_tx *tx, unsigned timeout_ms, gp_db_cb *cb, void *arg);

#endif
