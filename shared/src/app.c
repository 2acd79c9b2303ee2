/* app.c -- the service chassis and dispatcher (see gp/app.h).
 *
 * Life of a request: a cnats thread queues the message; the bus hands it
 * to on_msg on the loop thread; on_msg checks size and the in-flight cap,
 * decodes with the operation's request type, calls the handler and,
 * unless the handler said PENDING, encodes and sends the reply at once.
 * PENDING requests get a deadline timer; whichever of gp_req_done and the
 * timer comes first sends the reply, and gp_req_done frees the request.
 * A durable route's message takes the same path from a JetStream pull
 * consumer, and its end is an ack, a nak or a dead letter instead of a
 * reply.
 *
 * Runtime state: one op_rt per operation (its counters and latency,
 * shared by every subscription of that operation, so 3,000 simulated
 * nodes binding nodeRun are one metric series), one sub_rt per
 * subscription.  A request points at its op_rt and copies what it needs
 * from the route, so a binding may go away while its requests finish. */
#include "gp/app.h"

#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp/backoff.h"
#include "gp/clock.h"
#include "gp/http.h"
#include "gp/id.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "gp/ratelimit.h"
#include "gp/streamcfg.h"
#include "msg_gen.h"
#include <nats/nats.h>

#define LOG_EVERY_S 1.0    /* at most one log line per route and second for bad input */
/* Tenants with a series of their own in gp_tenant_limited_total; the
 * others are counted as tenant="_other" (bounded metric cardinality). */
#define LIMIT_SERIES 32
#define DLQ_STREAM  "DLQ"

typedef struct op_rt {
    const gp_op    *op;
    uint64_t       *calls;
    uint64_t       *errors;
    gp_hist        *latency;
    uint64_t       *dead;            /* durable routes: messages dead-lettered */
    double          last_log;
    uint64_t        suppressed;
    bool            served;          /* subscribed at least once (vs only declared) */
    int             limit_tok;       /* subject token of op->limit_by, or -1 */
    gp_app         *app;
    struct gp_req  *spare;           /* freed request blocks of this op, for reuse */
    int             nspare;
} op_rt;

/* Request blocks (gp_req, then the op's in and out structs: ~2 KiB, past
 * malloc's small-size cache) kept per operation for reuse, so a request
 * costs no malloc/free; bounded.  None under AddressSanitizer, which then
 * sees every use after free. */
#if defined(__SANITIZE_ADDRESS__)
# define REQ_SPARES 0
#else
# define REQ_SPARES 32
#endif
/* The reply buffer is kept between replies unless a large reply grew it
 * past this. */
#define REPLY_BUF_KEEP (64 * 1024)

typedef struct sub_rt {
    gp_app         *app;
    op_rt          *o;
    const gp_route *r;
    void           *data;
    gp_bus_sub     *sub;
    gp_bus_pull    *pull;
    char            subject[GP_MAX_SUBJECT + 1];
} sub_rt;

struct gp_binding {
    gp_app            *app;
    sub_rt            *subs;
    int                nsubs;
    struct gp_binding *prev, *next;
};

struct gp_task {
    gp_app         *app;
    char            name[32];
    double          period;
    gp_cron_fn     *fn;
    void           *arg;
    ev_timer        timer, kick;
    uint64_t       *runs, *overruns;
    gp_hist        *seconds;
    struct gp_task *next;
};

struct gp_req {
    gp_app         *app;
    op_rt          *o;
    const gp_route *r;
    void           *data;
    gp_jsmsg       *jm;               /* durable routes: the message to end */
    uint64_t        deliveries;
    char            reply[GP_MAX_SUBJECT + 1];
    char            subject[GP_MAX_SUBJECT + 1];
    char            toks[GP_MAX_SUBJECT + 1];
    const char     *tok[GP_MAX_TOKENS];
    int             ntok;
    double          t0;
    ev_timer        deadline;
    bool            replied;
    bool            pending;
    char            detail[GP_ERRBUF_LEN];
    int             tslot;            /* its tenant's gp_tlimits entry, or -1 */
    struct gp_req  *prev, *next;      /* pending list, for shutdown */
    void           *in;
    void           *out;
    const void     *body;             /* during the handler call only */
    size_t          body_len;
};

typedef struct limit_series {
    char      tenant[GP_MAX_ID + 1];
    uint64_t *count;
} limit_series;

typedef struct stream_rt {
    gp_stream_cfg        cfg;       /* the declaration, with this deployment's replicas and bytes */
    bool                 done;
    unsigned             fails;
} stream_rt;

struct gp_app {
    char                 service[32];
    char                 version[32];
    char                 instance[64];
    const gp_op         *health_op;
    gp_param             health_params[GP_MAX_TOKENS + 1];
    bool                 present;        /* ServicePresence sent: say goodbye at stop */
    gp_common_cfg        cfg;
    unsigned             needs;
    struct ev_loop      *loop;
    ev_signal            sigint, sigterm;
    ev_timer             drain, streams_t, close_t;
    gp_cron_fn          *stop_fn;
    void                *stop_arg;
    gp_bus_conn_cb      *conn_fn;
    void                *conn_arg;
    gp_bus              *bus;
    gp_kv               *kv;
    gp_db               *db;
    gp_db               *migrator;       /* roles mode, until the schema is migrated */
    gp_http             *http;
    gp_metrics          *metrics;
    op_rt                ops[GP_MAX_ROUTES];
    int                  nops;
    sub_rt             **subs;            /* gp_app_serve's subscriptions */
    int                  nsubs, capsubs;
    gp_binding          *bindings;
    gp_task             *tasks;
    stream_rt            streams[GP_MAX_STREAMS];
    int                  nstreams;
    bool                 need_dlq;
    void                *state;
    double               started;
    unsigned             inflight;
    unsigned             holds;           /* gp_app_hold: the service's own work, for the drain */
    gp_req              *pending;
    gp_route             health_route;
    bool                 stopping;
    bool                 closing;
    gp_err               exit_rc;      /* what gp_app_run returns: a refused start */
    uint64_t            *m_inflight_rejects;
    double              *m_inflight, *m_up_nats, *m_up_redis, *m_up_pg;
    uint64_t            *m_bus_dropped, *m_bus_reconnects, *m_kv_timeouts, *m_kv_reconnects;
    uint64_t            *m_bus_js_full;
    uint64_t            *m_kv_moved, *m_kv_ask, *m_kv_tryagain, *m_kv_crossslot;
    uint64_t            *m_db_timeouts, *m_db_reconnects, *m_kv_errors, *m_db_errors;
    uint64_t            *m_bus_dropped_bytes, *m_bus_nats_dropped, *m_bus_js_refused;
    uint64_t            *m_http_accepted, *m_http_refused, *m_http_evicted, *m_http_probe_only;
    uint64_t            *m_http_timeouts[2], *m_tenant_overflows, *m_limited[2];
    double              *m_http_clients;
    gp_tlimits          *tlimits;
    limit_series         limited[LIMIT_SERIES + 1];    /* + "_other" */
    int                  nlimited;
    uint64_t             spare_counter;
    double               spare_gauge;
    gp_buf               reply_buf;    /* send_reply's, reused (loop thread only) */
};

/* The DLQ stream, declared by the chassis when a service has a durable
 * route: two weeks, 512 MiB of what was given up on; when full, a new
 * dead letter is refused (its message is nak'ed and comes again) rather
 * than an older one dropped unseen. */
static const char *const dlq_subjects[] = {"gp.int.dlq.>", NULL};
static const gp_stream_cfg dlq_stream = {
    .name = DLQ_STREAM, .subjects = (const char **)dlq_subjects, .max_age_s = 14 * 86400,
    .max_bytes = 512LL << 20,
};

const gp_cfg_opt gp_common_cfg_opts[] = {
    GP_CFG_STR("nats-url", gp_common_cfg, nats_url, "nats://127.0.0.1:4222", "NATS server URL(s), comma separated"),
    GP_CFG_STR("nats-user", gp_common_cfg, nats_user, "", "NATS user (with nats-password)"),
    GP_CFG_SECRET_STR("nats-password", gp_common_cfg, nats_password, "", "NATS password"),
    GP_CFG_SECRET_STR("nats-token", gp_common_cfg, nats_token, "", "NATS token (instead of user and password)"),
    GP_CFG_STR("redis-host", gp_common_cfg, redis_host, "127.0.0.1", "Redis address (numeric)"),
    GP_CFG_INT("redis-port", gp_common_cfg, redis_port, 6379, 1, 65535, "Redis port"),
    GP_CFG_BOOL("redis-cluster", gp_common_cfg, redis_cluster, 0, "Redis Cluster: route by hash slot, follow MOVED/ASK"),
    GP_CFG_STR("redis-seeds", gp_common_cfg, redis_seeds, "", "cluster seeds host:port,host:port (empty: redis-host:redis-port)"),
    GP_CFG_STR("redis-user", gp_common_cfg, redis_user, "", "Redis ACL user (\"{service}\" is replaced by the service's name; empty: the default user)"),
    GP_CFG_SECRET_STR("redis-password", gp_common_cfg, redis_password, "", "Redis password (AUTH; empty: none)"),
    GP_CFG_STR("redis-password-file", gp_common_cfg, redis_password_file, "", "file holding the Redis password, read at start (\"{service}\" as in redis-user)"),
    GP_CFG_STR("pg-conninfo", gp_common_cfg, pg_conninfo, "postgresql://postgres@127.0.0.1:5432/gridpool", "PostgreSQL connection string"),
    GP_CFG_SECRET_STR("pg-migrate-conninfo", gp_common_cfg, pg_migrate_conninfo, "", "PostgreSQL connection string of the migrator (a superuser): the service first migrates on it as the owner role gridpool_owner, makes its login role (pg-user) and grants it what it uses, then logs in as that role; empty: it migrates on pg-conninfo"),
    GP_CFG_STR("pg-user", gp_common_cfg, pg_user, "", "PostgreSQL role the service logs in as ({service}: its name, e.g. gridpool_{service}); empty: pg-conninfo's user"),
    GP_CFG_BOOL("pg-migrate", gp_common_cfg, pg_migrate, 1, "migrate the schema at start; off: only check it, waiting while it is behind (a --migrate-only run migrates)"),
    GP_CFG_BOOL("migrate-only", gp_common_cfg, migrate_only, 0, "migrate the schema (with pg-migrate-conninfo: the roles and grants too), then exit: 0 done, 1 failed"),
    GP_CFG_STR("http-host", gp_common_cfg, http_host, "127.0.0.1", "address of the /metrics and /healthz endpoint"),
    GP_CFG_INT("http-port", gp_common_cfg, http_port, 0, -1, 65535, "port of /metrics and /healthz (0 any, -1 off)"),
    GP_CFG_STR("log-level", gp_common_cfg, log_level, "info", "debug, info, warn or error"),
    GP_CFG_STR("instance", gp_common_cfg, instance, "", "instance name (default host-pid)"),
    GP_CFG_STR("nats-inbox-prefix", gp_common_cfg, nats_inbox_prefix, "", "prefix of the bus' reply inbox (default _INBOX; the agent uses its own subtree)"),
    GP_CFG_UINT("request-timeout-ms", gp_common_cfg, request_timeout_ms, 5000, 10, 600000, "deadline of one request"),
    GP_CFG_UINT("redis-timeout-ms", gp_common_cfg, redis_timeout_ms, 2000, 10, 600000, "deadline of one Redis command"),
    GP_CFG_UINT("pg-timeout-ms", gp_common_cfg, pg_timeout_ms, 5000, 10, 600000, "deadline of one PostgreSQL query"),
    GP_CFG_UINT("pg-pool", gp_common_cfg, pg_pool, 4, 1, 64, "PostgreSQL connections per service"),
    GP_CFG_UINT("drain-ms", gp_common_cfg, drain_ms, 5000, 0, 600000, "shutdown waits this long for in-flight requests"),
    GP_CFG_UINT("presence-ms", gp_common_cfg, presence_ms, 5000, 0, 600000, "the instance says it is there (gp.int.presence.<service>) this often; 0: never"),
    GP_CFG_UINT("stream-replicas", gp_common_cfg, stream_replicas, 1, 1, GP_STREAM_REPLICAS_MAX, "replicas of every JetStream stream this service declares: 1 on one nats-server, 3 on a 3-server cluster (never lowers a stream's own)"),
    GP_CFG_STR("stream-max-bytes-mb", gp_common_cfg, stream_max_bytes_mb, "", "byte limits of the streams in MiB, NAME=MB,...,*=MB (\"\": each stream's default, README; never lowers a stream's own)"),
    GP_CFG_BOOL("print-routes", gp_common_cfg, print_routes, 0, "print the operations this service serves (service, operation id, subject pattern) and exit"),
    GP_CFG_UINT("http-timeout-ms", gp_common_cfg, http_timeout_ms, 5000, 100, 600000, "an HTTP client must send its request within this, then take the answer within this again, or it is closed"),
    GP_CFG_UINT("tenant-rate", gp_common_cfg, tenant_rate, 1000, 0, 1000000, "requests a second one tenant may make on its API (gp.api.<tenant>.>) to this instance; past it RATE_LIMITED (0: no rate limit)"),
    GP_CFG_UINT("tenant-burst", gp_common_cfg, tenant_burst, 2000, 0, 1000000, "requests a tenant may make at once above tenant-rate (its token bucket)"),
    GP_CFG_UINT("tenant-inflight", gp_common_cfg, tenant_inflight, 1024, 0, GP_MAX_INFLIGHT, "requests of one tenant in flight at once in this instance, of its GP_MAX_INFLIGHT shared slots (0: no cap)"),
    GP_CFG_STR("tenant-limits", gp_common_cfg, tenant_limits, "", "per-tenant overrides, space or comma separated: tenant=rate/burst/inflight, an empty field keeping the default (acme=100/200/50 beta=5//)"),
    GP_CFG_END
};



/* ---- replies ------------------------------------------------------------ */

static void
count_error(op_rt *o, gp_err rc)
{
    char      labels[GP_MAX_SUBJECT + 64];
    uint64_t *c;

    snprintf(labels, sizeof(labels), "route=\"%s\",code=\"%s\"", o->op->pattern, gp_err_name(rc));
    c = gp_metrics_counter(o->app->metrics, "gp_request_errors_total", labels,
                           "Requests that ended in an error, by route and code");
    if (c != NULL)
        (*c)++;
    (*o->errors)++;
}

static void
log_bad(op_rt *o, const char *subject, gp_err rc, const char *detail)
{
    double t = gp_mono_s();

    if (t - o->last_log < LOG_EVERY_S) {
        o->suppressed++;
        return;
    }
    GP_WARN("request_rejected", "route=%s subject=%s code=%s detail=\"%s\" suppressed=%llu",
            o->op->pattern, subject, gp_err_name(rc), detail, (unsigned long long)o->suppressed);
    o->last_log = t;
    o->suppressed = 0;
}

static bool
bad_input(gp_err rc)
{
    return rc == GP_EDECODE || rc == GP_ETYPE || rc == GP_EMISSING || rc == GP_ERANGE ||
           rc == GP_ETOOBIG;
}

/* retry_ms: RATE_LIMITED's hint (0: none). */
static void
send_error(gp_app *app, const char *reply, gp_err rc, const char *detail, unsigned retry_ms)
{
    gp_buf b;

    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    if (gp_msg_encode_error_retry(rc, detail && *detail ? detail : gp_err_str(rc), retry_ms,
                                  &b) == GP_EOK)
        gp_bus_pub(app->bus, reply, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

static void durable_end(gp_req *req, gp_err rc);

static void
send_reply(gp_req *req, gp_err rc)
{
    op_rt  *o = req->o;
    gp_buf *b;

    req->replied = true;
    gp_hist_observe(o->latency, gp_mono_s() - req->t0);
    if (rc != GP_EOK) {
        count_error(o, rc);
        if (o->op->out == NULL || bad_input(rc))
            log_bad(o, req->subject, rc, req->detail);
    }
    if (req->jm != NULL) {
        durable_end(req, rc);
        return;
    }
    if (req->reply[0] == '\0' || o->op->out == NULL)
        return;
    if (rc != GP_EOK) {
        send_error(req->app, req->reply, rc, req->detail, 0);
        return;
    }
    b = &req->app->reply_buf;
    if (b->max == 0)
        gp_buf_init(b, GP_MAX_MSG_BYTES);
    gp_buf_reset(b);
    rc = gp_msg_encode(o->op->out, req->out, b);
    if (rc == GP_EOK) {
        gp_bus_pub(req->app->bus, req->reply, NULL, b->p, b->n);   /* copies the bytes */
    } else {
        count_error(o, rc);
        GP_ERROR("reply_encode_failed", "route=%s code=%s", o->op->pattern, gp_err_name(rc));
        send_error(req->app, req->reply, rc, "reply could not be encoded", 0);
    }
    if (b->cap > REPLY_BUF_KEEP)
        gp_buf_fini(b);
}

static void
req_free(gp_req *req)
{
    op_rt *o = req->o;

    if (req->in != NULL)
        gp_msg_clear(o->op->in, req->in);
    if (req->out != NULL && o->op->out != NULL)
        gp_msg_clear(o->op->out, req->out);
    if (req->tslot >= 0)
        gp_tlimits_end(req->app->tlimits, req->tslot);
    if (o->nspare < REQ_SPARES) {
        req->next = o->spare;
        o->spare = req;
        o->nspare++;
    } else {
        free(req);
    }
}

static void maybe_finish_drain(gp_app *app);

static void
unlink_pending(gp_req *req)
{
    gp_app *app = req->app;

    if (req->prev != NULL)
        req->prev->next = req->next;
    else
        app->pending = req->next;
    if (req->next != NULL)
        req->next->prev = req->prev;
    app->inflight--;
}

void
gp_req_done(gp_req *req, gp_err rc)
{
    gp_app *app = req->app;

    if (req->pending) {
        ev_timer_stop(app->loop, &req->deadline);
        unlink_pending(req);
    }
    if (!req->replied)
        send_reply(req, rc);
    req_free(req);
    if (app->stopping)
        maybe_finish_drain(app);
}

static unsigned
route_timeout_ms(const gp_app *app, const gp_route *r)
{
    return r->timeout_ms ? r->timeout_ms : app->cfg.request_timeout_ms;
}

static void
deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    gp_req *req = GP_CONTAINER_OF(w, gp_req, deadline);

    (void)loop;
    (void)revents;
    snprintf(req->detail, sizeof(req->detail), "no result within %u ms",
             route_timeout_ms(req->app, req->r));
    send_reply(req, GP_ETIMEOUT);      /* the handler still ends it with gp_req_done */
}

/* ---- durable routes: ack, nak or dead letter ------------------------------ */

static const gp_durable *
dur(const gp_req *req)
{
    return req->r->durable;
}

static bool
transient(gp_err rc)
{
    return rc == GP_EUNAVAIL || rc == GP_ETIMEOUT || rc == GP_ENOMEM || rc == GP_EINTERNAL ||
           rc == GP_ECONFLICT;
}

static unsigned
max_deliver(const gp_durable *d)
{
    return d->max_deliver ? d->max_deliver : 5;
}

/* The dead letter is stored first and the message terminated only once
 * the DLQ stream has it: if the copy fails the message is nak'ed and
 * comes back, so nothing accepted is lost. */
typedef struct dead {
    gp_app   *app;
    op_rt    *o;
    gp_jsmsg *jm;
} dead;

static void
dead_stored(void *arg, gp_err err)
{
    dead *d = arg;

    if (err == GP_EOK) {
        (*d->o->dead)++;
        gp_jsmsg_term(d->jm);
    } else {
        GP_WARN("dead_letter_failed", "route=%s code=%s action=nak", d->o->op->pattern,
                gp_err_name(err));
        gp_jsmsg_nak(d->jm, 5000);
    }
    free(d);
}

static uint64_t
fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void
dead_letter(gp_req *req, gp_err rc)
{
    gp_app       *app = req->app;
    const char   *data = gp_jsmsg_data(req->jm);
    size_t        len = gp_jsmsg_len(req->jm);
    msg_dead_letter m = {0};
    char          subject[GP_MAX_SUBJECT + 1], id[64];
    const char   *args[2] = {app->service, dur(req)->name};
    gp_buf        b;
    dead         *d = malloc(sizeof(*d));
    gp_err        e;

    snprintf(m.service, sizeof(m.service), "%s", app->service);
    snprintf(m.instance, sizeof(m.instance), "%s", app->instance);
    snprintf(m.stream, sizeof(m.stream), "%s", dur(req)->stream);
    snprintf(m.consumer, sizeof(m.consumer), "%s", dur(req)->name);
    snprintf(m.subject, sizeof(m.subject), "%s", req->subject);
    snprintf(m.code, sizeof(m.code), "%s", gp_err_name(rc));
    snprintf(m.detail, sizeof(m.detail), "%s", req->detail);
    m.deliveries = req->deliveries;
    m.at_ms = (int64_t)gp_wall_ms();
    m.truncated = len > MSG_DEAD_LETTER_DATA_MAXLEN;
    m.data.p = (uint8_t *)(uintptr_t)data;
    m.data.n = m.truncated ? MSG_DEAD_LETTER_DATA_MAXLEN : len;
    m.has = ~0ull;
    /* Stable id: a copy stored twice (crash before term) is stored once. */
    snprintf(id, sizeof(id), "dlq-%016llx",
             (unsigned long long)fnv1a(fnv1a(fnv1a(0xcbf29ce484222325ull, m.consumer,
                                                   strlen(m.consumer)),
                                             m.subject, strlen(m.subject)), data, len));
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    e = d == NULL ? GP_ENOMEM : gp_op_subject(GP_OP_DEAD_LETTER, subject, sizeof(subject), args);
    if (e == GP_EOK)
        e = gp_msg_encode(&msg_dead_letter_desc, &m, &b);
    if (e == GP_EOK) {
        d->app = app;
        d->o = req->o;
        d->jm = req->jm;
        e = gp_bus_js_pub(app->bus, subject, id, b.p, b.n, dead_stored, d);
    }
    gp_buf_fini(&b);
    GP_WARN("dead_letter", "route=%s consumer=%s code=%s deliveries=%llu detail=\"%s\"",
            req->o->op->pattern, m.consumer, m.code, (unsigned long long)req->deliveries,
            req->detail);
    if (e != GP_EOK) {
        free(d);
        gp_jsmsg_nak(req->jm, 5000);
    }
}

static void
durable_end(gp_req *req, gp_err rc)
{
    const gp_durable *d = dur(req);
    gp_jsmsg         *jm = req->jm;

    req->jm = NULL;
    if (rc == GP_EOK || rc == GP_EEXISTS) {        /* EXISTS: done before, idempotently */
        gp_jsmsg_ack(jm);
        return;
    }
    if (transient(rc) && req->deliveries < max_deliver(d)) {
        gp_jsmsg_nak(jm, gp_backoff_nak_ms(d->backoff_ms ? d->backoff_ms : 500,
                                           d->backoff_max_ms ? d->backoff_max_ms : 60000,
                                           req->deliveries));
        return;
    }
    req->jm = jm;
    dead_letter(req, rc);
    req->jm = NULL;
}

/* ---- dispatch ----------------------------------------------------------- */

static void
tokenize(gp_req *req)
{
    char *p = req->toks;

    memcpy(req->toks, req->subject, strlen(req->subject) + 1);
    req->ntok = 0;
    while (p != NULL && req->ntok < GP_MAX_TOKENS) {
        req->tok[req->ntok++] = p;
        p = strchr(p, '.');
        if (p != NULL)
            *p++ = '\0';
    }
}

/* dst = src, cut to cap - 1 bytes as snprintf("%s") would. */
static void
copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);

    memcpy(dst, src, n);
    dst[n] = '\0';
}

static gp_req *
req_new(sub_rt *s, const char *subject, const char *reply)
{
    op_rt       *o = s->o;
    const gp_op *op = o->op;
    size_t       in_sz = op->in->size, out_sz = op->out ? op->out->size : 0;
    size_t       base = (sizeof(gp_req) + 15) & ~(size_t)15;
    size_t       in_al = (in_sz + 15) & ~(size_t)15;
    size_t       total = base + in_al + out_sz;
    gp_req      *req = o->spare;

    if (req != NULL) {
        o->spare = req->next;
        o->nspare--;
    } else if ((req = malloc(total)) == NULL) {
        return NULL;
    }
    /* zeroed as calloc would, but for the three subject buffers, which are
     * written just below */
    memset(req, 0, offsetof(gp_req, reply));
    memset((char *)req + offsetof(gp_req, tok), 0, total - offsetof(gp_req, tok));
    req->app = s->app;
    req->o = s->o;
    req->r = s->r;
    req->data = s->data;
    req->tslot = -1;
    req->deliveries = 1;
    req->in = (char *)req + base;
    req->out = out_sz ? (char *)req + base + in_al : NULL;
    copy_str(req->subject, sizeof(req->subject), subject);
    copy_str(req->reply, sizeof(req->reply),
             reply != NULL && !(s->r->flags & GP_R_OVERHEAR) ? reply : "");
    tokenize(req);
    return req;
}

/* A request we cannot even allocate or accept: answer without a gp_req. */
static void
reject(sub_rt *s, const gp_bus_msg *m, gp_err rc, const char *detail, unsigned retry_ms)
{
    count_error(s->o, rc);
    log_bad(s->o, m->subject, rc, detail);
    if (m->reply != NULL && s->o->op->out != NULL && !(s->r->flags & GP_R_OVERHEAR))
        send_error(s->app, m->reply, rc, detail, retry_ms);
}

/* ---- per-tenant limits (gp/ratelimit.h) ------------------------------------ */

static uint64_t *
limited_other(gp_app *app)
{
    limit_series *ls = &app->limited[LIMIT_SERIES];

    if (ls->count == NULL)
        ls->count = gp_metrics_counter(app->metrics, "gp_tenant_limited_total",
                                       "tenant=\"" GP_TLIMIT_OTHER "\"",
                                       "Requests refused RATE_LIMITED, by tenant");
    return ls->count != NULL ? ls->count : &app->spare_counter;
}

/* The counter of a refused tenant: its own series for the first
 * LIMIT_SERIES tenants refused, then one shared "_other" (also for a
 * subject token that is not an id, which must not reach a label). */
static uint64_t *
limited_series(gp_app *app, const char *tenant)
{
    limit_series *ls;
    char          labels[GP_MAX_ID + 16];
    int           i;

    for (i = 0; i < app->nlimited; i++)
        if (strcmp(app->limited[i].tenant, tenant) == 0)
            return app->limited[i].count;
    ls = &app->limited[app->nlimited];
    if (app->nlimited == LIMIT_SERIES || !gp_id_ok(tenant))
        return limited_other(app);
    snprintf(ls->tenant, sizeof(ls->tenant), "%s", tenant);
    snprintf(labels, sizeof(labels), "tenant=\"%s\"", tenant);
    ls->count = gp_metrics_counter(app->metrics, "gp_tenant_limited_total", labels,
                                   "Requests refused RATE_LIMITED, by tenant");
    if (ls->count == NULL)
        return &app->spare_counter;
    app->nlimited++;
    return ls->count;
}

/* A request of the tenant of entry slot, over its rate or in-flight cap:
 * the detail and the hint of its RATE_LIMITED reply. */
static unsigned
limited_detail(gp_app *app, op_rt *o, int slot, gp_tl_verdict v, unsigned retry_ms,
               char *detail, size_t n)
{
    const gp_tlimit_cfg *c = gp_tlimits_cfg(app->tlimits, slot);
    const char          *who = gp_tlimits_name(app->tlimits, slot);

    if (v == GP_TL_RATE) {
        snprintf(detail, n, "tenant %s is over its request rate (%u/s, burst %u)", who, c->rate,
                 c->burst);
        return retry_ms;
    }
    snprintf(detail, n, "tenant %s has %u requests in flight, its limit", who, c->inflight);
    /* when one of them is likely to have ended: the route's median time */
    retry_ms = (unsigned)(gp_hist_quantile(o->latency, 0.5) * 1000);
    return retry_ms < 10 ? 10 : retry_ms > 5000 ? 5000 : retry_ms;
}

/* Checks the request's tenant before it takes a shared in-flight slot;
 * false when it was refused (answered RATE_LIMITED), else *slot is its
 * entry for gp_tlimits_end. */
static bool
tenant_admit(sub_rt *s, const gp_bus_msg *m, int *slot)
{
    gp_app       *app = s->app;
    const char   *p = m->subject;
    char          tenant[GP_MAX_ID + 1], detail[GP_ERRBUF_LEN];
    size_t        len;
    unsigned      retry_ms;
    gp_tl_verdict v;

    for (int i = 0; i < s->o->limit_tok && p != NULL; i++)
        if ((p = strchr(p, '.')) != NULL)
            p++;
    if (p == NULL)
        return true;                       /* cannot happen: the subject matched the op */
    len = strcspn(p, ".");
    copy_str(tenant, len < sizeof(tenant) ? len + 1 : sizeof(tenant), p);
    v = gp_tlimits_admit(app->tlimits, tenant, (int64_t)gp_mono_ms(), slot, &retry_ms);
    if (v == GP_TL_OK)
        return true;
    (*app->m_limited[v - GP_TL_RATE])++;
    (*limited_series(app, gp_tlimits_name(app->tlimits, *slot)))++;
    retry_ms = limited_detail(app, s->o, *slot, v, retry_ms, detail, sizeof(detail));
    *slot = -1;
    reject(s, m, GP_ERATE_LIMITED, detail, retry_ms);
    return false;
}

/* Decodes and runs the handler; a request that ends at once is finished
 * here, a PENDING one gets its deadline. */
static void
dispatch(gp_req *req, const void *data, size_t len)
{
    gp_app *app = req->app;
    gp_err  rc;

    req->t0 = gp_mono_s();
    rc = gp_msg_decode(req->o->op->in, data, len, req->in, req->detail, sizeof(req->detail));
    req->body = data;
    req->body_len = len;
    if (rc == GP_EOK)
        rc = req->r->fn(req, req->in, req->out);
    req->body = NULL;
    if (rc != GP_EPENDING) {
        if (!req->replied)
            send_reply(req, rc);
        req_free(req);
        return;
    }
    req->pending = true;
    req->next = app->pending;
    if (app->pending != NULL)
        app->pending->prev = req;
    app->pending = req;
    app->inflight++;
    ev_timer_init(&req->deadline, deadline_cb, route_timeout_ms(app, req->r) / 1000.0, 0);
    ev_timer_start(app->loop, &req->deadline);
}

static void
on_msg(void *arg, const gp_bus_msg *m)
{
    sub_rt *s = arg;
    gp_app *app = s->app;
    gp_req *req;
    char    detail[GP_ERRBUF_LEN];
    int     tslot = -1;

    (*s->o->calls)++;
    if (m->len > GP_MAX_MSG_BYTES) {
        snprintf(detail, sizeof(detail), "body of %zu bytes exceeds the limit of %d", m->len,
                 GP_MAX_MSG_BYTES);
        reject(s, m, GP_ETOOBIG, detail, 0);
        return;
    }
    if (s->o->limit_tok >= 0 && !tenant_admit(s, m, &tslot))
        return;
    if (app->inflight >= GP_MAX_INFLIGHT || app->stopping) {
        (*app->m_inflight_rejects)++;
        gp_tlimits_end(app->tlimits, tslot);
        reject(s, m, GP_EUNAVAIL, app->stopping ? "shutting down" : "too many requests in flight",
               0);
        return;
    }
    req = req_new(s, m->subject, m->reply);
    if (req == NULL) {
        gp_tlimits_end(app->tlimits, tslot);
        reject(s, m, GP_ENOMEM, "out of memory", 0);
        return;
    }
    req->tslot = tslot;
    dispatch(req, m->data, m->len);
}

static void
on_js(void *arg, gp_jsmsg *jm)
{
    sub_rt *s = arg;
    gp_app *app = s->app;
    gp_req *req;

    (*s->o->calls)++;
    if (app->stopping) {                       /* redelivered to whoever runs next */
        gp_jsmsg_nak(jm, 0);
        return;
    }
    req = req_new(s, gp_jsmsg_subject(jm), NULL);
    if (req == NULL) {
        count_error(s->o, GP_ENOMEM);
        gp_jsmsg_nak(jm, 1000);
        return;
    }
    req->jm = jm;
    req->deliveries = gp_jsmsg_delivered(jm);
    if (req->deliveries > max_deliver(s->r->durable)) {
        /* redelivered past the limit by ack-wait expiries: give up on it */
        snprintf(req->detail, sizeof(req->detail), "delivered %llu times (max %u)",
                 (unsigned long long)req->deliveries, max_deliver(s->r->durable));
        req->t0 = gp_mono_s();
        send_reply(req, GP_ETIMEOUT);
        req_free(req);
        return;
    }
    dispatch(req, gp_jsmsg_data(jm), gp_jsmsg_len(jm));
}

/* ---- request accessors ---------------------------------------------------- */

gp_app *gp_req_app(gp_req *req) { return req->app; }
void *gp_req_state(gp_req *req) { return req->app->state; }
void *gp_req_data(gp_req *req) { return req->data; }
const gp_op *gp_req_op(const gp_req *req) { return req->o->op; }
const char *gp_req_subject(const gp_req *req) { return req->subject; }
int gp_req_ntokens(const gp_req *req) { return req->ntok; }
void *gp_req_out(gp_req *req) { return req->out; }
const void *gp_req_in(gp_req *req) { return req->in; }
uint64_t gp_req_deliveries(const gp_req *req) { return req->deliveries; }

bool gp_req_answered(const gp_req *req) { return req->replied; }

const void *
gp_req_body(const gp_req *req, size_t *len)
{
    *len = req->body_len;
    return req->body;
}

const char *
gp_req_token(const gp_req *req, int i)
{
    return i >= 0 && i < req->ntok ? req->tok[i] : "";
}

const char *
gp_req_param(const gp_req *req, const char *name)
{
    int i = gp_op_param_index(req->o->op, name);

    return i < 0 ? "" : gp_req_token(req, req->o->op->param_tok[i]);
}

gp_err
gp_req_drop(gp_req *req)
{
    req->replied = true;
    if (req->jm != NULL) {                   /* left to the ack wait: redelivered */
        gp_jsmsg_nak(req->jm, 0);
        req->jm = NULL;
    }
    return GP_EOK;
}

gp_err
gp_req_fail(gp_req *req, gp_err code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(req->detail, sizeof(req->detail), fmt, ap);
    va_end(ap);
    return code;
}

/* ---- health and metrics --------------------------------------------------- */

static int32_t
dep_state(bool needed, bool up)
{
    if (!needed)
        return MSG_HEALTH_NATS_UNUSED;
    return up ? MSG_HEALTH_NATS_UP : MSG_HEALTH_NATS_DOWN;
}

static void
fill_health(gp_app *app, msg_health *h, bool verbose)
{
    snprintf(h->service, sizeof(h->service), "%s", app->service);
    snprintf(h->instance, sizeof(h->instance), "%s", app->instance);
    snprintf(h->version, sizeof(h->version), "%s", app->version);
    h->uptime_s = (uint64_t)(gp_mono_s() - app->started);
    h->nats = dep_state(true, gp_bus_is_connected(app->bus));
    h->redis = dep_state(app->kv != NULL, app->kv && gp_kv_is_connected(app->kv));
    h->pg = dep_state(app->db != NULL, app->db && gp_db_is_connected(app->db));
    if (!verbose)
        return;
    h->routes.v = calloc((size_t)app->nops, sizeof(msg_route_stats));
    if (h->routes.v == NULL)
        return;
    for (int i = 0; i < app->nops; i++) {
        msg_route_stats *s = (msg_route_stats *)h->routes.v + h->routes.n++;
        op_rt           *o = &app->ops[i];

        snprintf(s->subject, sizeof(s->subject), "%s", o->op->pattern);
        s->calls = *o->calls;
        s->errors = *o->errors;
        s->p50_us = (uint64_t)(gp_hist_quantile(o->latency, 0.5) * 1e6);
        s->p99_us = (uint64_t)(gp_hist_quantile(o->latency, 0.99) * 1e6);
    }
}

static gp_err
on_health(gp_req *req, const void *in, void *out)
{
    const msg_health_request *q = in;

    fill_health(req->app, out, q->verbose);
    return GP_EOK;
}

static bool
deps_up(gp_app *app)
{
    return gp_bus_is_connected(app->bus) && (app->kv == NULL || gp_kv_is_connected(app->kv)) &&
           (app->db == NULL || gp_db_is_connected(app->db));
}

static void
collect(void *arg)
{
    gp_app      *app = arg;
    gp_bus_stats bs;

    gp_bus_get_stats(app->bus, &bs);
    *app->m_bus_dropped = bs.dropped;
    *app->m_bus_dropped_bytes = bs.dropped_bytes;
    *app->m_bus_nats_dropped = bs.nats_dropped;
    *app->m_bus_js_refused = bs.js_refused;
    *app->m_bus_reconnects = bs.reconnects;
    *app->m_bus_js_full = bs.js_full;
    *app->m_up_nats = gp_bus_is_connected(app->bus);
    *app->m_inflight = app->inflight;
    if (app->kv != NULL) {
        gp_kv_stats ks;

        gp_kv_get_stats(app->kv, &ks);
        *app->m_kv_timeouts = ks.timeouts;
        *app->m_kv_reconnects = ks.reconnects;
        *app->m_kv_errors = ks.errors;
        *app->m_kv_moved = ks.moved;
        *app->m_kv_ask = ks.ask;
        *app->m_kv_tryagain = ks.tryagain;
        *app->m_kv_crossslot = ks.crossslot;
        *app->m_up_redis = gp_kv_is_connected(app->kv);
    }
    if (app->db != NULL) {
        gp_db_stats ds;

        gp_db_get_stats(app->db, &ds);
        *app->m_db_timeouts = ds.timeouts;
        *app->m_db_reconnects = ds.reconnects;
        *app->m_db_errors = ds.errors;
        *app->m_up_pg = gp_db_is_connected(app->db);
    }
    if (app->http != NULL) {
        gp_http_stats hs;

        gp_http_get_stats(app->http, &hs);
        *app->m_http_clients = hs.clients;
        *app->m_http_accepted = hs.accepted;
        *app->m_http_refused = hs.refused;
        *app->m_http_evicted = hs.evicted;
        *app->m_http_probe_only = hs.probe_only;
        *app->m_http_timeouts[0] = hs.read_timeouts;
        *app->m_http_timeouts[1] = hs.write_timeouts;
    }
    *app->m_tenant_overflows = gp_tlimits_overflows(app->tlimits);
}

static gp_err
on_http(void *arg, const char *path, gp_buf *body, const char **ctype)
{
    gp_app *app = arg;

    if (strcmp(path, "/metrics") == 0)
        return gp_metrics_render(app->metrics, body);
    if (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0) {
        msg_health h = {0};
        gp_err     rc;

        fill_health(app, &h, true);
        *ctype = "application/json";
        rc = gp_msg_to_json(&msg_health_desc, &h, body);
        gp_msg_clear(&msg_health_desc, &h);
        if (rc != GP_EOK)
            return rc;
        /* /healthz: the loop answers (a liveness probe restarts a process
         * only for that); /readyz: and NATS, Redis, PostgreSQL are up (a
         * readiness probe takes it out of service meanwhile, no restart
         * storm when a dependency is down). */
        return path[1] == 'h' || deps_up(app) ? GP_EOK : GP_EUNAVAIL;
    }
    return GP_ENOTFOUND;
}

static const char *const http_deadlines[] = {"read", "write"};
static const char *const limit_reasons[] = {"rate", "inflight"};    /* GP_TL_RATE - 1, ... */

static void
register_metrics(gp_app *app)
{
    gp_metrics *m = app->metrics;
    uint64_t   *dc = &app->spare_counter;    /* only past GP_MAX_METRICS */
    double     *dg = &app->spare_gauge;

#define C(var, name, help) do { app->var = gp_metrics_counter(m, name, NULL, help); \
        if (app->var == NULL) app->var = dc; } while (0)
#define G(var, name, help) do { app->var = gp_metrics_gauge(m, name, NULL, help); \
        if (app->var == NULL) app->var = dg; } while (0)
    C(m_inflight_rejects, "gp_request_rejected_total", "Requests refused: in-flight cap or shutdown");
    C(m_bus_dropped, "gp_bus_dropped_total", "Messages dropped at the full loop inbox");
    C(m_bus_dropped_bytes, "gp_bus_dropped_bytes_total", "Of gp_bus_dropped_total: dropped at the inbox's byte bound");
    C(m_bus_nats_dropped, "gp_bus_nats_dropped_total", "Messages the NATS client dropped at a subscription's pending limits");
    C(m_bus_js_refused, "gp_bus_js_refused_total", "JetStream publishes refused: the worker's queue full (count or bytes)");
    C(m_bus_reconnects, "gp_bus_reconnects_total", "NATS reconnects");
    C(m_bus_js_full, "gp_bus_js_full_total",
      "JetStream publishes refused for a full stream or store (kept by their outbox)");
    C(m_kv_timeouts, "gp_redis_timeouts_total", "Redis commands past their deadline");
    C(m_kv_reconnects, "gp_redis_reconnects_total", "Redis reconnects");
    C(m_kv_errors, "gp_redis_errors_total", "Redis commands that failed");
    C(m_kv_moved, "gp_redis_cluster_moved_total", "Redis Cluster MOVED redirections followed");
    C(m_kv_ask, "gp_redis_cluster_ask_total", "Redis Cluster ASK redirections followed");
    C(m_kv_tryagain, "gp_redis_cluster_tryagain_total", "Redis Cluster TRYAGAIN/CLUSTERDOWN retries");
    C(m_kv_crossslot, "gp_redis_cluster_crossslot_total", "Redis commands refused: keys in several slots");
    C(m_db_timeouts, "gp_pg_timeouts_total", "PostgreSQL queries past their deadline");
    C(m_db_reconnects, "gp_pg_reconnects_total", "PostgreSQL reconnects");
    C(m_db_errors, "gp_pg_errors_total", "PostgreSQL queries that failed");
    C(m_http_accepted, "gp_http_accepted_total", "HTTP connections accepted");
    C(m_http_refused, "gp_http_refused_total", "HTTP connections closed at once: every slot busy answering");
    C(m_http_evicted, "gp_http_evicted_total", "HTTP connections closed to make room while still sending their request");
    C(m_http_probe_only, "gp_http_probe_only_total", "HTTP requests answered 503 in a slot kept for /healthz and /readyz");
    C(m_tenant_overflows, "gp_tenant_limit_overflows_total", "Tenants limited together as _other: the table of tenants was full");
    G(m_http_clients, "gp_http_clients", "HTTP connections open");
    G(m_inflight, "gp_requests_inflight", "Requests accepted and not yet answered");
    G(m_up_nats, "gp_nats_up", "1 when connected to NATS");
    G(m_up_redis, "gp_redis_up", "1 when connected to Redis");
    G(m_up_pg, "gp_pg_up", "1 when a PostgreSQL connection is ready");
#undef C
#undef G
    gp_metrics_counters(m, "gp_http_timeouts_total", "deadline", http_deadlines, 2,
                        "HTTP connections closed at a deadline: no whole request (read), the "
                        "answer not taken (write)", app->m_http_timeouts);
    gp_metrics_counters(m, "gp_tenant_limited_reason_total", "reason", limit_reasons, 2,
                        "Requests refused RATE_LIMITED: over the tenant's rate, or its "
                        "in-flight cap", app->m_limited);
    for (int i = 0; i < 2; i++) {
        if (app->m_http_timeouts[i] == NULL)
            app->m_http_timeouts[i] = dc;
        if (app->m_limited[i] == NULL)
            app->m_limited[i] = dc;
    }
}

/* ---- lifecycle ------------------------------------------------------------ */

static void
on_bus_conn(void *arg, bool up)
{
    gp_app *app = arg;

    GP_INFO(up ? "nats_up" : "nats_down", "service=%s", app->service);
    if (app->conn_fn != NULL)
        app->conn_fn(app->conn_arg, up);
}

static void
signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    gp_app *app = w->data;

    (void)loop;
    (void)revents;
    GP_INFO("signal", "signum=%d action=drain", w->signum);
    gp_app_stop(app);
}

/* The database's schema is newer than this build (gp/db.h): stop. */
static void
on_db_refused(void *arg, gp_err err, const char *detail)
{
    gp_app *app = arg;

    (void)detail;                           /* db.c logged it (pg_schema_refused) */
    GP_ERROR("start_refused", "code=%s", gp_err_name(err));
    gp_app_fail(app, err);
}

/* The password of redis-password-file: its first line, read once at
 * start, before the loop runs. */
static gp_err
read_secret_file(const char *path, char *out, size_t outlen)
{
    gp_err rc = gp_cfg_read_secret(path, out, outlen);

    if (rc != GP_EOK || out[0] == '\0') {
        GP_ERROR("secret_file_bad", "path=%s detail=\"%s\"", path,
                 rc == GP_ENOTFOUND ? "unreadable" : "empty, or longer than the buffer");
        return GP_EINVAL;
    }
    return GP_EOK;
}

/* Redis as this service's own ACL user, when one is configured. */
static gp_err
connect_kv(gp_app *app)
{
    const gp_common_cfg *c = &app->cfg;
    char                 user[sizeof(c->redis_user) + 64], path[sizeof(c->redis_password_file) + 64];
    char                 pw[sizeof(c->redis_password)];
    gp_kv_opts           ko = {.host = c->redis_host, .port = c->redis_port,
                               .command_timeout_ms = c->redis_timeout_ms,
                               .cluster = c->redis_cluster, .seeds = c->redis_seeds,
                               .user = user, .password = pw};
    gp_err               rc;

    if (gp_cfg_subst_service(c->redis_user, app->service, user, sizeof(user)) != GP_EOK ||
        gp_cfg_subst_service(c->redis_password_file, app->service, path, sizeof(path)) != GP_EOK)
        return GP_EINVAL;
    snprintf(pw, sizeof(pw), "%s", c->redis_password);
    if (pw[0] == '\0' && path[0] != '\0' && (rc = read_secret_file(path, pw, sizeof(pw))) != GP_EOK)
        return rc;
    if (user[0] != '\0' && pw[0] == '\0') {
        GP_ERROR("redis_user_without_password", "user=%s", user);
        return GP_EINVAL;
    }
    rc = gp_kv_new(app->loop, &ko, NULL, NULL, &app->kv);
    explicit_bzero(pw, sizeof(pw));        /* the client keeps its own copy */
    return rc;
}

/* The role the service logs in as: pg-user with {service} replaced, else
 * pg-conninfo's user ("" when neither names one). */
static gp_err
pg_login(const char *service, const gp_common_cfg *c, char *out, size_t cap)
{
    gp_err rc;

    if (c->pg_user[0] == '\0')
        return gp_db_conninfo_get(c->pg_conninfo, "user", out, cap);   /* bad: gp_db_new says */
    rc = gp_dbrole_expand(out, cap, c->pg_user, service);
    if (rc != GP_EOK)
        GP_ERROR("pg_user_bad", "service=%s err=%s detail=\"pg-user must make a role name of "
                 "[a-z0-9_] (e.g. gridpool_{service})\"", service, gp_err_name(rc));
    return rc;
}

/* The roles mode's login and password: pg-conninfo's password, if it has
 * one, is set on the login (so the deployment's secret of the service is
 * the only place it is kept). */
typedef struct pg_login_pw {
    char login[64];
    char password[256];
} pg_login_pw;

/* The migration phase's options (gp_db_migrate): the roles mode on
 * pg-migrate-conninfo, else the steps alone on pg-conninfo as login.  r,
 * o and lp (login filled) are the caller's; INVAL when the roles mode has
 * no login. */
static gp_err
migrate_opts(const char *service, const gp_common_cfg *c, const gp_migration *migrations,
             const gp_grant *grants, pg_login_pw *lp, gp_db_roles *r, gp_db_opts *o)
{
    const char *login = lp->login;

    *o = (gp_db_opts){.conninfo = c->pg_conninfo, .user = login, .migrations = migrations,
                      .service = service, .app_name = "gridpool-migrate"};
    if (c->pg_migrate_conninfo[0] == '\0')
        return GP_EOK;
    if (login[0] == '\0') {
        GP_ERROR("pg_user_bad", "service=%s err=INVAL detail=\"pg-migrate-conninfo needs the "
                 "role the service logs in as: pg-user (e.g. gridpool_{service}) or a user in "
                 "pg-conninfo\"", service);
        return GP_EINVAL;
    }
    if (gp_db_conninfo_get(c->pg_conninfo, "password", lp->password, sizeof(lp->password)) !=
        GP_EOK)
        lp->password[0] = '\0';            /* a bad conninfo: the pool says so */
    *r = (gp_db_roles){.owner = GP_DB_OWNER_ROLE, .login = login, .grants = grants,
                       .password = lp->password};
    o->conninfo = c->pg_migrate_conninfo;
    o->user = NULL;
    o->roles = r;
    return GP_EOK;
}

/* The migrator is done: the pool, held until now, logs in as the service's
 * role; or the start fails (logged: pg_migrate_failed, pg_schema_refused). */
static void
on_migrated(void *arg, gp_err err, const char *detail)
{
    gp_app *app = arg;

    (void)detail;
    gp_db_free(app->migrator);              /* deferred to the end of db.c's callback */
    app->migrator = NULL;
    if (err != GP_EOK) {
        GP_ERROR("start_refused", "code=%s", gp_err_name(err));
        gp_app_fail(app, err);
        return;
    }
    gp_db_start(app->db);
}

/* The service's pool; in the roles mode (pg-migrate-conninfo) held until
 * the migrator, started here, has migrated, then only checking. */
static gp_err
connect_pg(gp_app *app, const gp_migration *migrations, const gp_grant *grants)
{
    const gp_common_cfg *c = &app->cfg;
    bool                 roles = c->pg_migrate_conninfo[0] != '\0';
    pg_login_pw          lp = {.login = ""};
    const char          *login = lp.login;
    char                 name[48];
    gp_db_roles          r;
    gp_db_opts           mo;
    gp_err               rc = pg_login(app->service, c, lp.login, sizeof(lp.login));

    snprintf(name, sizeof(name), "gridpool-%s", app->service);
    if (rc == GP_EOK && roles)
        rc = migrate_opts(app->service, c, migrations, grants, &lp, &r, &mo);
    if (rc == GP_EOK) {
        gp_db_opts dopt = {.conninfo = c->pg_conninfo, .pool_size = c->pg_pool,
                           .query_timeout_ms = c->pg_timeout_ms, .migrations = migrations,
                           .service = app->service, .fail_cb = on_db_refused, .fail_arg = app,
                           .user = login, .app_name = name,
                           .check_only = roles || !c->pg_migrate, .held = roles};
        rc = gp_db_new(app->loop, &dopt, NULL, NULL, &app->db);
    }
    if (rc == GP_EOK && roles)
        rc = gp_db_migrate(app->loop, &mo, on_migrated, app, &app->migrator);
    explicit_bzero(lp.password, sizeof(lp.password));
    return rc;
}

typedef struct migrate_run {
    struct ev_loop *loop;
    gp_err          rc;
} migrate_run;

static void
migrate_done(void *arg, gp_err err, const char *detail)
{
    migrate_run *m = arg;

    (void)detail;                           /* db.c logged why */
    m->rc = err;
    ev_break(m->loop, EVBREAK_ALL);
}

gp_err
gp_app_migrate(const char *service, const gp_common_cfg *cfg, const gp_migration *migrations,
               const gp_grant *grants)
{
    pg_login_pw lp = {.login = ""};
    gp_db_roles r;
    gp_db_opts  o = {.roles = NULL};
    gp_db      *db = NULL;
    migrate_run m = {.loop = ev_loop_new(EVFLAG_AUTO), .rc = GP_EUNAVAIL};
    gp_err      rc = m.loop != NULL ? GP_EOK : GP_ENOMEM;
    bool        pw;

    rc = rc ? rc : pg_login(service, cfg, lp.login, sizeof(lp.login));
    rc = rc ? rc : migrate_opts(service, cfg, migrations, grants, &lp, &r, &o);
    rc = rc ? rc : gp_db_migrate(m.loop, &o, migrate_done, &m, &db);
    pw = o.roles != NULL && lp.password[0] != '\0';
    explicit_bzero(lp.password, sizeof(lp.password));
    if (rc == GP_EOK) {
        GP_INFO("migrate_only", "service=%s roles=%s login=%s scram=%s", service,
                o.roles != NULL ? "true" : "false", lp.login[0] ? lp.login : "-",
                pw ? "set" : "-");
        ev_run(m.loop, 0);
        rc = m.rc;
    }
    gp_db_free(db);
    if (m.loop != NULL)
        ev_loop_destroy(m.loop);
    GP_INFO("migrate_only_done", "service=%s code=%s", service, gp_err_name(rc));
    return rc;
}

static gp_err
connect_deps(gp_app *app, const gp_migration *migrations, const gp_grant *grants)
{
    const gp_common_cfg *c = &app->cfg;
    gp_bus_opts bo = {.url = c->nats_url, .name = app->instance,
                      .user = c->nats_user[0] ? c->nats_user : NULL,
                      .password = c->nats_user[0] ? c->nats_password : NULL,
                      .token = c->nats_token[0] ? c->nats_token : NULL,
                      .inbox_prefix = c->nats_inbox_prefix[0] ? c->nats_inbox_prefix : NULL,
                      .jetstream = (app->needs & GP_NEED_JS) != 0,
                      .max_pending = c->bus_max_pending};
    gp_err      rc = gp_bus_new(app->loop, &bo, on_bus_conn, app, &app->bus);

    if (rc == GP_EOK && (app->needs & GP_NEED_REDIS))
        rc = connect_kv(app);
    if (rc == GP_EOK && (app->needs & GP_NEED_PG))
        rc = connect_pg(app, migrations, grants);
    if (rc == GP_EOK && app->cfg.http_port >= 0) {
        rc = gp_http_new(app->loop, app->cfg.http_host, app->cfg.http_port, on_http, app,
                         &app->http);
        if (rc == GP_EOK && c->http_timeout_ms > 0)
            gp_http_set_timeout(app->http, c->http_timeout_ms);
    }
    return rc;
}

/* The per-tenant limits of the config (gp_app_check_cfg said why not). */
static gp_err
tenant_limits_new(const gp_common_cfg *cfg, gp_tlimits **out)
{
    gp_tlimit_cfg def = {cfg->tenant_rate, cfg->tenant_burst, cfg->tenant_inflight};
    char          err[GP_ERRBUF_LEN];
    gp_err        rc = gp_tlimits_new(&def, cfg->tenant_limits, err, sizeof(err), out);

    if (rc != GP_EOK)
        GP_ERROR("config_invalid", "detail=\"%s\"", err);
    return rc;
}

gp_err
gp_app_check_cfg(const gp_common_cfg *cfg, char *err, size_t errlen)
{
    gp_tlimit_cfg def = {cfg->tenant_rate, cfg->tenant_burst, cfg->tenant_inflight};
    gp_tlimits   *t = NULL;
    gp_err        rc = gp_tlimits_new(&def, cfg->tenant_limits, err, errlen, &t);

    gp_tlimits_free(t);
    return rc;
}

gp_err
gp_app_new(const char *service, const char *version, const gp_common_cfg *cfg, unsigned needs,
           const gp_migration *migrations, const gp_grant *grants, gp_app **out)
{
    gp_app *app = calloc(1, sizeof(*app));
    char    host[64] = "localhost";
    gp_err  rc;

    if (app == NULL)
        return GP_ENOMEM;
    snprintf(app->service, sizeof(app->service), "%s", service);
    snprintf(app->version, sizeof(app->version), "%s", version);
    app->cfg = *cfg;
    app->needs = needs;
    gethostname(host, sizeof(host) - 1);
    if (cfg->instance[0] != '\0')
        snprintf(app->instance, sizeof(app->instance), "%s", cfg->instance);
    else
        snprintf(app->instance, sizeof(app->instance), "%.40s-%d", host, (int)getpid());
    app->health_op = GP_OP_HEALTH;
    app->health_params[0] = (gp_param){"service", app->service};
    gp_log_setup(service, cfg->log_level, -1);
    signal(SIGPIPE, SIG_IGN);
    app->loop = ev_default_loop(EVFLAG_AUTO);
    app->started = gp_mono_s();
    app->metrics = gp_metrics_new();
    if (app->loop == NULL || app->metrics == NULL) {
        gp_app_free(app);
        return GP_ENOMEM;
    }
    register_metrics(app);
    gp_metrics_on_collect(app->metrics, collect, app);
    rc = tenant_limits_new(cfg, &app->tlimits);
    if (rc == GP_EOK)
        rc = connect_deps(app, migrations, grants);
    if (rc != GP_EOK) {
        GP_ERROR("start_failed", "code=%s", gp_err_name(rc));
        gp_app_free(app);
        return rc;
    }
    ev_signal_init(&app->sigint, signal_cb, SIGINT);
    ev_signal_init(&app->sigterm, signal_cb, SIGTERM);
    app->sigint.data = app->sigterm.data = app;
    ev_signal_start(app->loop, &app->sigint);
    ev_signal_start(app->loop, &app->sigterm);
    ev_unref(app->loop);                 /* signals alone do not keep the loop alive */
    ev_unref(app->loop);
    if (!cfg->print_routes)
        GP_INFO("starting", "instance=%s version=%s http_port=%d", app->instance, app->version,
                gp_app_http_port(app));
    *out = app;
    return GP_EOK;
}

void
gp_app_on_bus(gp_app *app, gp_bus_conn_cb *fn, void *arg)
{
    app->conn_fn = fn;
    app->conn_arg = arg;
}

void
gp_app_on_stop(gp_app *app, gp_cron_fn *fn, void *arg)
{
    app->stop_fn = fn;
    app->stop_arg = arg;
}

/* ---- periodic tasks --------------------------------------------------------- */

static void
task_run(gp_task *t)
{
    double t0 = gp_mono_s(), took;

    (*t->runs)++;
    t->fn(t->app, t->arg);
    took = gp_mono_s() - t0;
    gp_hist_observe(t->seconds, took);
    if (took > t->period) {
        (*t->overruns)++;
        GP_WARN("task_overrun", "task=%s took_ms=%.1f period_ms=%.1f", t->name, took * 1e3,
                t->period * 1e3);
    }
}

static void
task_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    gp_task *t = GP_CONTAINER_OF(w, gp_task, timer);

    (void)loop;
    (void)revents;
    task_run(t);
}

static void
task_kick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    gp_task *t = GP_CONTAINER_OF(w, gp_task, kick);

    (void)loop;
    (void)revents;
    task_run(t);
}

gp_task *
gp_app_every(gp_app *app, const char *name, double period_s, gp_cron_fn *fn, void *arg)
{
    gp_task *t = calloc(1, sizeof(*t));
    char     labels[96];

    if (t == NULL)
        return NULL;
    t->app = app;
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->period = period_s;
    t->fn = fn;
    t->arg = arg;
    snprintf(labels, sizeof(labels), "task=\"%s\"", t->name);
    t->runs = gp_metrics_counter(app->metrics, "gp_task_runs_total", labels,
                                 "Runs of a periodic task");
    t->overruns = gp_metrics_counter(app->metrics, "gp_task_overruns_total", labels,
                                     "Runs of a periodic task that took longer than its period");
    t->seconds = gp_metrics_hist(app->metrics, "gp_task_seconds", labels,
                                 "Time one run of a periodic task took");
    if (t->runs == NULL || t->overruns == NULL || t->seconds == NULL) {
        free(t);
        return NULL;
    }
    ev_timer_init(&t->timer, task_cb, period_s, period_s);
    ev_timer_init(&t->kick, task_kick_cb, 0, 0);
    ev_timer_start(app->loop, &t->timer);
    t->next = app->tasks;
    app->tasks = t;
    return t;
}

void
gp_task_kick(gp_task *t)
{
    if (t != NULL && !t->app->stopping && !ev_is_active(&t->kick))
        ev_timer_start(t->app->loop, &t->kick);
}

gp_task *
gp_app_task(gp_app *app, const char *name)
{
    for (gp_task *t = app->tasks; t != NULL; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

static void
tasks_stop(gp_app *app)
{
    for (gp_task *t = app->tasks; t != NULL; t = t->next) {
        ev_timer_stop(app->loop, &t->timer);
        ev_timer_stop(app->loop, &t->kick);
    }
}

static void
tasks_free(gp_app *app)
{
    while (app->tasks != NULL) {
        gp_task *t = app->tasks;

        app->tasks = t->next;
        free(t);
    }
}

/* ---- streams ------------------------------------------------------------------ */

static void streams_ensure(gp_app *app);

static void
stream_done(void *arg, gp_err err)
{
    stream_rt *s = arg;

    if (err == GP_EOK) {
        s->done = true;
        GP_INFO("stream_ready", "stream=%s", s->cfg.name);
    } else {
        s->fails++;
        if (s->fails == 1 || s->fails % 30 == 0)
            GP_WARN("stream_create_failed", "stream=%s code=%s tries=%u", s->cfg.name,
                    gp_err_name(err), s->fails);
    }
}

static void
streams_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    gp_app *app = GP_CONTAINER_OF(w, gp_app, streams_t);

    (void)loop;
    (void)revents;
    streams_ensure(app);
}

/* Asks for every stream not yet made; looks again a second later until
 * all are there (NATS may be down at start). */
static void
streams_ensure(gp_app *app)
{
    bool all = true;

    for (int i = 0; i < app->nstreams; i++) {
        stream_rt *s = &app->streams[i];

        if (s->done)
            continue;
        all = false;
        if (gp_bus_is_connected(app->bus))
            gp_bus_js_stream(app->bus, &s->cfg, stream_done, s);
    }
    if (!all && !app->stopping) {
        ev_timer_init(&app->streams_t, streams_cb, 1.0, 0);
        ev_timer_start(app->loop, &app->streams_t);
    }
}

static gp_err
stream_add(gp_app *app, const gp_stream_cfg *cfg)
{
    stream_rt *s;

    for (int i = 0; i < app->nstreams; i++)
        if (strcmp(app->streams[i].cfg.name, cfg->name) == 0)
            return GP_EOK;
    if (app->nstreams == GP_MAX_STREAMS)
        return GP_ETOOBIG;
    s = &app->streams[app->nstreams];
    s->cfg = *cfg;
    if (s->cfg.replicas == 0)
        s->cfg.replicas = (int)app->cfg.stream_replicas;
    if (gp_stream_bytes_spec(app->cfg.stream_max_bytes_mb, cfg->name, &s->cfg.max_bytes) != GP_EOK)
        return GP_EINVAL;
    app->nstreams++;
    return GP_EOK;
}

gp_err
gp_app_streams(gp_app *app, const gp_stream_cfg *streams)
{
    gp_err rc = GP_EOK;

    if (!(app->needs & GP_NEED_JS))
        return GP_EINVAL;
    for (const gp_stream_cfg *s = streams; s->name != NULL && rc == GP_EOK; s++)
        rc = stream_add(app, s);
    if (rc == GP_EOK && !app->cfg.print_routes) {
        ev_timer_stop(app->loop, &app->streams_t);
        streams_ensure(app);
    }
    return rc;
}

/* ---- routes ------------------------------------------------------------------- */

static op_rt *
op_get(gp_app *app, const gp_op *op)
{
    op_rt *o;
    char   labels[GP_MAX_SUBJECT + 16];

    for (int i = 0; i < app->nops; i++)
        if (app->ops[i].op == op)
            return &app->ops[i];
    if (app->nops == GP_MAX_ROUTES)
        return NULL;
    o = &app->ops[app->nops];
    o->op = op;
    o->app = app;
    o->limit_tok = -1;
    if (op->limit_by != NULL && gp_op_param_index(op, op->limit_by) >= 0)
        o->limit_tok = op->param_tok[gp_op_param_index(op, op->limit_by)];
    snprintf(labels, sizeof(labels), "route=\"%s\"", op->pattern);
    o->calls = gp_metrics_counter(app->metrics, "gp_requests_total", labels, "Requests received, by route");
    o->errors = gp_metrics_counter(app->metrics, "gp_request_failures_total", labels, "Requests that ended in any error, by route");
    o->latency = gp_metrics_hist(app->metrics, "gp_request_seconds", labels, "Time from receipt to reply, by route");
    o->dead = gp_metrics_counter(app->metrics, "gp_dead_letters_total", labels,
                                 "Durable messages given up on and copied to the DLQ stream");
    if (o->calls == NULL || o->errors == NULL || o->latency == NULL || o->dead == NULL)
        return NULL;
    app->nops++;
    return o;
}

static gp_err
check_route(const gp_app *app, const gp_route *r)
{
    if (r->fn == NULL)
        return GP_EINVAL;
    if (r->durable != NULL &&
        (r->op->out != NULL || !(app->needs & GP_NEED_JS) || r->durable->stream == NULL ||
         r->durable->name == NULL))
        return GP_EINVAL;                /* a durable route serves an event, on JetStream */
    return GP_EOK;
}

/* The value bound to parameter name, or NULL (it stays a wildcard). */
static const char *
param_value(const gp_param *params, const char *name)
{
    for (const gp_param *p = params; p != NULL && p->name != NULL; p++)
        if (strcmp(p->name, name) == 0)
            return p->value;
    return NULL;
}

/* op's subject with the given parameters filled and the others "*". */
static gp_err
bind_subject(const gp_op *op, const gp_param *params, char *buf, size_t n)
{
    const char *args[GP_MAX_TOKENS];

    if (op->nparams > GP_MAX_TOKENS)
        return GP_ETOOBIG;
    for (int i = 0; i < op->nparams; i++)
        args[i] = param_value(params, op->params[i]);
    return gp_op_pattern(op, buf, n, args);
}


/* Subscribes one route on subject into *s. */
static gp_err
sub_open(gp_app *app, sub_rt *s, const gp_route *r, const char *subject, void *data)
{
    s->app = app;
    s->r = r;
    s->data = data;
    s->o = op_get(app, r->op);
    if (s->o == NULL)
        return GP_ETOOBIG;
    s->o->served = true;
    snprintf(s->subject, sizeof(s->subject), "%s", subject);
    if (r->durable != NULL)
        app->need_dlq = true;
    if (app->cfg.print_routes)
        return GP_EOK;                     /* listed, not subscribed */
    if (r->durable != NULL) {
        const gp_durable *d = r->durable;
        gp_pull_cfg       pc = {.stream = d->stream, .durable = d->name,
                                .filter_subject = s->subject,
                                .max_inflight = d->max_inflight ? d->max_inflight : 256,
                                .ack_wait_ms = d->ack_wait_ms ? d->ack_wait_ms : 30000};

        return gp_bus_js_pull_new(app->bus, &pc, on_js, s, &s->pull);
    }
    return gp_bus_sub_new_lane(app->bus, subject, (r->flags & GP_R_QUEUE) ? app->service : NULL,
                               (r->flags & GP_R_BULK) ? GP_LANE_BULK : GP_LANE_CONTROL, on_msg,
                               s, &s->sub);
}

static void
sub_close(sub_rt *s)
{
    gp_bus_sub_free(s->sub);
    s->sub = NULL;
    gp_bus_js_pull_free(s->pull);
    s->pull = NULL;
}

static gp_err
serve_one(gp_app *app, const gp_route *r, const gp_param *params, void *data)
{
    char    subject[GP_MAX_SUBJECT + 1];
    sub_rt *s;
    gp_err  rc = check_route(app, r);

    if (rc == GP_EOK)
        rc = bind_subject(r->op, params, subject, sizeof(subject));
    if (rc != GP_EOK)
        return rc;
    if (app->nsubs == app->capsubs) {
        int      cap = app->capsubs ? app->capsubs * 2 : 16;
        sub_rt **v = realloc(app->subs, (size_t)cap * sizeof(*v));

        if (v == NULL)
            return GP_ENOMEM;
        app->subs = v;
        app->capsubs = cap;
    }
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return GP_ENOMEM;
    app->subs[app->nsubs++] = s;
    return sub_open(app, s, r, subject, data);
}

static gp_err
serve_table(gp_app *app, const gp_route *table)
{
    gp_err rc = GP_EOK;

    for (const gp_route *r = table; r->op != NULL && rc == GP_EOK; r++)
        rc = serve_one(app, r, NULL, (void *)(uintptr_t)r->data);
    return rc;
}

void
gp_app_set_health(gp_app *app, const gp_op *op, const gp_param *params)
{
    int n = 0;

    app->health_op = op;
    for (const gp_param *p = params; p != NULL && p->name != NULL && n < GP_MAX_TOKENS; p++)
        app->health_params[n++] = *p;
    app->health_params[n] = (gp_param){NULL, NULL};
}

/* ---- presence: "I am here", and "I am going" at a clean stop ----------------- */

static void
presence_send(gp_app *app, int state)
{
    msg_service_presence m = {.state = state, .interval_ms = app->cfg.presence_ms,
                              .uptime_ms = (uint64_t)((gp_mono_s() - app->started) * 1000)};
    const char          *args[] = {app->service};
    gp_err               rc;

    snprintf(m.service, sizeof(m.service), "%s", app->service);
    snprintf(m.instance, sizeof(m.instance), "%s", app->instance);
    snprintf(m.version, sizeof(m.version), "%s", app->version);
    rc = gp_app_publish(app, GP_OP_PRESENCE, args, &m);
    if (rc != GP_EOK)
        GP_DEBUG("presence_failed", "code=%s", gp_err_name(rc));
}

static void
presence_run(gp_app *app, void *arg)
{
    (void)arg;
    presence_send(app, MSG_SERVICE_PRESENCE_STATE_UP);
}

/* Services on the control plane's health channel (not the agent, whose
 * heartbeats say it): every presence-ms, and a first one now. */
static gp_err
presence_start(gp_app *app)
{
    if (app->health_op != GP_OP_HEALTH || app->cfg.presence_ms == 0 || app->cfg.print_routes ||
        app->bus == NULL)
        return GP_EOK;
    if (gp_app_every(app, "presence", app->cfg.presence_ms / 1000.0, presence_run, NULL) == NULL)
        return GP_ENOMEM;
    app->present = true;
    presence_send(app, MSG_SERVICE_PRESENCE_STATE_UP);
    return GP_EOK;
}

/* What gp_app_serve does once the service's tables are subscribed (rc:
 * how that went): the health route, presence, the streams. */
static gp_err
serve_rest(gp_app *app, gp_err rc)
{
    static const gp_route health = {.op = NULL, .fn = on_health};

    if (rc == GP_EOK) {
        app->health_route = health;
        app->health_route.op = app->health_op;
        rc = serve_one(app, &app->health_route, app->health_params, NULL);
    }
    if (rc == GP_EOK)
        rc = presence_start(app);
    if (rc != GP_EOK)
        GP_ERROR("serve_failed", "code=%s", gp_err_name(rc));
    else if (app->need_dlq)
        rc = stream_add(app, &dlq_stream);
    if (rc == GP_EOK && app->nstreams > 0 && !app->cfg.print_routes) {
        ev_timer_stop(app->loop, &app->streams_t);
        streams_ensure(app);
    }
    return rc;
}

gp_err
gp_app_serve(gp_app *app, void *state, ...)
{
    va_list ap;
    gp_err  rc = GP_EOK;

    app->state = state;
    va_start(ap, state);
    for (const gp_route *t = va_arg(ap, const gp_route *); t != NULL && rc == GP_EOK;
         t = va_arg(ap, const gp_route *))
        rc = serve_table(app, t);
    va_end(ap);
    return serve_rest(app, rc);
}

gp_err
gp_app_serve_tables(gp_app *app, void *state, const gp_route *const *tables)
{
    gp_err rc = GP_EOK;

    app->state = state;
    for (; tables != NULL && *tables != NULL && rc == GP_EOK; tables++)
        rc = serve_table(app, *tables);
    return serve_rest(app, rc);
}

gp_err
gp_app_declare(gp_app *app, const gp_route *table)
{
    for (const gp_route *r = table; r->op != NULL; r++)
        if (op_get(app, r->op) == NULL)
            return GP_ETOOBIG;
    return GP_EOK;
}

gp_err
gp_app_bind(gp_app *app, const gp_route *table, const gp_param *params, void *data,
            gp_binding **out)
{
    gp_binding *b = calloc(1, sizeof(*b));
    int         n = 0;
    gp_err      rc = GP_EOK;

    for (const gp_route *r = table; r->op != NULL; r++)
        n++;
    if (b == NULL || (b->subs = calloc((size_t)(n ? n : 1), sizeof(sub_rt))) == NULL) {
        free(b);
        return GP_ENOMEM;
    }
    b->app = app;
    for (int i = 0; i < n && rc == GP_EOK; i++) {
        char subject[GP_MAX_SUBJECT + 1];

        rc = check_route(app, &table[i]);
        if (rc == GP_EOK)
            rc = bind_subject(table[i].op, params, subject, sizeof(subject));
        if (rc == GP_EOK) {
            rc = sub_open(app, &b->subs[i], &table[i], subject, data);
            b->nsubs = i + 1;
        }
    }
    b->next = app->bindings;
    if (app->bindings != NULL)
        app->bindings->prev = b;
    app->bindings = b;
    if (rc != GP_EOK) {
        gp_app_unbind(b);
        return rc;
    }
    *out = b;
    return GP_EOK;
}

void
gp_app_unbind(gp_binding *b)
{
    gp_app *app;

    if (b == NULL)
        return;
    app = b->app;
    for (int i = 0; i < b->nsubs; i++)
        sub_close(&b->subs[i]);
    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        app->bindings = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    free(b->subs);
    free(b);
}

static void
unsubscribe_all(gp_app *app)
{
    for (int i = 0; i < app->nsubs; i++)
        sub_close(app->subs[i]);
    for (gp_binding *b = app->bindings; b != NULL; b = b->next)
        for (int i = 0; i < b->nsubs; i++)
            sub_close(&b->subs[i]);
}

static void
free_subs(gp_app *app)
{
    while (app->bindings != NULL)
        gp_app_unbind(app->bindings);
    for (int i = 0; i < app->nsubs; i++)
        free(app->subs[i]);
    free(app->subs);
    app->subs = NULL;
    app->nsubs = app->capsubs = 0;
}

/* ---- shutdown --------------------------------------------------------------- */

/* Closing order matters: outstanding bus calls are failed first, then
 * PostgreSQL and Redis are closed, so that handlers still waiting on any
 * of them get UNAVAIL and can reply over the bus, which is closed last. */
static void
shutdown_now(gp_app *app)
{
    if (app->closing)
        return;
    app->closing = true;
    ev_timer_stop(app->loop, &app->drain);
    ev_timer_stop(app->loop, &app->close_t);
    ev_timer_stop(app->loop, &app->streams_t);
    tasks_stop(app);
    /* Bus calls first: their callbacks end the handlers waiting on them,
     * which must still be alive when they run. */
    gp_bus_fail_requests(app->bus);
    /* PostgreSQL before Redis: a failed transaction's callback may still
     * send Redis commands (the scheduler releases a placement's GPUs when
     * its commit fails), and a module may hold the gp_kv pointer (ASan
     * caught one using it freed); Redis then fails what they sent, and
     * what those callbacks ask of PostgreSQL is refused (closed). */
    gp_db_free(app->migrator);
    app->migrator = NULL;
    gp_db_free(app->db);
    app->db = NULL;
    gp_kv_free(app->kv);
    app->kv = NULL;
    while (app->pending != NULL)            /* handlers that never ended: end them */
        gp_req_done(app->pending, GP_EUNAVAIL);
    gp_http_free(app->http);
    app->http = NULL;
    gp_bus_free(app->bus);
    app->bus = NULL;
    ev_break(app->loop, EVBREAK_ALL);
}

static void
close_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    gp_app *app = GP_CONTAINER_OF(w, gp_app, close_t);

    (void)loop;
    (void)revents;
    shutdown_now(app);
}

/* Drained: the close runs from a fresh frame of the loop, not inside the
 * callback that ended the last request (a PostgreSQL reply, say): a client
 * freed inside its own callback defers the free to that callback's end,
 * after the clients freed next to it are gone, and its failed callbacks
 * then used them (ASan: the scheduler released GPUs on a freed gp_kv). */
static void
maybe_finish_drain(gp_app *app)
{
    if (app->inflight == 0 && app->holds == 0 && !app->closing &&
        !ev_is_active(&app->close_t)) {
        ev_timer_init(&app->close_t, close_cb, 0., 0.);
        ev_timer_start(app->loop, &app->close_t);
    }
}

static void
drain_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    gp_app *app = GP_CONTAINER_OF(w, gp_app, drain);

    (void)loop;
    (void)revents;
    GP_WARN("drain_timeout", "inflight=%u holds=%u", app->inflight, app->holds);
    shutdown_now(app);
}

void
gp_app_stop(gp_app *app)
{
    if (app->stopping)
        return;
    app->stopping = true;
    if (app->present)                       /* no ServiceInstanceSilent for a clean stop */
        presence_send(app, MSG_SERVICE_PRESENCE_STATE_STOPPING);
    if (app->stop_fn != NULL)
        app->stop_fn(app, app->stop_arg);
    tasks_stop(app);
    unsubscribe_all(app);                   /* take no new work */
    GP_INFO("draining", "inflight=%u holds=%u", app->inflight, app->holds);
    ev_timer_init(&app->drain, drain_cb, app->cfg.drain_ms / 1000.0, 0);
    ev_timer_start(app->loop, &app->drain);
    maybe_finish_drain(app);
}

void
gp_app_fail(gp_app *app, gp_err why)
{
    app->exit_rc = why != GP_EOK ? why : GP_EINTERNAL;
    gp_app_stop(app);
}

void
gp_app_hold(gp_app *app)
{
    app->holds++;
}

void
gp_app_release(gp_app *app)
{
    if (app->holds > 0)
        app->holds--;
    if (app->stopping)
        maybe_finish_drain(app);
}

/* What the service serves, and the JetStream streams it declares and the
 * durable consumers it reads ("stream", "durable" lines): the contract's
 * x-gp-service and x-gp-streams, which contract_drift_test.sh compares
 * and deploy/nats-auth grants permissions from. */
static void
print_routes(gp_app *app)
{
    for (int i = 0; i < app->nops; i++)
        printf("route %s %s %s\n", app->service, app->ops[i].op->id, app->ops[i].op->pattern);
    for (int i = 0; i < app->nstreams; i++) {
        const gp_stream_cfg *c = &app->streams[i].cfg;

        printf("stream %s %s", app->service, c->name);
        for (int j = 0; c->subjects[j] != NULL; j++)
            printf("%s%s", j ? "," : " ", c->subjects[j]);
        printf("\n");
    }
    for (int i = 0; i < app->nsubs; i++)
        if (app->subs[i]->r->durable != NULL)
            printf("durable %s %s %s\n", app->service, app->subs[i]->r->durable->stream,
                   app->subs[i]->r->durable->name);
    fflush(stdout);
}

gp_err
gp_app_run(gp_app *app)
{
    if (app->cfg.print_routes) {
        print_routes(app);
        return GP_EOK;
    }
    ev_run(app->loop, 0);
    GP_INFO("stopped", "instance=%s", app->instance);
    return app->exit_rc;
}

void
gp_app_free(gp_app *app)
{
    if (app == NULL)
        return;
    app->stopping = true;
    shutdown_now(app);
    free_subs(app);
    tasks_free(app);
    if (app->loop != NULL) {
        ev_ref(app->loop);                 /* undo the unrefs of the signal watchers */
        ev_ref(app->loop);
        ev_signal_stop(app->loop, &app->sigint);
        ev_signal_stop(app->loop, &app->sigterm);
    }
    gp_metrics_free(app->metrics);
    for (int i = 0; i < app->nops; i++)
        while (app->ops[i].spare != NULL) {
            gp_req *r = app->ops[i].spare;

            app->ops[i].spare = r->next;
            free(r);
        }
    gp_buf_fini(&app->reply_buf);
    gp_tlimits_free(app->tlimits);
    free(app);
}

struct ev_loop *gp_app_loop(gp_app *app) { return app->loop; }
gp_bus *gp_app_bus(gp_app *app) { return app->bus; }
gp_kv *gp_app_kv(gp_app *app) { return app->kv; }
gp_db *gp_app_db(gp_app *app) { return app->db; }
gp_metrics *gp_app_metrics(gp_app *app) { return app->metrics; }
const gp_common_cfg *gp_app_cfg(gp_app *app) { return &app->cfg; }
const char *gp_app_service(gp_app *app) { return app->service; }
const char *gp_app_version(gp_app *app) { return app->version; }
const char *gp_app_instance(gp_app *app) { return app->instance; }

int
gp_app_http_port(gp_app *app)
{
    return app->http != NULL ? gp_http_port(app->http) : -1;
}

gp_err
gp_app_publish_to(gp_app *app, const char *subject, const gp_msg_desc *d, const void *msg)
{
    gp_buf b;
    gp_err rc;

    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    rc = gp_msg_encode(d, msg, &b);
    if (rc == GP_EOK)
        rc = gp_bus_pub(app->bus, subject, NULL, b.p, b.n);
    gp_buf_fini(&b);
    return rc;
}

gp_err
gp_app_publish(gp_app *app, const gp_op *op, const char *const *args, const void *msg)
{
    char   subject[GP_MAX_SUBJECT + 1];
    gp_err rc = gp_op_subject(op, subject, sizeof(subject), args);

    return rc != GP_EOK ? rc : gp_app_publish_to(app, subject, op->in, msg);
}

void
gp_lib_close(void)
{
    nats_CloseAndWait(2000);
}
