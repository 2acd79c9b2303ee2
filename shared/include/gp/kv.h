/* gp/kv.h -- asynchronous Redis on one libev loop (hiredis 0.14 async).
 *
 * Adds what hiredis 0.14 lacks: a per-command deadline, reconnect with
 * capped exponential backoff and jitter, and a cap on commands in flight.
 * Commands issued in the same loop iteration are written together
 * (pipelined) by hiredis.  While disconnected, commands fail at once with
 * UNAVAIL rather than queueing without bound.
 *
 * Cluster mode (opts.cluster, shared/src/kv_cluster.c): the same API over a
 * Redis Cluster.  At connect CLUSTER SLOTS from a seed gives the 16,384-slot
 * table; one connection (the single-node client) per master.  Each
 * command goes to the owner of the hash slot of its key (CRC16/XMODEM of
 * the key, or of its {hash tag}):
 *   - ordinary commands: the key is argv[1]; DEL/MGET/MSET/RENAME/...:
 *     every key must be in one slot, else INVAL (counted in crossslot) and
 *     nothing is sent;
 *   - EVAL/EVALSHA(_RO)/FCALL: the KEYS (argv[3..3+numkeys)); no key: any
 *     master;
 *   - keyless commands (PING, INFO, TIME, CLUSTER, ...): any master;
 *   - SCRIPT (LOAD/FLUSH/EXISTS...), FLUSHALL, FLUSHDB: EVERY master; the
 *     callback runs once, after all of them answered, with the first
 *     failure (an error reply or UNAVAIL/TIMEOUT) or else the last reply
 *     (SCRIPT LOAD: the same sha everywhere);
 *   - MULTI/EXEC/DISCARD/WATCH/UNWATCH (no pinning to one connection),
 *     SELECT, KEYS, SCAN (one node's view) and subscribe-mode commands:
 *     INVAL, nothing sent.
 * Redirections are followed inside the command's one deadline, and its
 * callback still runs exactly once: MOVED updates that slot, refreshes the
 * map in the background (coalesced) and resends to the new owner; ASK sends
 * ASKING + the command to the target once, without touching the map;
 * TRYAGAIN / CLUSTERDOWN wait (gp/backoff.h) and retry.  A master that is
 * down fails only its own commands (UNAVAIL at once, or in the callback for
 * those in flight); the map is refreshed and its connection retried with
 * backoff.  Connected = the map covers every slot and every master in it is
 * connected.
 *
 * All functions and callbacks: loop thread only. */
#ifndef GP_KV_H
#define GP_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"

struct ev_loop;
struct redisReply;                         /* <hiredis/hiredis.h> */

typedef struct gp_kv gp_kv;

typedef struct gp_kv_opts {
    const char *host;                      /* "127.0.0.1" */
    int         port;
    unsigned    connect_timeout_ms;        /* 0 = 2000 */
    unsigned    command_timeout_ms;        /* 0 = 2000 */
    bool        cluster;                   /* Redis Cluster mode (see above) */
    const char *seeds;                     /* cluster: "h:p,h:p"; NULL/"" = host:port */
    /* AUTH sent on every connection before any command (an ACL user, or
     * the default user's requirepass when user is NULL/""); NULL/"" = no
     * AUTH.  A refused AUTH is logged (redis_auth_refused) and retried
     * with the reconnect backoff: the connection never counts as up. */
    const char *user;
    const char *password;
} gp_kv_opts;

/* Called exactly once per command, on the loop thread.  On OK reply is the
 * server's reply (which may itself be a Redis error reply, type
 * REDIS_REPLY_ERROR); otherwise reply is NULL and err is TIMEOUT or
 * UNAVAIL.  reply is valid only during the call.  cb may be NULL. */
typedef void gp_kv_cb(void *arg, const struct redisReply *reply, gp_err err);

/* Connection events: connected (true) / lost (false). */
typedef void gp_kv_conn_cb(void *arg, bool connected);

typedef struct gp_kv_stats {
    uint64_t commands;
    uint64_t errors;                       /* UNAVAIL + Redis error replies */
    uint64_t timeouts;
    uint64_t reconnects;
    uint32_t inflight;
    uint32_t oldest_ms;                    /* how long the oldest command in flight has waited */
    /* cluster mode only (0 otherwise) */
    uint64_t moved;                        /* MOVED redirections followed */
    uint64_t ask;                          /* ASK redirections followed */
    uint64_t tryagain;                     /* TRYAGAIN / CLUSTERDOWN retries */
    uint64_t crossslot;                    /* commands refused: keys in several slots */
    uint64_t refreshes;                    /* CLUSTER SLOTS sent */
    uint32_t masters;                      /* masters in the current map */
} gp_kv_stats;

/* Starts connecting (returns at once; OK even if Redis is down). */
gp_err gp_kv_new(struct ev_loop *loop, const gp_kv_opts *opts,
                 gp_kv_conn_cb *conn_cb, void *conn_arg, gp_kv **out);
/* Disconnects; pending callbacks get UNAVAIL.  NULL is a no-op.  May be
 * called from inside a gp_kv callback (deferred). */
void   gp_kv_free(gp_kv *kv);
bool   gp_kv_is_connected(const gp_kv *kv);
void   gp_kv_get_stats(const gp_kv *kv, gp_kv_stats *out);

/* Sends one command given as argv (binary safe; argvlen may be NULL for
 * NUL-terminated strings).  UNAVAIL when disconnected, TOOBIG when
 * GP_KV_MAX_INFLIGHT commands are outstanding; cb is not called then. */
gp_err gp_kv_cmd(gp_kv *kv, gp_kv_cb *cb, void *arg,
                 int argc, const char **argv, const size_t *argvlen);

/* Same, hiredis format string ("HSET %s %s %b"). */
gp_err gp_kv_cmdf(gp_kv *kv, gp_kv_cb *cb, void *arg, const char *fmt, ...);

/* The Redis Cluster hash slot of a key (0..16383): CRC16/XMODEM of the key,
 * or of its hash tag -- the bytes between the first '{' and the first '}'
 * after it, when there is at least one.  Pure. */
int    gp_kv_key_slot(const char *key, size_t len);

#endif
