/* bus.c -- NATS for one libev loop (see gp/bus.h).
 *
 * Threads.  cnats keeps its own threads: the read loop and flusher per
 * connection, the library's message delivery pool (we use the global pool
 * so that many subscriptions do not mean many threads), and the library's
 * async-callback thread (connection events).  We add one JetStream worker
 * per bus (stream management and publishes, which block in cnats) and one
 * fetch worker per pull consumer.  None of these threads touches the loop
 * or user state: each builds a record, pushes it on its lane's queue
 * bus->q[lane] under bus->mu and calls ev_async_send (in the lock, so that
 * gp_bus_free, which waits on the same lock for the last cnats callback,
 * cannot free the watcher under it).  The loop's wake_cb takes records in
 * batches, control lane first, runs user callbacks, and gives the records
 * back as spares in the same lock (no malloc per message).
 *
 * Lifetimes.  A cnats subscription may still run our handler after
 * natsSubscription_Unsubscribe returns, so a gp_bus_sub is freed only after
 * its on-complete callback (REC_SUBDONE, queued after its last message).
 * gp_bus_free waits for every subscription's on-complete and the closed
 * callback (the last connection event) before freeing bus->mu.  A pull
 * consumer outlives gp_bus_js_pull_free while messages it fetched are still
 * un-ended, since acking needs its subscription. */
#include "gp/bus.h"

#include <errno.h>
#include <ev.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp/backoff.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "gp/streamcfg.h"

/* Records handled per wake_cb call: a burst of 65536 messages must not keep
 * timers and sockets waiting for the whole burst. */
#define BUS_BATCH 512
/* Bulk records handled per wake_cb call even while control records wait:
 * control goes first, but a control flood must not starve bulk entirely. */
#define BULK_MIN 64
/* Spare records kept for reuse (allocation-free hand-off per message). */
#define REC_SPARE_MAX 4096
/* Request buckets: tokens are sequential, so token % N spreads evenly. */
#define REQ_BUCKETS 1024
/* How long gp_bus_free waits for cnats to finish its last callbacks. */
#define FREE_WAIT_MS 5000
/* cnats' buffer for publishes made while reconnecting (its default too):
 * enough for a few seconds of traffic, small enough to bound memory. */
#define RECONNECT_BUF (8 * 1024 * 1024)

typedef enum rec_kind {
    REC_MSG,       /* a message for a subscription (bounded per lane) */
    REC_SUBDONE,   /* a subscription's last callback has returned */
    REC_CONN,      /* connection event */
    REC_DONE,      /* a JetStream job finished */
    REC_LIST,      /* a stream listing finished */
    REC_JSMSG,     /* a message fetched by a pull consumer */
    REC_PULLDONE   /* a pull worker thread is exiting */
} rec_kind;

typedef enum conn_ev { CONN_UP, CONN_DOWN, CONN_RECONNECTED, CONN_CLOSED } conn_ev;

typedef struct rec {
    struct rec *next;
    rec_kind    kind;
    union {
        struct { gp_bus_sub *sub; natsMsg *msg; size_t len; } m;
        conn_ev conn;
        struct { gp_bus_done_cb *cb; void *arg; gp_err err; bool pub, full; } d;
        struct {
            gp_bus_streams_cb *cb;
            void              *arg;
            gp_err             err;
            gp_stream_state   *s;
            size_t             n;
        } l;
        gp_jsmsg *jm;
        gp_bus_pull *pull;
    } u;
} rec;

typedef struct recq { rec *head, *tail; } recq;

struct gp_bus_sub {
    gp_bus           *bus;
    natsSubscription *ns;
    gp_bus_msg_cb    *cb;
    void             *arg;
    bool              inbox;     /* the request inbox: replies, not user messages */
    gp_bus_lane       lane;
    bool              dead;      /* gp_bus_sub_free called: discard its messages */
    gp_bus_sub       *next;      /* bus->subs */
};

typedef struct req {
    struct req      *next;       /* bucket chain */
    gp_bus          *bus;
    uint64_t         token;
    gp_bus_reply_cb *cb;
    void            *arg;
    ev_timer         timer;
} req;

typedef enum job_kind { JOB_STREAM, JOB_PUB, JOB_LIST, JOB_CONSUMER } job_kind;

typedef struct job {
    struct job     *next;
    job_kind        kind;
    gp_bus_done_cb *cb;
    void           *arg;
    /* JOB_LIST */
    gp_bus_streams_cb *list_cb;
    /* JOB_STREAM */
    jsStreamConfig  sc;
    char          **subjects;
    /* JOB_PUB */
    char           *subject;
    char           *msg_id;
    void           *data;
    size_t          len;
    /* JOB_CONSUMER: made by gp_bus_js_consumer (with pull_alloc's defaults) */
    gp_bus_pull    *cons;
} job;

struct gp_bus_pull {
    gp_bus           *bus;       /* NULL once the bus is gone */
    jsCtx            *js;
    natsSubscription *ns;        /* created and fetched by the worker */
    char             *stream, *durable, *filter;
    int               batch, max_inflight;
    int64_t           ack_wait_ms;
    bool              bind_only; /* someone else made the durable: bind only */
    gp_bus_js_cb     *cb;
    void             *arg;
    pthread_t         thread;
    pthread_mutex_t   mu;        /* inflight, stop */
    pthread_cond_t    cond;
    int               inflight;  /* fetched and not yet ended */
    bool              stop;
    bool              joined;    /* loop: worker joined */
    bool              dead;      /* loop: gp_bus_js_pull_free called */
    gp_bus_pull      *next;      /* bus->pulls, until joined */
};

struct gp_jsmsg {
    gp_bus_pull *pull;
    natsMsg     *msg;
};

struct gp_bus {
    struct ev_loop   *loop;
    ev_async          wake;
    natsOptions      *opts;
    natsConnection   *nc;
    jsCtx            *js;
    gp_bus_conn_cb   *conn_cb;
    void             *conn_arg;
    char             *name;

    /* Shared with cnats threads and workers. */
    pthread_mutex_t   mu;
    pthread_cond_t    cond;      /* subs_live / closed_seen changes */
    recq              q[GP_BUS_LANES];
    size_t            q_msgs[GP_BUS_LANES]; /* REC_MSG records not yet delivered */
    size_t            q_bytes[GP_BUS_LANES]; /* and their bodies' bytes */
    rec              *spare;     /* free records, for reuse */
    size_t            nspare;
    bool              closing;   /* gp_bus_free started: refuse messages */
    bool              closed_seen;
    int               subs_live; /* subscriptions whose on-complete is due */
    atomic_uint_fast64_t dropped[GP_BUS_LANES];
    atomic_uint_fast64_t dropped_bytes;   /* of dropped: at the byte bound */
    atomic_uint_fast64_t js_refused;

    /* Loop thread only. */
    recq              batch[GP_BUS_LANES]; /* taken from q, being delivered */
    bool              refuse_requests; /* gp_bus_fail_requests was called */
    int               dispatching;
    bool              free_requested;
    bool              freeing;
    gp_bus_stats      st;
    gp_bus_sub       *subs;
    gp_bus_sub       *inbox_sub;
    char             *inbox;     /* "<prefix>.<nuid>", prefix "_INBOX" by default */
    char             *inbox_prefix;
    uint64_t          next_token;
    uint64_t          nats_dropped_gone; /* cnats' drops of freed subscriptions */
    size_t            npending;
    size_t            max_pending;    /* opts.max_pending or GP_MAX_PENDING_REQ */
    req              *pending[REQ_BUCKETS];
    gp_bus_pull      *pulls;

    /* JetStream worker. */
    pthread_t         jw_thread;
    bool              jw_started;
    pthread_mutex_t   jw_mu;
    pthread_cond_t    jw_cond;
    job              *jw_head, *jw_tail;
    size_t            jw_len;
    size_t            jw_bytes;  /* JOB_PUB data queued */
    bool              jw_stop;
};

static void bus_free_now(gp_bus *bus);
static void pull_maybe_free(gp_bus_pull *p);

/* ---- the queue between threads and the loop ------------------------------ */

static void
recq_append(recq *q, rec *r)
{
    r->next = NULL;
    if (q->tail != NULL)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

static size_t
lane_budget(gp_bus_lane lane)
{
    return lane == GP_LANE_BULK ? GP_MAX_INBOX_BULK : GP_MAX_INBOX;
}

static size_t
lane_bytes(gp_bus_lane lane)
{
    return lane == GP_LANE_BULK ? GP_MAX_INBOX_BULK_BYTES : GP_MAX_INBOX_BYTES;
}

/* Under bus->mu: a spare record or a new one (NULL without memory). */
static rec *
rec_take_locked(gp_bus *bus)
{
    rec *r = bus->spare;

    if (r != NULL) {
        bus->spare = r->next;
        bus->nspare--;
        return r;
    }
    return malloc(sizeof(*r));
}

/* Any thread.  Unbounded records (connection events, job results) go to
 * the control lane and are never refused. */
static void
bus_push(gp_bus *bus, rec *r)
{
    pthread_mutex_lock(&bus->mu);
    recq_append(&bus->q[GP_LANE_CONTROL], r);
    ev_async_send(bus->loop, &bus->wake);
    pthread_mutex_unlock(&bus->mu);
}

/* cnats delivery thread: queues a message in its subscription's lane, or
 * refuses it (false: the caller drops it) when the lane is full (in
 * messages or bytes) or the bus is closing.  One lock, no allocation in
 * the steady state. */
static bool
bus_push_msg(gp_bus *bus, gp_bus_sub *sub, natsMsg *msg)
{
    gp_bus_lane lane = sub->lane;
    size_t      len = (size_t)natsMsg_GetDataLength(msg);
    bool        over_bytes;
    rec        *r;

    pthread_mutex_lock(&bus->mu);
    over_bytes = bus->q_bytes[lane] + len > lane_bytes(lane);
    if (bus->closing || bus->q_msgs[lane] >= lane_budget(lane) || over_bytes ||
        (r = rec_take_locked(bus)) == NULL) {
        if (!bus->closing)
            atomic_fetch_add(&bus->dropped[lane], 1);
        if (!bus->closing && over_bytes)
            atomic_fetch_add(&bus->dropped_bytes, 1);
        pthread_mutex_unlock(&bus->mu);
        return false;
    }
    r->kind = REC_MSG;
    r->u.m.sub = sub;
    r->u.m.msg = msg;
    r->u.m.len = len;
    bus->q_msgs[lane]++;
    bus->q_bytes[lane] += len;
    recq_append(&bus->q[lane], r);
    /* Cheap when a wake-up is already pending (libev checks a flag). */
    ev_async_send(bus->loop, &bus->wake);
    pthread_mutex_unlock(&bus->mu);
    return true;
}

static rec *
rec_new(rec_kind kind)
{
    rec *r = calloc(1, sizeof(*r));

    if (r != NULL)
        r->kind = kind;
    return r;
}

/* ---- cnats callbacks (cnats threads: touch nothing but the queue) --------- */

static void
on_msg(natsConnection *nc, natsSubscription *ns, natsMsg *msg, void *closure)
{
    gp_bus_sub *sub = closure;

    (void)nc;
    (void)ns;
    if (!bus_push_msg(sub->bus, sub, msg))
        natsMsg_Destroy(msg);
}

/* After the subscription's last on_msg has returned. */
static void
on_sub_complete(void *closure)
{
    gp_bus_sub *sub = closure;
    gp_bus     *bus = sub->bus;
    rec        *r = rec_new(REC_SUBDONE);

    pthread_mutex_lock(&bus->mu);
    bus->subs_live--;
    if (r != NULL) {               /* in the sub's lane: after its last message */
        r->u.m.sub = sub;
        recq_append(&bus->q[sub->lane], r);
    }
    /* Without a record the sub is freed by gp_bus_free instead. */
    ev_async_send(bus->loop, &bus->wake);
    pthread_cond_broadcast(&bus->cond);
    pthread_mutex_unlock(&bus->mu);
}

static void
push_conn(gp_bus *bus, conn_ev ev)
{
    rec *r = rec_new(REC_CONN);

    pthread_mutex_lock(&bus->mu);
    if (ev == CONN_CLOSED) {
        bus->closed_seen = true;
        pthread_cond_broadcast(&bus->cond);
    }
    if (r != NULL) {
        r->u.conn = ev;
        recq_append(&bus->q[GP_LANE_CONTROL], r);
        ev_async_send(bus->loop, &bus->wake);
    }
    pthread_mutex_unlock(&bus->mu);
}

static void on_connected(natsConnection *nc, void *c)    { (void)nc; push_conn(c, CONN_UP); }
static void on_disconnected(natsConnection *nc, void *c) { (void)nc; push_conn(c, CONN_DOWN); }
static void on_reconnected(natsConnection *nc, void *c)  { (void)nc; push_conn(c, CONN_RECONNECTED); }
static void on_closed(natsConnection *nc, void *c)       { (void)nc; push_conn(c, CONN_CLOSED); }

/* Async errors (slow consumer, permissions).  closure is NULL: logging only,
 * so it is safe whenever cnats calls it. */
static void
on_async_error(natsConnection *nc, natsSubscription *ns, natsStatus s, void *closure)
{
    (void)nc;
    (void)ns;
    (void)closure;
    GP_WARN("nats_async_error", "detail=\"%s\"", natsStatus_GetText(s));
}

/* The shared backoff schedule (gp/backoff.h).  Runs on cnats' reconnect
 * thread, so it keeps no state: the jitter seed is the clock and pid. */
static int64_t
reconnect_delay(natsConnection *nc, int attempts, void *closure)
{
    struct timespec ts;

    (void)nc;
    (void)closure;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return gp_backoff_for_attempt(attempts, (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32));
}

/* ---- loop side: delivering records --------------------------------------- */

static gp_err
map_status(natsStatus s)
{
    switch (s) {
    case NATS_OK:                       return GP_EOK;
    case NATS_TIMEOUT:                  return GP_ETIMEOUT;
    case NATS_NO_RESPONDERS:            return GP_ENOROUTE;
    case NATS_NO_MEMORY:                return GP_ENOMEM;
    case NATS_INVALID_ARG:              return GP_EINVAL;
    case NATS_MAX_PAYLOAD:              return GP_ETOOBIG;
    case NATS_NOT_FOUND:                return GP_ENOTFOUND;
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NOT_YET_CONNECTED:
    case NATS_INSUFFICIENT_BUFFER:      return GP_EUNAVAIL;
    default:                            return GP_EINTERNAL;
    }
}

static req **
req_slot(gp_bus *bus, uint64_t token)
{
    req **pp = &bus->pending[token % REQ_BUCKETS];

    while (*pp != NULL && (*pp)->token != token)
        pp = &(*pp)->next;
    return pp;
}

/* Unlinks r; after this its callback can be called without touching bus. */
static void
req_unlink(gp_bus *bus, req *r)
{
    req **pp = req_slot(bus, r->token);

    if (*pp == r)
        *pp = r->next;
    bus->npending--;
    ev_timer_stop(bus->loop, &r->timer);
}

static void
req_finish(req *r, gp_err err, const char *data, size_t len)
{
    gp_bus_reply_cb *cb = r->cb;
    void            *arg = r->arg;

    free(r);
    cb(arg, err, data, len);
}

static void
req_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    req    *r = GP_CONTAINER_OF(w, req, timer);
    gp_bus *bus = r->bus;

    (void)loop;
    (void)revents;
    req_unlink(bus, r);
    bus->st.request_timeouts++;
    req_finish(r, GP_ETIMEOUT, NULL, 0);
}

static void
req_on_reply(gp_bus *bus, natsMsg *msg)
{
    const char *subj = natsMsg_GetSubject(msg);
    const char *dot = strrchr(subj, '.');
    req        *r;
    uint64_t    token;

    if (dot == NULL)
        return;
    token = strtoull(dot + 1, NULL, 10);
    r = *req_slot(bus, token);
    if (r == NULL)
        return;                     /* late reply after the deadline */
    req_unlink(bus, r);
    if (natsMsg_IsNoResponders(msg))
        req_finish(r, GP_ENOROUTE, NULL, 0);
    else
        req_finish(r, GP_EOK, natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg));
}

static void
deliver_msg(gp_bus *bus, gp_bus_sub *sub, natsMsg *msg)
{
    gp_bus_msg m;

    if (sub->dead)
        return;
    if (sub->inbox) {
        req_on_reply(bus, msg);
        return;
    }
    m.subject = natsMsg_GetSubject(msg);
    m.reply = natsMsg_GetReply(msg);
    if (m.reply != NULL && m.reply[0] == '\0')
        m.reply = NULL;
    m.data = natsMsg_GetData(msg);
    m.len = (size_t)natsMsg_GetDataLength(msg);
    bus->st.received++;
    sub->cb(sub->arg, &m);
}

static void
sub_unlink(gp_bus *bus, gp_bus_sub *sub)
{
    for (gp_bus_sub **pp = &bus->subs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == sub) {
            *pp = sub->next;
            return;
        }
    }
}

/* Messages cnats dropped at the subscription's pending limits. */
static uint64_t
sub_nats_dropped(gp_bus_sub *sub)
{
    int64_t n = 0;

    if (natsSubscription_GetDropped(sub->ns, &n) != NATS_OK || n < 0)
        return 0;
    return (uint64_t)n;
}

static void
sub_destroy(gp_bus_sub *sub)
{
    natsSubscription_Destroy(sub->ns);
    free(sub);
}

static void
deliver_conn(gp_bus *bus, conn_ev ev)
{
    switch (ev) {
    case CONN_UP:
        GP_INFO("nats_connected", "name=%s", bus->name);
        break;
    case CONN_RECONNECTED:
        bus->st.reconnects++;
        GP_INFO("nats_reconnected", "name=%s reconnects=%llu", bus->name,
                (unsigned long long)bus->st.reconnects);
        break;
    case CONN_DOWN:
        GP_WARN("nats_disconnected", "name=%s", bus->name);
        break;
    case CONN_CLOSED:
        return;                     /* only from gp_bus_free */
    }
    if (bus->conn_cb != NULL)
        bus->conn_cb(bus->conn_arg, ev != CONN_DOWN);
}

static void
deliver_done(gp_bus *bus, rec *r)
{
    if (r->u.d.pub) {
        if (r->u.d.err == GP_EOK)
            bus->st.js_published++;
        else
            bus->st.js_publish_errors++;
        if (r->u.d.full)
            bus->st.js_full++;
    }
    if (r->u.d.cb != NULL)
        r->u.d.cb(r->u.d.arg, r->u.d.err);
}

static void
deliver_list(rec *r)
{
    r->u.l.cb(r->u.l.arg, r->u.l.err, r->u.l.s, r->u.l.err == GP_EOK ? r->u.l.n : 0);
    free(r->u.l.s);
}

/* Ends a fetched message's accounting; p may be freed. */
static void
pull_end(gp_bus_pull *p)
{
    pthread_mutex_lock(&p->mu);
    p->inflight--;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->mu);
    if (p->dead)
        pull_maybe_free(p);
}

static void
jsmsg_drop(gp_jsmsg *jm)
{
    gp_bus_pull *p = jm->pull;

    natsMsg_Destroy(jm->msg);       /* un-acked: the server redelivers it */
    free(jm);
    pull_end(p);
}

static void
pull_unlink(gp_bus *bus, gp_bus_pull *p)
{
    for (gp_bus_pull **pp = &bus->pulls; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            return;
        }
    }
}

static void
deliver_pulldone(gp_bus *bus, gp_bus_pull *p)
{
    pthread_join(p->thread, NULL);
    p->joined = true;
    pull_unlink(bus, p);
    p->bus = NULL;
    if (p->dead)
        pull_maybe_free(p);
}

/* Runs user code; the caller must not touch bus after bus->free_requested. */
static void
deliver(gp_bus *bus, rec *r)
{
    switch (r->kind) {
    case REC_MSG:
        deliver_msg(bus, r->u.m.sub, r->u.m.msg);
        natsMsg_Destroy(r->u.m.msg);
        break;
    case REC_SUBDONE:
        sub_unlink(bus, r->u.m.sub);
        sub_destroy(r->u.m.sub);
        break;
    case REC_CONN:
        deliver_conn(bus, r->u.conn);
        break;
    case REC_DONE:
        deliver_done(bus, r);
        break;
    case REC_LIST:
        deliver_list(r);
        break;
    case REC_JSMSG:
        if (r->u.jm->pull->dead) {
            jsmsg_drop(r->u.jm);
        } else {
            bus->st.js_delivered++;
            r->u.jm->pull->cb(r->u.jm->pull->arg, r->u.jm);
        }
        break;
    case REC_PULLDONE:
        deliver_pulldone(bus, r->u.pull);
        break;
    }
}

/* Moves the shared queues onto the ends of the loop-side batches; under
 * the same lock, gives back the records of the last batch (spares) and
 * the count of messages (and their bytes) it delivered per lane. */
static void
take_queue(gp_bus *bus, rec *used, rec *used_tail, size_t nused, const size_t *msgs,
           const size_t *bytes)
{
    pthread_mutex_lock(&bus->mu);
    for (int l = 0; l < GP_BUS_LANES; l++) {
        recq *q = &bus->q[l], *b = &bus->batch[l];

        if (msgs != NULL) {
            bus->q_msgs[l] -= msgs[l];
            bus->q_bytes[l] -= bytes[l];
        }
        if (q->head == NULL)
            continue;
        if (b->tail != NULL)
            b->tail->next = q->head;
        else
            b->head = q->head;
        b->tail = q->tail;
        q->head = q->tail = NULL;
    }
    if (used != NULL && bus->nspare < REC_SPARE_MAX) {
        used_tail->next = bus->spare;
        bus->spare = used;
        bus->nspare += nused;
        used = NULL;
    }
    pthread_mutex_unlock(&bus->mu);
    while (used != NULL) {             /* more spares than we keep */
        rec *next = used->next;

        free(used);
        used = next;
    }
}

static bool
batches_empty(const gp_bus *bus)
{
    for (int l = 0; l < GP_BUS_LANES; l++)
        if (bus->batch[l].head != NULL)
            return false;
    return true;
}

/* Delivers up to max records of one lane; the records go on *used. */
static int
deliver_lane(gp_bus *bus, gp_bus_lane lane, int max, rec **used, rec **used_tail,
             size_t *msgs, size_t *bytes)
{
    recq *b = &bus->batch[lane];
    int   n;

    for (n = 0; n < max && b->head != NULL && !bus->free_requested; n++) {
        rec *r = b->head;

        b->head = r->next;
        if (b->head == NULL)
            b->tail = NULL;
        if (r->kind == REC_MSG) {
            msgs[lane]++;
            bytes[lane] += r->u.m.len;
        }
        deliver(bus, r);
        r->next = *used;
        if (*used == NULL)
            *used_tail = r;
        *used = r;
    }
    return n;
}

static void
wake_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    gp_bus *bus = GP_CONTAINER_OF(w, gp_bus, wake);
    size_t  msgs[GP_BUS_LANES] = {0}, bytes[GP_BUS_LANES] = {0}, nused;
    rec    *used = NULL, *used_tail = NULL;
    int     n, bulk;

    (void)revents;
    if (batches_empty(bus))
        take_queue(bus, NULL, NULL, 0, NULL, NULL);
    bus->dispatching++;
    /* Control first; bulk gets the rest of the batch, and at least BULK_MIN. */
    n = deliver_lane(bus, GP_LANE_CONTROL, BUS_BATCH, &used, &used_tail, msgs, bytes);
    bulk = BUS_BATCH - n < BULK_MIN ? BULK_MIN : BUS_BATCH - n;
    n += deliver_lane(bus, GP_LANE_BULK, bulk, &used, &used_tail, msgs, bytes);
    nused = (size_t)n;
    bus->dispatching--;
    if (bus->free_requested) {
        take_queue(bus, used, used_tail, nused, msgs, bytes);
        bus_free_now(bus);
        return;
    }
    /* Records pushed while this batch ran were covered by the wake-up being
     * handled now, so nobody else will come for them: take them too. */
    take_queue(bus, used, used_tail, nused, msgs, bytes);
    if (!batches_empty(bus))
        ev_async_send(loop, &bus->wake);    /* the rest after other watchers */
}

/* ---- connection ----------------------------------------------------------- */

/* "nats://a:4222,nats://b:4222" -> natsOptions_SetServers. */
static natsStatus
set_servers(natsOptions *o, const char *url)
{
    char       *copy = strdup(url), *save = NULL, *tok;
    const char *list[16];
    int         n = 0;
    natsStatus  s;

    if (copy == NULL)
        return NATS_NO_MEMORY;
    for (tok = strtok_r(copy, ",", &save); tok != NULL && n < 16; tok = strtok_r(NULL, ",", &save))
        if (*tok != '\0')
            list[n++] = tok;
    s = n > 0 ? natsOptions_SetServers(o, list, n) : NATS_INVALID_ARG;
    free(copy);
    return s;
}

static natsStatus
make_options(gp_bus *bus, const gp_bus_opts *opts)
{
    natsOptions *o;
    natsStatus   s = natsOptions_Create(&o);

    if (s != NATS_OK)
        return s;
    bus->opts = o;
    s = set_servers(o, opts->url);
    if (s == NATS_OK)
        s = natsOptions_SetName(o, bus->name);
    if (s == NATS_OK && opts->user != NULL)
        s = natsOptions_SetUserInfo(o, opts->user, opts->password);
    if (s == NATS_OK && opts->token != NULL)
        s = natsOptions_SetToken(o, opts->token);
    /* cnats' own requests too (the JetStream API, a pull consumer's
     * fetches): an identity that may only read its own inboxes (a tenant) */
    if (s == NATS_OK && opts->inbox_prefix != NULL)
        s = natsOptions_SetCustomInboxPrefix(o, opts->inbox_prefix);
    if (s == NATS_OK)
        s = natsOptions_SetRetryOnFailedConnect(o, true, on_connected, bus);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(o, -1);
    if (s == NATS_OK)
        s = natsOptions_SetCustomReconnectDelay(o, reconnect_delay, NULL);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectBufSize(o, RECONNECT_BUF);
    if (s == NATS_OK)   /* a dead peer is noticed within ~15 s, not 4 min */
        s = natsOptions_SetPingInterval(o, 5000);
    if (s == NATS_OK)
        s = natsOptions_SetMaxPingsOut(o, 3);
    if (s == NATS_OK)
        s = natsOptions_UseGlobalMessageDelivery(o, true);
    /* Write each publish at once instead of waiting for cnats' flusher
     * thread (about 1 ms): halves a request/reply round trip.  Our
     * publish rates are per-node heartbeats and replies, not bulk. */
    if (s == NATS_OK)
        s = natsOptions_SetSendAsap(o, true);
    /* ... which writes on the loop thread: bound how long a full socket
     * (server stopped, too slow) can hold it (see gp/bus.h). */
    if (s == NATS_OK)
        s = natsOptions_SetWriteDeadline(o, GP_BUS_WRITE_DEADLINE_MS);
    /* A reconnect attempt holds cnats' connection lock for up to this long
     * (a hung server accepts TCP but never sends INFO), and a publish on the
     * loop waits for that lock: keep it short (default 2 s). */
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(o, GP_BUS_CONNECT_TIMEOUT_MS);
    if (s == NATS_OK)
        s = natsOptions_SetDisconnectedCB(o, on_disconnected, bus);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(o, on_reconnected, bus);
    if (s == NATS_OK)
        s = natsOptions_SetClosedCB(o, on_closed, bus);
    if (s == NATS_OK)
        s = natsOptions_SetErrorHandler(o, on_async_error, NULL);
    return s;
}

static void *jw_main(void *arg);

/* An inbox prefix: a plain subject, short enough for ".<nuid>.<token>". */
static bool
prefix_ok(const char *p)
{
    size_t n;

    if (p == NULL)
        return true;
    n = strlen(p);
    return n > 0 && n <= GP_MAX_SUBJECT - 64 && strpbrk(p, "*> \t\r\n") == NULL &&
           p[0] != '.' && p[n - 1] != '.' && strstr(p, "..") == NULL;
}

static gp_err
open_js(gp_bus *bus)
{
    jsOptions jo;

    jsOptions_Init(&jo);
    jo.Wait = 5000;                 /* per JetStream API call, on the worker */
    if (natsConnection_JetStream(&bus->js, bus->nc, &jo) != NATS_OK)
        return GP_EINTERNAL;
    if (pthread_create(&bus->jw_thread, NULL, jw_main, bus) != 0)
        return GP_ENOMEM;
    bus->jw_started = true;
    return GP_EOK;
}

static gp_bus *
bus_alloc(struct ev_loop *loop, const gp_bus_opts *opts)
{
    gp_bus *bus = calloc(1, sizeof(*bus));

    if (bus == NULL)
        return NULL;
    bus->name = strdup(opts->name != NULL ? opts->name : "gridpool");
    bus->inbox_prefix = strdup(opts->inbox_prefix != NULL ? opts->inbox_prefix : "_INBOX");
    if (bus->name == NULL || bus->inbox_prefix == NULL) {
        free(bus->name);
        free(bus->inbox_prefix);
        free(bus);
        return NULL;
    }
    bus->loop = loop;
    pthread_mutex_init(&bus->mu, NULL);
    pthread_cond_init(&bus->cond, NULL);
    pthread_mutex_init(&bus->jw_mu, NULL);
    pthread_cond_init(&bus->jw_cond, NULL);
    for (int l = 0; l < GP_BUS_LANES; l++)
        atomic_init(&bus->dropped[l], 0);
    atomic_init(&bus->dropped_bytes, 0);
    atomic_init(&bus->js_refused, 0);
    ev_async_init(&bus->wake, wake_cb);
    ev_async_start(loop, &bus->wake);
    return bus;
}

gp_err
gp_bus_new(struct ev_loop *loop, const gp_bus_opts *opts,
           gp_bus_conn_cb *conn_cb, void *conn_arg, gp_bus **out)
{
    gp_bus    *bus;
    natsStatus s;
    gp_err     err = GP_EOK;

    *out = NULL;
    if (loop == NULL || opts == NULL || opts->url == NULL || !prefix_ok(opts->inbox_prefix))
        return GP_EINVAL;
    bus = bus_alloc(loop, opts);
    if (bus == NULL)
        return GP_ENOMEM;
    bus->conn_cb = conn_cb;
    bus->conn_arg = conn_arg;
    bus->max_pending = opts->max_pending ? opts->max_pending : GP_MAX_PENDING_REQ;
    s = make_options(bus, opts);
    if (s == NATS_OK)
        s = natsConnection_Connect(&bus->nc, bus->opts);
    if (s == NATS_NOT_YET_CONNECTED) {
        GP_WARN("nats_not_yet_connected", "name=%s url=%s", bus->name, opts->url);
        s = NATS_OK;
    }
    if (s != NATS_OK) {
        GP_ERROR("nats_connect", "name=%s detail=\"%s\"", bus->name, natsStatus_GetText(s));
        err = map_status(s) == GP_EINVAL ? GP_EINVAL : GP_EUNAVAIL;
    } else if (opts->jetstream) {
        err = open_js(bus);
    }
    if (err != GP_EOK) {
        bus_free_now(bus);
        return err;
    }
    *out = bus;
    return GP_EOK;
}

bool
gp_bus_is_connected(const gp_bus *bus)
{
    return bus != NULL && bus->nc != NULL &&
           natsConnection_Status(bus->nc) == NATS_CONN_STATUS_CONNECTED;
}

bool
gp_bus_refusal(const gp_bus *bus, char *out, size_t n)
{
    const char *text = NULL;
    natsStatus  s;

    if (bus == NULL || bus->nc == NULL)
        return false;
    s = natsConnection_GetLastError(bus->nc, &text);
    if (s != NATS_NOT_PERMITTED && s != NATS_CONNECTION_AUTH_FAILED)
        return false;
    snprintf(out, n, "%s", text != NULL ? text : "permissions violation");
    return true;
}

void
gp_bus_get_stats(const gp_bus *bus, gp_bus_stats *out)
{
    gp_bus *b = (gp_bus *)bus;            /* the atomics and cnats' getters */

    *out = bus->st;
    out->dropped = 0;
    for (int l = 0; l < GP_BUS_LANES; l++) {
        out->dropped_lane[l] = atomic_load(&b->dropped[l]);
        out->dropped += out->dropped_lane[l];
    }
    out->dropped_bytes = atomic_load(&b->dropped_bytes);
    out->js_refused = atomic_load(&b->js_refused);
    out->nats_dropped = b->nats_dropped_gone;
    for (gp_bus_sub *sub = bus->subs; sub != NULL; sub = sub->next)
        if (!sub->dead)
            out->nats_dropped += sub_nats_dropped(sub);
}

gp_err
gp_bus_flush_blocking(gp_bus *bus, unsigned timeout_ms)
{
    if (bus->freeing)
        return GP_EUNAVAIL;
    return map_status(natsConnection_FlushTimeout(bus->nc, timeout_ms));
}

/* ---- core NATS ----------------------------------------------------------- */

static bool
subject_ok(const char *s)
{
    return s != NULL && s[0] != '\0' && strlen(s) <= GP_MAX_SUBJECT;
}

static gp_err
sub_open(gp_bus *bus, const char *subject, const char *queue, gp_bus_sub *sub)
{
    natsStatus s;

    if (queue != NULL)
        s = natsConnection_QueueSubscribe(&sub->ns, bus->nc, subject, queue, on_msg, sub);
    else
        s = natsConnection_Subscribe(&sub->ns, bus->nc, subject, on_msg, sub);
    if (s != NATS_OK)
        return map_status(s);
    /* cnats' own queue of the subscription, before on_msg: bounded like
     * the lane (its drops: gp_bus_stats.nats_dropped) */
    natsSubscription_SetPendingLimits(sub->ns, (int)lane_budget(sub->lane),
                                      (int)lane_bytes(sub->lane));
    pthread_mutex_lock(&bus->mu);
    bus->subs_live++;
    pthread_mutex_unlock(&bus->mu);
    if (natsSubscription_SetOnCompleteCB(sub->ns, on_sub_complete, sub) != NATS_OK) {
        /* Cannot happen on a fresh async sub; never free what cnats may use. */
        GP_ERROR("nats_sub_oncomplete", "subject=%s", subject);
    }
    sub->next = bus->subs;
    bus->subs = sub;
    return GP_EOK;
}

gp_err
gp_bus_sub_new_lane(gp_bus *bus, const char *subject, const char *queue, gp_bus_lane lane,
                    gp_bus_msg_cb *cb, void *arg, gp_bus_sub **out)
{
    gp_bus_sub *sub;
    gp_err      err;

    *out = NULL;
    if (!subject_ok(subject) || cb == NULL || (queue != NULL && queue[0] == '\0') ||
        (lane != GP_LANE_CONTROL && lane != GP_LANE_BULK))
        return GP_EINVAL;
    if (bus->freeing)
        return GP_EUNAVAIL;
    sub = calloc(1, sizeof(*sub));
    if (sub == NULL)
        return GP_ENOMEM;
    sub->bus = bus;
    sub->cb = cb;
    sub->arg = arg;
    sub->lane = lane;
    err = sub_open(bus, subject, queue, sub);
    if (err != GP_EOK) {
        free(sub);
        return err;
    }
    *out = sub;
    return GP_EOK;
}

gp_err
gp_bus_sub_new(gp_bus *bus, const char *subject, const char *queue,
               gp_bus_msg_cb *cb, void *arg, gp_bus_sub **out)
{
    return gp_bus_sub_new_lane(bus, subject, queue, GP_LANE_CONTROL, cb, arg, out);
}

void
gp_bus_sub_free(gp_bus_sub *sub)
{
    if (sub == NULL || sub->dead)
        return;
    sub->bus->nats_dropped_gone += sub_nats_dropped(sub);
    sub->dead = true;
    /* The struct lives until REC_SUBDONE (or gp_bus_free). */
    natsSubscription_Unsubscribe(sub->ns);
}

gp_err
gp_bus_pub(gp_bus *bus, const char *subject, const char *reply,
           const void *data, size_t len)
{
    natsStatus s;

    if (!subject_ok(subject) || (data == NULL && len > 0))
        return GP_EINVAL;
    if (len > GP_MAX_MSG_BYTES)
        return GP_ETOOBIG;
    if (bus->freeing)
        return GP_EUNAVAIL;
    if (reply != NULL)
        s = natsConnection_PublishRequest(bus->nc, subject, reply, data, (int)len);
    else
        s = natsConnection_Publish(bus->nc, subject, data, (int)len);
    if (s != NATS_OK) {
        bus->st.publish_errors++;
        return map_status(s);
    }
    bus->st.published++;
    return GP_EOK;
}

/* One wildcard subscription receives every reply: "<inbox>.<token>". */
static gp_err
inbox_open(gp_bus *bus)
{
    char        subj[GP_MAX_SUBJECT + 1];
    char       *nuid;
    gp_bus_sub *sub;
    gp_err      err;

    /* natsInbox_Create gives "_INBOX.<nuid>"; keep the nuid, swap the prefix. */
    if (natsInbox_Create(&nuid) != NATS_OK)
        return GP_ENOMEM;
    snprintf(subj, sizeof(subj), "%s.%s", bus->inbox_prefix, strchr(nuid, '.') + 1);
    natsInbox_Destroy(nuid);
    if ((bus->inbox = strdup(subj)) == NULL)
        return GP_ENOMEM;
    snprintf(subj, sizeof(subj), "%s.*", bus->inbox);
    sub = calloc(1, sizeof(*sub));
    if (sub == NULL)
        return GP_ENOMEM;
    sub->bus = bus;
    sub->inbox = true;
    err = sub_open(bus, subj, NULL, sub);
    if (err != GP_EOK) {
        free(sub);
        return err;
    }
    bus->inbox_sub = sub;
    return GP_EOK;
}

/* Publishes data with reply, and with the header Nats-Msg-Id when msg_id
 * is not NULL. */
static natsStatus
publish_request(gp_bus *bus, const char *subject, const char *reply, const char *msg_id,
                const void *data, size_t len)
{
    natsMsg   *m = NULL;
    natsStatus s;

    if (msg_id == NULL)
        return natsConnection_PublishRequest(bus->nc, subject, reply, data, (int)len);
    s = natsMsg_Create(&m, subject, reply, data, (int)len);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(m, "Nats-Msg-Id", msg_id);
    if (s == NATS_OK)
        s = natsConnection_PublishMsg(bus->nc, m);
    natsMsg_Destroy(m);
    return s;
}

static gp_err
request(gp_bus *bus, const char *subject, const char *msg_id, const void *data, size_t len,
        unsigned timeout_ms, gp_bus_reply_cb *cb, void *arg)
{
    char       reply[GP_MAX_SUBJECT + 1];
    req       *r;
    natsStatus s;
    gp_err     err;

    if (!subject_ok(subject) || cb == NULL || timeout_ms == 0 || (data == NULL && len > 0))
        return GP_EINVAL;
    if (len > GP_MAX_MSG_BYTES)
        return GP_ETOOBIG;
    if (bus->freeing || bus->refuse_requests)
        return GP_EUNAVAIL;
    if (bus->npending >= bus->max_pending)
        return GP_ETOOBIG;
    if (bus->inbox_sub == NULL && (err = inbox_open(bus)) != GP_EOK)
        return err;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return GP_ENOMEM;
    r->bus = bus;
    r->token = ++bus->next_token;
    r->cb = cb;
    r->arg = arg;
    snprintf(reply, sizeof(reply), "%s.%llu", bus->inbox, (unsigned long long)r->token);
    s = publish_request(bus, subject, reply, msg_id, data, len);
    if (s != NATS_OK) {
        free(r);
        bus->st.publish_errors++;
        return map_status(s);
    }
    bus->st.requests++;
    r->next = bus->pending[r->token % REQ_BUCKETS];
    bus->pending[r->token % REQ_BUCKETS] = r;
    bus->npending++;
    ev_timer_init(&r->timer, req_timeout_cb, timeout_ms / 1000.0, 0.);
    ev_timer_start(bus->loop, &r->timer);
    return GP_EOK;
}

gp_err
gp_bus_request(gp_bus *bus, const char *subject, const void *data, size_t len,
               unsigned timeout_ms, gp_bus_reply_cb *cb, void *arg)
{
    return request(bus, subject, NULL, data, len, timeout_ms, cb, arg);
}

gp_err
gp_bus_request_msgid(gp_bus *bus, const char *subject, const char *msg_id, const void *data,
                     size_t len, unsigned timeout_ms, gp_bus_reply_cb *cb, void *arg)
{
    if (msg_id == NULL || msg_id[0] == '\0')
        return GP_EINVAL;
    return request(bus, subject, msg_id, data, len, timeout_ms, cb, arg);
}

/* ---- JetStream worker: stream management and publishes ------------------ */

static void   pull_destroy(gp_bus_pull *p);
static gp_err run_consumer(job *j);

static void
job_free(job *j)
{
    if (j->cons != NULL)
        pull_destroy(j->cons);
    if (j->subjects != NULL)
        for (char **p = j->subjects; *p != NULL; p++)
            free(*p);
    free(j->subjects);
    free((char *)j->sc.Name);
    free(j->subject);
    free(j->msg_id);
    free(j->data);
    free(j);
}

/* NATS_NO_RESPONDERS: no stream listens on the subject (or no JetStream);
 * a JetStream API error (bad config, wrong expected stream) is a conflict. */
static gp_err
js_err(natsStatus s, jsErrCode jerr)
{
    gp_err err = map_status(s);

    return err == GP_EINTERNAL && jerr != 0 ? GP_ECONFLICT : err;
}

static void
limits_of(const jsStreamConfig *c, gp_stream_limits *l)
{
    l->replicas = c->Replicas;
    l->max_bytes = c->MaxBytes;
    l->max_age_ns = c->MaxAge;
    l->max_msgs = c->MaxMsgs;
}

/* The declaration meets the stream as it is: what the stream has larger
 * (an operator's edit, another service's larger declaration) stays. */
static void
keep_larger(job *j, const jsStreamConfig *have)
{
    gp_stream_limits want, got, out;
    unsigned         kept;
    char             note[256];

    limits_of(&j->sc, &want);
    limits_of(have, &got);
    kept = gp_stream_limits_merge(&want, &got, &out);
    j->sc.Replicas = out.replicas;
    j->sc.MaxBytes = out.max_bytes;
    j->sc.MaxAge = out.max_age_ns;
    j->sc.MaxMsgs = out.max_msgs;
    if (kept != 0) {
        gp_stream_kept_str(kept, &want, &out, note, sizeof(note));
        GP_INFO("stream_kept", "stream=%s %s", j->sc.Name, note);
    }
}

/* Reads the stream, then updates it to the declaration merged with it;
 * NATS_NOT_FOUND when there is no such stream. */
static natsStatus
stream_update(gp_bus *bus, job *j, jsErrCode *jerr)
{
    jsStreamInfo *si = NULL;
    natsStatus    s = js_GetStreamInfo(&si, bus->js, j->sc.Name, NULL, jerr);

    if (s == NATS_OK) {
        keep_larger(j, si->Config);
        jsStreamInfo_Destroy(si);
        si = NULL;
        *jerr = 0;
        s = js_UpdateStream(&si, bus->js, &j->sc, NULL, jerr);
    } else if (*jerr == JSStreamNotFoundErr) {
        s = NATS_NOT_FOUND;
    }
    jsStreamInfo_Destroy(si);
    return s;
}

static gp_err
run_stream(gp_bus *bus, job *j)
{
    jsStreamInfo *si = NULL;
    jsErrCode     jerr = 0;
    natsStatus    s = stream_update(bus, j, &jerr);

    if (s == NATS_NOT_FOUND) {
        jerr = 0;
        s = js_AddStream(&si, bus->js, &j->sc, NULL, &jerr);
        jsStreamInfo_Destroy(si);
        if (s != NATS_OK && jerr == JSStreamNameExistErr) {   /* another made it meanwhile */
            jerr = 0;
            s = stream_update(bus, j, &jerr);
        }
    }
    if (s != NATS_OK) {
        GP_ERROR("js_stream", "stream=%s detail=\"%s\" js_err=%d", j->sc.Name,
                 nats_GetLastError(NULL) != NULL ? nats_GetLastError(NULL) : natsStatus_GetText(s),
                 (int)jerr);
        return js_err(s, jerr);
    }
    return GP_EOK;
}

/* A publish refused because there is no room: the stream's own limit
 * with discard new ("maximum bytes exceeded", "maximum messages
 * exceeded": store failed), or the server's or account's store. */
static bool
js_full(jsErrCode jerr)
{
    return jerr == JSStreamStoreFailedErr || jerr == JSStorageResourcesExceededErr ||
           jerr == JSInsufficientResourcesErr || jerr == JSAccountResourcesExceededErr;
}

static gp_err
run_pub(gp_bus *bus, job *j, bool *full)
{
    jsPubOptions po;
    jsPubAck    *pa = NULL;
    jsErrCode    jerr = 0;
    natsStatus   s;

    jsPubOptions_Init(&po);
    po.MsgId = j->msg_id;           /* the server keeps one per dedupe window */
    s = js_Publish(&pa, bus->js, j->subject, j->data, (int)j->len, &po, &jerr);
    if (s == NATS_OK && pa->Duplicate)
        GP_DEBUG("js_pub_duplicate", "subject=%s msg_id=%s", j->subject, j->msg_id);
    jsPubAck_Destroy(pa);
    if (s != NATS_OK && js_full(jerr)) {
        *full = true;
        GP_WARN("js_pub_full", "subject=%s detail=\"%s\" js_err=%d", j->subject,
                nats_GetLastError(NULL) != NULL ? nats_GetLastError(NULL) : natsStatus_GetText(s),
                (int)jerr);
        return GP_ETOOBIG;
    }
    if (s != NATS_OK) {
        GP_WARN("js_pub", "subject=%s detail=\"%s\" js_err=%d", j->subject,
                natsStatus_GetText(s), (int)jerr);
        return js_err(s, jerr);
    }
    return GP_EOK;
}

/* Every stream of the account, its state and limits. */
static void
run_list(gp_bus *bus, job *j)
{
    jsStreamInfoList *l = NULL;
    jsErrCode         jerr = 0;
    natsStatus        s = js_Streams(&l, bus->js, NULL, &jerr);
    rec              *r = rec_new(REC_LIST);
    int               n = s == NATS_OK ? l->Count : 0;

    if (r == NULL) {
        GP_ERROR("bus_oom", "what=js_list");
        jsStreamInfoList_Destroy(l);
        return;
    }
    if (n > GP_MAX_STREAMS_LISTED) {
        GP_WARN("js_streams_cut", "streams=%d listed=%d", n, GP_MAX_STREAMS_LISTED);
        n = GP_MAX_STREAMS_LISTED;
    }
    r->u.l.cb = j->list_cb;
    r->u.l.arg = j->arg;
    r->u.l.err = s == NATS_NOT_FOUND ? GP_EOK : js_err(s, jerr);   /* NOT_FOUND: none */
    if (n > 0 && (r->u.l.s = calloc((size_t)n, sizeof(gp_stream_state))) == NULL)
        r->u.l.err = GP_ENOMEM;
    for (int i = 0; r->u.l.s != NULL && i < n; i++) {
        const jsStreamInfo *si = l->List[i];
        gp_stream_state    *o;

        if (si == NULL || si->Config == NULL || si->Config->Name == NULL)
            continue;
        o = &r->u.l.s[r->u.l.n++];
        snprintf(o->name, sizeof(o->name), "%s", si->Config->Name);
        o->msgs = si->State.Msgs;
        o->bytes = si->State.Bytes;
        o->max_msgs = si->Config->MaxMsgs;
        o->max_bytes = si->Config->MaxBytes;
        o->max_age_ns = si->Config->MaxAge;
        o->replicas = (int)si->Config->Replicas;
        o->discard_old = si->Config->Discard == js_DiscardOld;
    }
    jsStreamInfoList_Destroy(l);
    bus_push(bus, r);
}

static void
jw_report(gp_bus *bus, job *j, gp_err err, bool full)
{
    rec *r = rec_new(REC_DONE);

    if (r == NULL) {            /* cannot report: the one case a cb is lost */
        GP_ERROR("bus_oom", "what=js_done");
        return;
    }
    r->u.d.cb = j->cb;
    r->u.d.arg = j->arg;
    r->u.d.err = err;
    r->u.d.pub = j->kind == JOB_PUB;
    r->u.d.full = full;
    bus_push(bus, r);
}

static void
jw_run(gp_bus *bus, job *j)
{
    bool   full = false;
    gp_err err;

    if (j->kind == JOB_LIST) {
        run_list(bus, j);
        return;
    }
    err = j->kind == JOB_STREAM     ? run_stream(bus, j)
        : j->kind == JOB_CONSUMER ? run_consumer(j)
                                  : run_pub(bus, j, &full);
    jw_report(bus, j, err, full);           /* full is set by the call before */
}

static void *
jw_main(void *arg)
{
    gp_bus *bus = arg;
    job    *j;

    for (;;) {
        pthread_mutex_lock(&bus->jw_mu);
        while (bus->jw_head == NULL && !bus->jw_stop)
            pthread_cond_wait(&bus->jw_cond, &bus->jw_mu);
        if (bus->jw_stop) {
            pthread_mutex_unlock(&bus->jw_mu);
            return NULL;
        }
        j = bus->jw_head;
        bus->jw_head = j->next;
        if (bus->jw_head == NULL)
            bus->jw_tail = NULL;
        bus->jw_len--;
        bus->jw_bytes -= j->len;
        pthread_mutex_unlock(&bus->jw_mu);
        jw_run(bus, j);
        job_free(j);
    }
}

static gp_err
jw_submit(gp_bus *bus, job *j)
{
    pthread_mutex_lock(&bus->jw_mu);
    if (bus->jw_len >= GP_MAX_PENDING_REQ || bus->jw_bytes + j->len > GP_MAX_JS_QUEUE_BYTES) {
        pthread_mutex_unlock(&bus->jw_mu);
        atomic_fetch_add(&bus->js_refused, 1);
        job_free(j);
        return GP_ETOOBIG;
    }
    j->next = NULL;
    if (bus->jw_tail != NULL)
        bus->jw_tail->next = j;
    else
        bus->jw_head = j;
    bus->jw_tail = j;
    bus->jw_len++;
    bus->jw_bytes += j->len;
    pthread_cond_signal(&bus->jw_cond);
    pthread_mutex_unlock(&bus->jw_mu);
    return GP_EOK;
}

static gp_err
js_usable(gp_bus *bus)
{
    if (bus->freeing)
        return GP_EUNAVAIL;
    return bus->js != NULL ? GP_EOK : GP_EINVAL;
}

static job *
stream_job(const gp_stream_cfg *cfg)
{
    job *j = calloc(1, sizeof(*j));
    int  n = 0;

    if (j == NULL)
        return NULL;
    j->kind = JOB_STREAM;
    jsStreamConfig_Init(&j->sc);
    while (cfg->subjects[n] != NULL)
        n++;
    j->subjects = calloc((size_t)n + 1, sizeof(char *));
    j->sc.Name = strdup(cfg->name);
    if (j->subjects == NULL || j->sc.Name == NULL) {
        job_free(j);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if ((j->subjects[i] = strdup(cfg->subjects[i])) == NULL) {
            job_free(j);
            return NULL;
        }
    }
    j->sc.Subjects = (const char **)j->subjects;
    j->sc.SubjectsLen = n;
    j->sc.MaxAge = cfg->max_age_s * 1000000000LL;          /* ns */
    j->sc.MaxBytes = cfg->max_bytes > 0 ? cfg->max_bytes : -1;
    j->sc.Duplicates = cfg->duplicate_window_s * 1000000000LL;
    j->sc.Storage = cfg->memory ? js_MemoryStorage : js_FileStorage;
    j->sc.Replicas = cfg->replicas > 0 ? cfg->replicas : 1;
    j->sc.Discard = cfg->discard_old ? js_DiscardOld : js_DiscardNew;
    return j;
}

gp_err
gp_bus_js_stream(gp_bus *bus, const gp_stream_cfg *cfg, gp_bus_done_cb *cb, void *arg)
{
    gp_err err = js_usable(bus);
    job   *j;

    if (err != GP_EOK)
        return err;
    if (cfg == NULL || cfg->name == NULL || cfg->subjects == NULL || cfg->subjects[0] == NULL ||
        cfg->max_age_s < 0 || cfg->duplicate_window_s < 0 || cfg->replicas < 0 ||
        cfg->replicas > GP_STREAM_REPLICAS_MAX)
        return GP_EINVAL;
    if ((j = stream_job(cfg)) == NULL)
        return GP_ENOMEM;
    j->cb = cb;
    j->arg = arg;
    return jw_submit(bus, j);
}

gp_err
gp_bus_js_streams(gp_bus *bus, gp_bus_streams_cb *cb, void *arg)
{
    gp_err err = js_usable(bus);
    job   *j;

    if (err != GP_EOK)
        return err;
    if (cb == NULL)
        return GP_EINVAL;
    if ((j = calloc(1, sizeof(*j))) == NULL)
        return GP_ENOMEM;
    j->kind = JOB_LIST;
    j->list_cb = cb;
    j->arg = arg;
    return jw_submit(bus, j);
}

gp_err
gp_bus_js_pub(gp_bus *bus, const char *subject, const char *msg_id,
              const void *data, size_t len, gp_bus_done_cb *cb, void *arg)
{
    gp_err err = js_usable(bus);
    job   *j;

    if (err != GP_EOK)
        return err;
    if (!subject_ok(subject) || msg_id == NULL || msg_id[0] == '\0' || (data == NULL && len > 0))
        return GP_EINVAL;
    if (len > GP_MAX_MSG_BYTES)
        return GP_ETOOBIG;
    if ((j = calloc(1, sizeof(*j))) == NULL)
        return GP_ENOMEM;
    j->kind = JOB_PUB;
    j->cb = cb;
    j->arg = arg;
    j->subject = strdup(subject);
    j->msg_id = strdup(msg_id);
    j->data = malloc(len > 0 ? len : 1);
    j->len = len;
    if (j->subject == NULL || j->msg_id == NULL || j->data == NULL) {
        job_free(j);
        return GP_ENOMEM;
    }
    if (len > 0)
        memcpy(j->data, data, len);
    return jw_submit(bus, j);
}

/* ---- JetStream pull consumers ------------------------------------------- */

/* Sleeps up to ms unless stopped; returns false when stopping. */
static bool
pull_wait(gp_bus_pull *p, int ms)
{
    struct timespec ts;
    bool            go;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&p->mu);
    if (!p->stop)
        pthread_cond_timedwait(&p->cond, &p->mu, &ts);
    go = !p->stop;
    pthread_mutex_unlock(&p->mu);
    return go;
}

/* Waits for room under max_inflight; returns how many to fetch, 0 = stop. */
static int
pull_room(gp_bus_pull *p)
{
    int room;

    pthread_mutex_lock(&p->mu);
    while (!p->stop && p->inflight >= p->max_inflight)
        pthread_cond_wait(&p->cond, &p->mu);
    room = p->stop ? 0 : p->max_inflight - p->inflight;
    pthread_mutex_unlock(&p->mu);
    return room < p->batch ? room : p->batch;
}

/* Creates the durable p names, or updates it to p's config; *jerr is the
 * JetStream API's error (0: none, or no answer). */
static natsStatus
consumer_put(gp_bus_pull *p, jsSubOptions *so, jsErrCode *jerr)
{
    jsConsumerInfo *ci = NULL;
    natsStatus      s;

    jsSubOptions_Init(so);
    so->Config.Durable = p->durable;
    so->Config.AckPolicy = js_AckExplicit;
    so->Config.AckWait = p->ack_wait_ms * 1000000LL;        /* ns */
    so->Config.FilterSubject = p->filter;
    so->Config.MaxAckPending = p->max_inflight;
    *jerr = 0;
    s = js_AddConsumer(&ci, p->js, p->stream, &so->Config, NULL, jerr);
    if (s != NATS_OK && *jerr != 0)
        s = js_UpdateConsumer(&ci, p->js, p->stream, &so->Config, NULL, jerr);
    jsConsumerInfo_Destroy(ci);
    return s;
}

/* Creates or updates the durable to our config (unless bind_only: its
 * owner made it, and this identity may only read it), then binds to it:
 * binding needs no subject, so a consumer of the whole stream works too,
 * and the durable survives natsSubscription_Destroy. */
static natsStatus
pull_subscribe(gp_bus_pull *p)
{
    jsSubOptions so;
    jsErrCode    jerr = 0;
    natsStatus   s = NATS_ERR;

    if (p->bind_only)
        jsSubOptions_Init(&so);
    else
        s = consumer_put(p, &so, &jerr);
    if (!p->bind_only && s != NATS_OK && jerr == 0)
        return s;                   /* no answer: retry; else bind as it is */
    so.Stream = p->stream;
    so.Consumer = p->durable;
    return js_PullSubscribe(&p->ns, p->js, p->filter, p->durable, NULL, &so, &jerr);
}

/* Hands fetched messages to the loop; the loop owns them from here. */
static void
pull_hand_over(gp_bus_pull *p, natsMsgList *list)
{
    for (int i = 0; i < list->Count; i++) {
        gp_jsmsg *jm = calloc(1, sizeof(*jm));
        rec      *r = rec_new(REC_JSMSG);

        if (jm == NULL || r == NULL) {      /* un-acked: redelivered later */
            free(jm);
            free(r);
            continue;
        }
        jm->pull = p;
        jm->msg = list->Msgs[i];
        list->Msgs[i] = NULL;
        r->u.jm = jm;
        pthread_mutex_lock(&p->mu);
        p->inflight++;
        pthread_mutex_unlock(&p->mu);
        bus_push(p->bus, r);
    }
    natsMsgList_Destroy(list);
}

/* Logs a failing status once, not once per second. */
static void
pull_log(gp_bus_pull *p, const char *what, natsStatus s, natsStatus *last)
{
    if (s == *last)
        return;
    *last = s;
    if (s != NATS_OK) {
        const char *detail = nats_GetLastError(NULL);   /* this thread's */

        GP_WARN(what, "stream=%s durable=%s detail=\"%s\"", p->stream, p->durable,
                detail != NULL && detail[0] != '\0' ? detail : natsStatus_GetText(s));
    }
}

static void *
pull_main(void *arg)
{
    gp_bus_pull *p = arg;
    natsStatus   last = NATS_OK, s;
    rec         *r;

    while (pull_wait(p, 0)) {
        if (p->ns == NULL) {
            /* The stream may not exist yet (created asynchronously): retry. */
            s = pull_subscribe(p);
            pull_log(p, "js_pull_subscribe", s, &last);
            if (s != NATS_OK)
                pull_wait(p, 1000);
            continue;
        }
        int         n = pull_room(p);
        natsMsgList list = {NULL, 0};

        if (n <= 0)
            continue;
        s = natsSubscription_Fetch(&list, p->ns, n, 1000, NULL);
        if (s == NATS_OK)
            pull_hand_over(p, &list);
        pull_log(p, "js_fetch", s == NATS_TIMEOUT ? NATS_OK : s, &last);
        if (s != NATS_OK && s != NATS_TIMEOUT)
            pull_wait(p, 1000);
    }
    /* Tells the loop to join us; without memory gp_bus_free joins instead. */
    if ((r = rec_new(REC_PULLDONE)) != NULL) {
        r->u.pull = p;
        bus_push(p->bus, r);
    }
    return NULL;
}

static void
pull_destroy(gp_bus_pull *p)
{
    natsSubscription_Destroy(p->ns);    /* not Unsubscribe: keeps the durable */
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cond);
    free(p->stream);
    free(p->durable);
    free(p->filter);
    free(p);
}

static void
pull_maybe_free(gp_bus_pull *p)
{
    int inflight;

    pthread_mutex_lock(&p->mu);
    inflight = p->inflight;
    pthread_mutex_unlock(&p->mu);
    if (p->dead && p->joined && inflight == 0)
        pull_destroy(p);
}

static gp_bus_pull *
pull_alloc(gp_bus *bus, const gp_pull_cfg *cfg)
{
    gp_bus_pull *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->bus = bus;
    p->js = bus->js;
    p->stream = strdup(cfg->stream);
    p->durable = strdup(cfg->durable);
    p->filter = cfg->filter_subject != NULL ? strdup(cfg->filter_subject) : NULL;
    p->batch = cfg->batch > 0 ? cfg->batch : 64;
    p->max_inflight = cfg->max_inflight > 0 ? cfg->max_inflight : 1024;
    p->ack_wait_ms = cfg->ack_wait_ms > 0 ? cfg->ack_wait_ms : 30000;
    p->bind_only = cfg->bind_only;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cond, NULL);
    if (p->stream == NULL || p->durable == NULL ||
        (cfg->filter_subject != NULL && p->filter == NULL)) {
        pull_destroy(p);
        return NULL;
    }
    return p;
}

gp_err
gp_bus_js_pull_new(gp_bus *bus, const gp_pull_cfg *cfg, gp_bus_js_cb *cb, void *arg,
                   gp_bus_pull **out)
{
    gp_err       err = js_usable(bus);
    gp_bus_pull *p;

    *out = NULL;
    if (err != GP_EOK)
        return err;
    if (cfg == NULL || cfg->stream == NULL || cfg->durable == NULL || cb == NULL ||
        strchr(cfg->durable, '.') != NULL)
        return GP_EINVAL;
    if ((p = pull_alloc(bus, cfg)) == NULL)
        return GP_ENOMEM;
    p->cb = cb;
    p->arg = arg;
    if (pthread_create(&p->thread, NULL, pull_main, p) != 0) {
        pull_destroy(p);
        return GP_ENOMEM;
    }
    p->next = bus->pulls;
    bus->pulls = p;
    *out = p;
    return GP_EOK;
}

/* JOB_CONSUMER, on the worker thread. */
static gp_err
run_consumer(job *j)
{
    jsSubOptions so;
    jsErrCode    jerr;
    natsStatus   s = consumer_put(j->cons, &so, &jerr);

    if (s != NATS_OK)
        GP_WARN("js_consumer", "stream=%s durable=%s detail=\"%s\" js_err=%d", j->cons->stream,
                j->cons->durable, natsStatus_GetText(s), (int)jerr);
    return s == NATS_OK ? GP_EOK : js_err(s, jerr);
}

gp_err
gp_bus_js_consumer(gp_bus *bus, const gp_pull_cfg *cfg, gp_bus_done_cb *cb, void *arg)
{
    gp_err err = js_usable(bus);
    job   *j;

    if (err != GP_EOK)
        return err;
    if (cfg == NULL || cfg->stream == NULL || cfg->durable == NULL ||
        strchr(cfg->durable, '.') != NULL || cfg->bind_only)
        return GP_EINVAL;
    if ((j = calloc(1, sizeof(*j))) == NULL)
        return GP_ENOMEM;
    j->kind = JOB_CONSUMER;
    j->cb = cb;
    j->arg = arg;
    if ((j->cons = pull_alloc(bus, cfg)) == NULL) {
        job_free(j);
        return GP_ENOMEM;
    }
    return jw_submit(bus, j);
}

static void
pull_stop(gp_bus_pull *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
}

void
gp_bus_js_pull_free(gp_bus_pull *p)
{
    if (p == NULL || p->dead)
        return;
    /* The worker finishes its Fetch (<= 1 s) and queues REC_PULLDONE; the
     * loop joins it then, so this call does not block. */
    p->dead = true;
    pull_stop(p);
}

const char *gp_jsmsg_subject(const gp_jsmsg *m) { return natsMsg_GetSubject(m->msg); }
const void *gp_jsmsg_data(const gp_jsmsg *m)    { return natsMsg_GetData(m->msg); }
size_t      gp_jsmsg_len(const gp_jsmsg *m)     { return (size_t)natsMsg_GetDataLength(m->msg); }

uint64_t
gp_jsmsg_delivered(const gp_jsmsg *m)
{
    jsMsgMetaData *md = NULL;
    uint64_t       n = 0;

    if (natsMsg_GetMetaData(&md, m->msg) == NATS_OK)
        n = md->NumDelivered;
    jsMsgMetaData_Destroy(md);
    return n;
}

/* Ack/Nak/Term are plain publishes in cnats (the *Sync forms block). */
static void
jsmsg_end(gp_jsmsg *m, natsStatus s)
{
    if (s != NATS_OK)
        GP_WARN("js_ack", "subject=%s detail=\"%s\"", natsMsg_GetSubject(m->msg),
                natsStatus_GetText(s));
    natsMsg_Destroy(m->msg);
    pull_end(m->pull);
    free(m);
}

void gp_jsmsg_ack(gp_jsmsg *m)                  { jsmsg_end(m, natsMsg_Ack(m->msg, NULL)); }
void gp_jsmsg_nak(gp_jsmsg *m, unsigned delay_ms) { jsmsg_end(m, natsMsg_NakWithDelay(m->msg, delay_ms, NULL)); }
void gp_jsmsg_term(gp_jsmsg *m)                 { jsmsg_end(m, natsMsg_Term(m->msg, NULL)); }

/* ---- shutdown ------------------------------------------------------------ */

/* New requests are refused first, so a callback that retries cannot leave
 * a request behind. */
static size_t
fail_requests(gp_bus *bus)
{
    size_t n = 0;

    bus->refuse_requests = true;
    for (int i = 0; i < REQ_BUCKETS; i++) {
        req *r;

        while ((r = bus->pending[i]) != NULL) {
            req_unlink(bus, r);
            req_finish(r, GP_EUNAVAIL, NULL, 0);
            n++;
        }
    }
    return n;
}

size_t
gp_bus_fail_requests(gp_bus *bus)
{
    if (bus == NULL || bus->freeing)
        return 0;
    return fail_requests(bus);
}

static void
stop_js_worker(gp_bus *bus)
{
    job *j;

    if (!bus->jw_started)
        return;
    pthread_mutex_lock(&bus->jw_mu);
    bus->jw_stop = true;
    pthread_cond_signal(&bus->jw_cond);
    pthread_mutex_unlock(&bus->jw_mu);
    pthread_join(bus->jw_thread, NULL);
    while ((j = bus->jw_head) != NULL) {
        bus->jw_head = j->next;
        if (j->kind == JOB_PUB)
            bus->st.js_publish_errors++;
        if (j->cb != NULL)
            j->cb(j->arg, GP_EUNAVAIL);
        if (j->list_cb != NULL)
            j->list_cb(j->arg, GP_EUNAVAIL, NULL, 0);
        job_free(j);
    }
}

/* Waits until cnats has returned from every callback that may touch bus. */
static void
wait_cnats_quiet(gp_bus *bus)
{
    struct timespec ts;
    int             rc = 0;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += FREE_WAIT_MS / 1000;
    pthread_mutex_lock(&bus->mu);
    while ((!bus->closed_seen || bus->subs_live > 0) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&bus->cond, &bus->mu, &ts);
    pthread_mutex_unlock(&bus->mu);
    if (rc == ETIMEDOUT)
        GP_ERROR("bus_free_wait", "closed=%d subs_live=%d", (int)bus->closed_seen, bus->subs_live);
}

/* Delivers finished JetStream jobs; drops everything else. */
static void
drain_queue(gp_bus *bus)
{
    rec *r;

    take_queue(bus, NULL, NULL, 0, NULL, NULL);
    for (int l = 0; l < GP_BUS_LANES; l++) {
        while ((r = bus->batch[l].head) != NULL) {
            bus->batch[l].head = r->next;
            switch (r->kind) {
            case REC_MSG:   natsMsg_Destroy(r->u.m.msg); break;
            case REC_DONE:  deliver_done(bus, r); break;
            case REC_LIST:  deliver_list(r); break;
            case REC_JSMSG: jsmsg_drop(r->u.jm); break;
            default:        break;  /* subs and pulls are freed by the caller */
            }
            free(r);
        }
        bus->batch[l].tail = NULL;
    }
}

static void
free_pulls(gp_bus *bus)
{
    gp_bus_pull *p;

    for (p = bus->pulls; p != NULL; p = p->next) {
        pull_stop(p);
        pthread_join(p->thread, NULL);
    }
    /* Fetched messages still queued; joined stays false until the pulls
     * are off bus->pulls, so that dropping them frees nothing yet. */
    drain_queue(bus);
    while ((p = bus->pulls) != NULL) {
        bus->pulls = p->next;
        p->bus = NULL;
        p->dead = true;
        p->joined = true;
        pull_maybe_free(p);         /* else freed by the last gp_jsmsg_* */
    }
}

static void
bus_free_now(gp_bus *bus)
{
    gp_bus_sub *sub;
    rec        *r;

    bus->freeing = true;
    pthread_mutex_lock(&bus->mu);
    bus->closing = true;
    pthread_mutex_unlock(&bus->mu);
    fail_requests(bus);
    if (bus->nc != NULL) {
        for (sub = bus->subs; sub != NULL; sub = sub->next)
            natsSubscription_Unsubscribe(sub->ns);
        natsConnection_Close(bus->nc);  /* blocked JetStream calls return now */
        wait_cnats_quiet(bus);
    }
    free_pulls(bus);
    stop_js_worker(bus);
    drain_queue(bus);
    while ((sub = bus->subs) != NULL) {
        bus->subs = sub->next;
        sub_destroy(sub);
    }
    jsCtx_Destroy(bus->js);
    natsConnection_Destroy(bus->nc);
    natsOptions_Destroy(bus->opts);
    free(bus->inbox);
    free(bus->inbox_prefix);
    while ((r = bus->spare) != NULL) {
        bus->spare = r->next;
        free(r);
    }
    ev_async_stop(bus->loop, &bus->wake);
    pthread_mutex_destroy(&bus->mu);
    pthread_cond_destroy(&bus->cond);
    pthread_mutex_destroy(&bus->jw_mu);
    pthread_cond_destroy(&bus->jw_cond);
    free(bus->name);
    free(bus);
}

void
gp_bus_free(gp_bus *bus)
{
    if (bus == NULL || bus->freeing || bus->free_requested)
        return;
    if (bus->dispatching > 0) {
        bus->free_requested = true;     /* finished by wake_cb on return */
        return;
    }
    bus_free_now(bus);
}
