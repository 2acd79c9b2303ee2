/* gp/db.h -- non-blocking PostgreSQL (libpq) on one libev loop.
 *
 * A small pool of connections, each with one query in flight; a bounded
 * queue of waiting queries; a deadline per query (on expiry the connection
 * is dropped and reopened, since PQcancel blocks); reconnect with capped
 * exponential backoff and jitter; an optional idempotent migration script
 * run on every new connection before it takes queries.
 *
 * Never PQexec, never PQconnectdb: the loop never waits on the server.
 * All functions and callbacks: loop thread only. */
#ifndef GP_DB_H
#define GP_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"

struct ev_loop;
struct pg_result;                          /* PGresult from <libpq-fe.h> */

typedef struct gp_db    gp_db;
typedef struct gp_db_tx gp_db_tx;

typedef struct gp_db_opts {
    const char *conninfo;                  /* libpq keyword/value string or URI */
    unsigned    pool_size;                 /* 0 = 2 */
    unsigned    query_timeout_ms;          /* default per query; 0 = 5000 */
    const char *migrate_sql;               /* may be NULL; several statements allowed */
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
} gp_db_stats;

gp_err gp_db_new(struct ev_loop *loop, const gp_db_opts *opts,
                 gp_db_conn_cb *conn_cb, void *conn_arg, gp_db **out);
/* Closes every connection; queued and running queries get UNAVAIL.  NULL ok. */
void   gp_db_free(gp_db *db);
bool   gp_db_is_connected(const gp_db *db);  /* at least one ready connection */
void   gp_db_get_stats(const gp_db *db, gp_db_stats *out);

/* Runs one parameterized statement (text parameters; NULL = SQL NULL).
 * Parameters are copied.  timeout_ms 0 = default.  UNAVAIL when no
 * connection is ready and none is coming; TOOBIG when the queue is full;
 * cb is not called then. */
gp_err gp_db_query(gp_db *db, const char *sql, int nparams, const char *const *params,
                   unsigned timeout_ms, gp_db_cb *cb, void *arg);

/* Transactions: statements run in order on one connection between BEGIN
 * and COMMIT; the first failure rolls back and fails the whole.  */
gp_db_tx *gp_db_tx_new(gp_db *db);
gp_err    gp_db_tx_add(gp_db_tx *tx, const char *sql, int nparams, const char *const *params);
/* Submits (takes ownership of tx, also on error). */
gp_err    gp_db_tx_run(gp_db_tx *tx, unsigned timeout_ms, gp_db_cb *cb, void *arg);

#endif
