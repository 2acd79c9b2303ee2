/* kv_node.c -- one connection to one Redis server: the single-node client
 * behind gp/kv.h.  kv.c hands it the gp_kv of a service configured for one
 * Redis; kv_cluster.c holds one per master.  It calls neither of them (calls
 * go kv.c -> kv_cluster.c -> kv_node.c).  Loop thread only, like all of
 * gp/kv.h.
 *
 * hiredis 0.14.1 async + its libev adapter, wrapped the way h2o's
 * lib/common/redis.c does it:
 *
 *   - a state machine CLOSED -> CONNECTING -> CONNECTED -> CLOSED ...;
 *     a connect deadline (ev_timer; 0.14 has no redisOptions timeouts) and
 *     reconnect with capped exponential backoff and +-25% jitter;
 *   - per-command deadlines without a timer per command: Redis answers in
 *     order on one connection, so the commands in flight live in a FIFO
 *     ring (no malloc per command) with their deadlines, and ONE ev_timer
 *     is armed for the oldest.  It re-arms itself lazily for the new oldest
 *     when it fires early.  On expiry the context is freed: hiredis then
 *     calls every pending callback with a NULL reply, which we map to
 *     TIMEOUT (past its deadline) or UNAVAIL (the rest);
 *   - a cap on commands in flight (TOOBIG).
 *
 * Why redisAsyncFree and not redisAsyncDisconnect on a timeout: in 0.14
 * redisAsyncDisconnect is the *clean* disconnect; it waits for every
 * pending reply before closing, which is exactly what never comes.
 *
 * Lifetimes.  hiredis calls us from its callbacks (replies, connect,
 * disconnect) while its own frames are on the stack, and the user may call
 * gp_kv_free (kvn_free) from any of our callbacks.  So:
 *   - every entry point counts kv->depth; the struct is released only when
 *     the outermost frame leaves, kvn_free was called and no hiredis
 *     context is left (kv_leave);
 *   - inside a reply callback hiredis itself defers redisAsyncFree
 *     (REDIS_IN_CALLBACK) until the callback returns;
 *   - inside the connect callback it does not (and goes on using the
 *     context after it returns), so kvn_free there defers the teardown to
 *     a zero-delay timer;
 *   - a NULL reply or the disconnect callback means hiredis is already
 *     freeing the context: we mark it dying / forget it first thing, so
 *     nothing calls into it again.
 *
 * Subscribe-mode commands are refused by kv.c before they get here. */
#include "gp/kv.h"

#include <ev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/adapters/libev.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp/backoff.h"
#include "gp/clock.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "kv_int.h"

typedef struct kvn kvn;

/* KV_AUTHING: connected, AUTH sent, its reply awaited (nothing else is
 * sent meanwhile). */
enum kv_state { KV_CLOSED, KV_CONNECTING, KV_AUTHING, KV_CONNECTED };

typedef struct kv_rec {                    /* one command in flight */
    gp_kv_cb  *cb;
    void      *arg;
    ev_tstamp  deadline;                   /* gp_mono_s() timebase (monotonic) */
} kv_rec;

#define KV_RING_MIN 256u

struct kvn {
    gp_kv              handle;             /* first (kv_int.h); .cluster false */
    struct ev_loop    *loop;
    char              *host;
    int                port;
    double             connect_timeout;    /* seconds */
    double             command_timeout;
    char              *user;               /* NULL: the default user */
    char              *password;           /* NULL: no AUTH */
    bool               auth_failed;        /* keep the backoff growing */
    gp_kv_conn_cb     *conn_cb;
    void              *conn_arg;

    enum kv_state      state;
    redisAsyncContext *ac;                 /* NULL when none */
    bool               dying;              /* ac is being freed: do not touch */
    bool               in_connect_cb;      /* inside hiredis' onConnect */
    bool               freeing;            /* kvn_free was called */
    bool               down_logged;        /* redis_down said for this outage */
    bool               ever_tried;
    unsigned           depth;              /* our frames on the stack */
    const char        *drop_why;           /* detail for the next redis_down */

    ev_timer           w_conn;             /* connect deadline / backoff / deferred free */
    ev_timer           w_cmd;              /* deadline of the oldest command */
    gp_backoff         backoff;            /* reconnect delays */

    kv_rec            *ring;               /* FIFO of commands in flight */
    uint32_t           ring_cap;           /* power of two */
    uint64_t           head, tail;         /* sequence numbers; ring[seq & (cap-1)] */
    uint64_t           timeout_seq;        /* seqs below this timed out */

    gp_kv_stats        st;
};

/* ---- helpers ----------------------------------------------------------- */

static uint32_t
ring_max_cap(void)
{
    uint32_t c = KV_RING_MIN;

    while (c < (uint32_t)GP_KV_MAX_INFLIGHT)
        c <<= 1;
    return c;
}

static gp_err
ring_grow(kvn *kv)
{
    uint32_t ncap = kv->ring_cap ? kv->ring_cap * 2 : KV_RING_MIN;
    kv_rec  *n;

    if (ncap > ring_max_cap())
        return GP_ETOOBIG;
    n = malloc((size_t)ncap * sizeof(*n));
    if (n == NULL)
        return GP_ENOMEM;
    for (uint64_t s = kv->head; s != kv->tail; s++)
        n[s & (ncap - 1)] = kv->ring[s & (kv->ring_cap - 1)];
    free(kv->ring);
    kv->ring = n;
    kv->ring_cap = ncap;
    return GP_EOK;
}

/* The password is wiped before its memory goes back. */
static void
kvn_secrets_free(kvn *kv)
{
    if (kv->password != NULL)
        explicit_bzero(kv->password, strlen(kv->password));
    free(kv->password);
    free(kv->user);
    kv->password = kv->user = NULL;
}

static void
kv_release(kvn *kv)
{
    ev_timer_stop(kv->loop, &kv->w_conn);
    ev_timer_stop(kv->loop, &kv->w_cmd);
    free(kv->ring);
    free(kv->host);
    kvn_secrets_free(kv);
    free(kv);
}

static void
kv_enter(kvn *kv)
{
    kv->depth++;
}

/* Last statement of every entry point: kv may be gone afterwards. */
static void
kv_leave(kvn *kv)
{
    if (--kv->depth == 0 && kv->freeing && kv->ac == NULL)
        kv_release(kv);
}

static void
kv_log_down(kvn *kv, const char *detail)
{
    if (!kv->down_logged) {
        kv->down_logged = true;
        GP_WARN("redis_down", "host=%s port=%d detail=\"%s\"", kv->host, kv->port, detail);
    } else {
        GP_DEBUG("redis_retry_failed", "host=%s port=%d detail=\"%s\" next_ms=%u", kv->host,
                 kv->port, detail, kv->backoff.next_ms);
    }
}

/* Arms w_conn for the next attempt, with jitter; doubles the backoff. */
static void
kv_schedule_retry(kvn *kv)
{
    kv->state = KV_CLOSED;
    ev_timer_stop(kv->loop, &kv->w_conn);
    ev_timer_set(&kv->w_conn, gp_backoff_next_ms(&kv->backoff) / 1000.0, 0.);
    ev_timer_start(kv->loop, &kv->w_conn);
}

/* ---- hiredis callbacks ------------------------------------------------- */

static void
kv_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
    kvn        *kv = ac->data;
    redisReply *reply = r;
    kv_rec      rec;
    uint64_t    seq = kv->head;
    gp_err      err = GP_EOK;

    (void)privdata;                        /* == (void *)(uintptr_t)seq: FIFO */
    if (kv->head == kv->tail)
        return;                            /* cannot happen: not ours */
    rec = kv->ring[seq & (kv->ring_cap - 1)];
    kv->head++;
    kv_enter(kv);
    if (reply == NULL) {
        kv->dying = true;                  /* hiredis is freeing ac */
        if (!kv->freeing &&
            (seq < kv->timeout_seq || rec.deadline <= gp_mono_s())) {
            err = GP_ETIMEOUT;
            kv->st.timeouts++;
        } else {
            err = GP_EUNAVAIL;
            kv->st.errors++;
        }
    } else if (reply->type == REDIS_REPLY_ERROR) {
        kv->st.errors++;
    }
    if (rec.cb != NULL)
        rec.cb(rec.arg, reply, err);
    kv_leave(kv);
}

static void
kv_up(kvn *kv)
{
    kv->state = KV_CONNECTED;
    gp_backoff_reset(&kv->backoff);
    kv->down_logged = false;
    GP_INFO("redis_up", "host=%s port=%d reconnects=%llu", kv->host, kv->port,
            (unsigned long long)kv->st.reconnects);
    if (kv->conn_cb != NULL && !kv->freeing) {
        kv->in_connect_cb = true;
        kv->conn_cb(kv->conn_arg, true);
        kv->in_connect_cb = false;
    }
}

/* The AUTH reply.  NULL: the connection went meanwhile (the disconnect
 * callback retries).  A refusal closes the connection; the retry keeps
 * the backoff growing, since a wrong password stays wrong. */
static void
kv_auth_cb(redisAsyncContext *ac, void *r, void *privdata)
{
    kvn        *kv = ac->data;
    redisReply *reply = r;

    (void)privdata;
    if (reply == NULL || kv->state != KV_AUTHING)
        return;
    kv_enter(kv);
    ev_timer_stop(kv->loop, &kv->w_conn);
    if (reply->type == REDIS_REPLY_ERROR) {
        GP_ERROR("redis_auth_refused", "host=%s port=%d user=%s detail=\"%s\"", kv->host,
                 kv->port, kv->user != NULL ? kv->user : "default", reply->str);
        kv->st.errors++;
        kv->auth_failed = true;
        kv->drop_why = "AUTH refused";
        redisAsyncDisconnect(ac);          /* deferred: we are in a reply callback */
    } else {
        kv_up(kv);
    }
    kv_leave(kv);
}

/* Sends AUTH [user] password ahead of everything; false if it could not
 * be queued (then the connection is used without it and fails loudly). */
static bool
send_auth(kvn *kv, const redisAsyncContext *cac)
{
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    const char        *argv[3] = {"AUTH", kv->user, kv->password};
    int                argc = 3;

    if (kv->user == NULL) {
        argv[1] = kv->password;
        argc = 2;
    }
    if (redisAsyncCommandArgv(ac, kv_auth_cb, NULL, argc, argv, NULL) != REDIS_OK)
        return false;
    kv->state = KV_AUTHING;
    ev_timer_set(&kv->w_conn, kv->connect_timeout, 0.);
    ev_timer_start(kv->loop, &kv->w_conn);
    return true;
}

static void
kv_connect_cb(const redisAsyncContext *ac, int status)
{
    kvn *kv = ac->data;

    kv_enter(kv);
    ev_timer_stop(kv->loop, &kv->w_conn);
    if (status != REDIS_OK) {
        /* hiredis frees ac right after we return. */
        kv->ac = NULL;
        kv->dying = false;
        kv_log_down(kv, ac->c.errstr[0] ? ac->c.errstr : "connect failed");
        if (!kv->freeing)
            kv_schedule_retry(kv);
        else
            kv->state = KV_CLOSED;
        kv_leave(kv);
        return;
    }
    if (kv->password != NULL && !kv->freeing && send_auth(kv, ac)) {
        kv_leave(kv);
        return;
    }
    kv_up(kv);
    kv_leave(kv);
}

static void
kv_disconnect_cb(const redisAsyncContext *ac, int status)
{
    kvn   *kv = ac->data;
    bool   was_up = kv->state == KV_CONNECTED;

    kv_enter(kv);
    /* hiredis frees ac right after we return. */
    kv->ac = NULL;
    kv->dying = false;
    kv->state = KV_CLOSED;
    ev_timer_stop(kv->loop, &kv->w_cmd);
    if (kv->freeing) {
        kv_leave(kv);
        return;
    }
    if (kv->drop_why != NULL)
        kv_log_down(kv, kv->drop_why);
    else
        kv_log_down(kv, status != REDIS_OK && ac->c.errstr[0] ? ac->c.errstr : "connection closed");
    kv->drop_why = NULL;
    if (!kv->auth_failed)
        gp_backoff_reset(&kv->backoff);
    kv->auth_failed = false;
    kv_schedule_retry(kv);
    if (was_up && kv->conn_cb != NULL)
        kv->conn_cb(kv->conn_arg, false);
    kv_leave(kv);
}

/* ---- connection management --------------------------------------------- */

/* Frees ac from outside any hiredis callback (timers, gp_kv_free at top
 * level).  Pending callbacks and, if it was connected, kv_disconnect_cb run
 * synchronously. */
static void
kv_drop(kvn *kv, const char *why)
{
    redisAsyncContext *ac = kv->ac;

    if (ac == NULL || kv->dying)
        return;
    kv->dying = true;
    kv->drop_why = why;
    redisAsyncFree(ac);
    kv->ac = NULL;
    kv->dying = false;
    kv->drop_why = NULL;
}

static void
kv_connect(kvn *kv)
{
    redisAsyncContext *ac;

    if (kv->ever_tried)
        kv->st.reconnects++;
    kv->ever_tried = true;
    ac = redisAsyncConnect(kv->host, kv->port);
    if (ac == NULL || ac->err) {
        kv_log_down(kv, ac != NULL && ac->c.errstr[0] ? ac->c.errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        kv_schedule_retry(kv);
        return;
    }
    ac->data = kv;
    if (redisLibevAttach(kv->loop, ac) != REDIS_OK) {
        redisAsyncFree(ac);
        kv_log_down(kv, "libev attach failed");
        kv_schedule_retry(kv);
        return;
    }
    kv->ac = ac;
    kv->dying = false;
    kv->state = KV_CONNECTING;
    /* After attach: setting the connect callback arms the write watcher. */
    redisAsyncSetConnectCallback(ac, kv_connect_cb);
    redisAsyncSetDisconnectCallback(ac, kv_disconnect_cb);
    ev_timer_stop(kv->loop, &kv->w_conn);
    ev_timer_set(&kv->w_conn, kv->connect_timeout, 0.);
    ev_timer_start(kv->loop, &kv->w_conn);
}

/* w_conn: connect deadline (CONNECTING), backoff (CLOSED), or the deferred
 * teardown of gp_kv_free called from inside the connect callback. */
static void
kv_conn_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    kvn *kv = GP_CONTAINER_OF(w, kvn, w_conn);

    (void)loop;
    (void)revents;
    kv_enter(kv);
    if (kv->freeing) {
        kv_drop(kv, NULL);
    } else if (kv->state == KV_CONNECTING) {
        kv_drop(kv, "connect timeout");    /* not connected: no callbacks run */
        kv_log_down(kv, "connect timeout");
        kv_schedule_retry(kv);
    } else if (kv->state == KV_AUTHING) {
        kv->auth_failed = true;
        kv_drop(kv, "AUTH timeout");       /* connected: kv_disconnect_cb retries */
    } else if (kv->state == KV_CLOSED) {
        kv_connect(kv);
    }
    kv_leave(kv);
}

/* w_cmd: the oldest command's deadline. */
static void
kv_cmd_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    kvn      *kv = GP_CONTAINER_OF(w, kvn, w_cmd);
    ev_tstamp now = gp_mono_s() + 0.0005; /* timer and clock reads differ a hair */
    uint64_t  s;

    (void)revents;
    if (kv->head == kv->tail || kv->ac == NULL || kv->dying)
        return;
    s = kv->head;
    if (kv->ring[s & (kv->ring_cap - 1)].deadline > now) {
        ev_timer_set(w, kv->ring[s & (kv->ring_cap - 1)].deadline - gp_mono_s(), 0.);
        ev_timer_start(loop, w);
        return;
    }
    while (s != kv->tail && kv->ring[s & (kv->ring_cap - 1)].deadline <= now)
        s++;
    kv->timeout_seq = s;
    GP_WARN("redis_timeout", "host=%s port=%d timeout_ms=%u timed_out=%llu inflight=%llu",
            kv->host, kv->port, (unsigned)(kv->command_timeout * 1000),
            (unsigned long long)(s - kv->head), (unsigned long long)(kv->tail - kv->head));
    kv_enter(kv);
    kv_drop(kv, "command timeout");        /* runs every pending callback */
    kv_leave(kv);
}

/* ---- for kv.c and kv_cluster.c (kv_int.h) ------------------------------ */


gp_err
kvn_new(struct ev_loop *loop, const gp_kv_opts *opts, gp_kv_conn_cb *conn_cb, void *conn_arg,
        kvn **out)
{
    kvn *kv;

    *out = NULL;
    if (opts->port <= 0 || opts->port > 65535)
        return GP_EINVAL;
    kv = calloc(1, sizeof(*kv));
    if (kv == NULL)
        return GP_ENOMEM;
    kv->host = strdup(opts->host != NULL && opts->host[0] ? opts->host : "127.0.0.1");
    if (kv->host == NULL) {
        free(kv);
        return GP_ENOMEM;
    }
    kv->handle.cluster = false;
    kv->loop = loop;
    kv->port = opts->port;
    kv->connect_timeout = (opts->connect_timeout_ms ? opts->connect_timeout_ms : 2000) / 1000.0;
    kv->command_timeout = (opts->command_timeout_ms ? opts->command_timeout_ms : 2000) / 1000.0;
    if (opts->password != NULL && opts->password[0] != '\0') {
        kv->password = strdup(opts->password);
        if (opts->user != NULL && opts->user[0] != '\0')
            kv->user = strdup(opts->user);
        if (kv->password == NULL || (opts->user != NULL && opts->user[0] && kv->user == NULL)) {
            kvn_secrets_free(kv);
            free(kv->host);
            free(kv);
            return GP_ENOMEM;
        }
    }
    kv->conn_cb = conn_cb;
    kv->conn_arg = conn_arg;
    kv->state = KV_CLOSED;
    gp_backoff_init(&kv->backoff, kv);
    ev_timer_init(&kv->w_conn, kv_conn_timer_cb, 0., 0.);
    ev_timer_init(&kv->w_cmd, kv_cmd_timer_cb, 0., 0.);
    if (ring_grow(kv) != GP_EOK) {
        kvn_secrets_free(kv);
        free(kv->host);
        free(kv);
        return GP_ENOMEM;
    }
    kv_connect(kv);
    *out = kv;
    return GP_EOK;
}

void
kvn_free(kvn *kv)
{
    if (kv == NULL || kv->freeing)
        return;
    kv_enter(kv);
    kv->freeing = true;
    ev_timer_stop(kv->loop, &kv->w_conn);
    ev_timer_stop(kv->loop, &kv->w_cmd);
    if (kv->ac != NULL && !kv->dying) {
        if (kv->in_connect_cb) {
            /* hiredis goes on using ac after onConnect returns and does not
             * defer redisAsyncFree there: tear down from a fresh frame. */
            ev_timer_set(&kv->w_conn, 0., 0.);
            ev_timer_start(kv->loop, &kv->w_conn);
        } else if (kv->ac->c.flags & REDIS_IN_CALLBACK) {
            /* Inside a reply callback: hiredis frees after it returns,
             * runs the pending callbacks and then kv_disconnect_cb. */
            kv->dying = true;
            redisAsyncFree(kv->ac);
        } else {
            kv_drop(kv, NULL);
        }
    }
    kv_leave(kv);
}

bool
kvn_is_connected(const kvn *kv)
{
    return kv != NULL && kv->state == KV_CONNECTED && !kv->dying && !kv->freeing;
}

void
kvn_stats(const kvn *kv, gp_kv_stats *out)
{
    if (kv == NULL) {
        memset(out, 0, sizeof(*out));
        return;
    }
    *out = kv->st;
    out->inflight = (uint32_t)(kv->tail - kv->head);
    out->oldest_ms = 0;
    if (kv->tail != kv->head) {
        /* Sent at its deadline less the command timeout. */
        double sent = kv->ring[kv->head & (kv->ring_cap - 1)].deadline - kv->command_timeout;
        double age = gp_mono_s() - sent;

        out->oldest_ms = age > 0 ? (uint32_t)(age * 1000) : 0;
    }
}

/* Checks and reserves a ring slot; the caller sends, then kv_commit. */
static gp_err
kv_admit(kvn *kv)
{
    if (kv->state != KV_CONNECTED || kv->ac == NULL || kv->dying || kv->freeing) {
        kv->st.errors++;
        return GP_EUNAVAIL;
    }
    if (kv->tail - kv->head >= (uint64_t)GP_KV_MAX_INFLIGHT)
        return GP_ETOOBIG;
    if (kv->tail - kv->head == kv->ring_cap) {
        gp_err e = ring_grow(kv);
        if (e != GP_EOK)
            return e;
    }
    return GP_EOK;
}

static void
kv_commit(kvn *kv, gp_kv_cb *cb, void *arg, ev_tstamp deadline)
{
    kv_rec *r = &kv->ring[kv->tail & (kv->ring_cap - 1)];
    double  in = deadline - gp_mono_s();

    r->cb = cb;
    r->arg = arg;
    r->deadline = deadline;
    kv->tail++;
    kv->st.commands++;
    if (!ev_is_active(&kv->w_cmd)) {
        ev_timer_set(&kv->w_cmd, in > 0 ? in : 0., 0.);
        ev_timer_start(kv->loop, &kv->w_cmd);
    }
}

static gp_err
kv_send_failed(kvn *kv)
{
    if (kv->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)) {
        kv->st.errors++;
        return GP_EUNAVAIL;
    }
    return GP_EINVAL;                      /* bad format or out of memory */
}

/* The three senders admit first, so that a command to a Redis that is down
 * is UNAVAIL whatever its format, and only then let hiredis format it. */

gp_err
kvn_cmdv(kvn *kv, gp_kv_cb *cb, void *arg, int argc, const char **argv, const size_t *argvlen)
{
    gp_err e;

    if ((e = kv_admit(kv)) != GP_EOK)
        return e;
    if (redisAsyncCommandArgv(kv->ac, kv_reply_cb, (void *)(uintptr_t)kv->tail, argc, argv,
                              argvlen) != REDIS_OK)
        return kv_send_failed(kv);
    kv_commit(kv, cb, arg, gp_mono_s() + kv->command_timeout);
    return GP_EOK;
}

gp_err
kvn_vcmdf(kvn *kv, gp_kv_cb *cb, void *arg, const char *fmt, va_list ap)
{
    gp_err e;

    if ((e = kv_admit(kv)) != GP_EOK)
        return e;
    if (redisvAsyncCommand(kv->ac, kv_reply_cb, (void *)(uintptr_t)kv->tail, fmt, ap) !=
        REDIS_OK)
        return kv_send_failed(kv);
    kv_commit(kv, cb, arg, gp_mono_s() + kv->command_timeout);
    return GP_EOK;
}

gp_err
kvn_send(kvn *kv, gp_kv_cb *cb, void *arg, const char *cmd, size_t len, double deadline)
{
    gp_err e;

    if (kv == NULL || cmd == NULL)
        return GP_EINVAL;
    if ((e = kv_admit(kv)) != GP_EOK)
        return e;
    if (redisAsyncFormattedCommand(kv->ac, kv_reply_cb, (void *)(uintptr_t)kv->tail, cmd,
                                   len) != REDIS_OK)
        return kv_send_failed(kv);
    kv_commit(kv, cb, arg, deadline);
    return GP_EOK;
}
