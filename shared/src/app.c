/* app.c -- the service chassis and dispatcher (see gp/app.h).
 *
 * Life of a request: a cnats thread queues the message; the bus hands it
 * to on_msg on the loop thread; on_msg checks size and the in-flight cap,
 * decodes with the route's schema, calls the handler and, unless the
 * handler said PENDING, encodes and sends the reply at once.  PENDING
 * requests get a deadline timer; whichever of gp_req_done and the timer
 * comes first sends the reply, and gp_req_done frees the request. */
#include "gp/app.h"

#include <ev.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp/http.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "msg_gen.h"
#include <nats/nats.h>

#define LOG_EVERY_S 1.0    /* at most one log line per route and second for bad input */

typedef struct route_rt {
    const gp_route *r;
    gp_bus_sub     *sub;
    uint64_t       *calls;
    uint64_t       *errors;
    gp_hist        *latency;
    double          last_log;
    uint64_t        suppressed;
    gp_app         *app;
} route_rt;

struct gp_req {
    gp_app         *app;
    route_rt       *rt;
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
    struct gp_req  *prev, *next;      /* pending list, for shutdown */
    void           *in;
    void           *out;
    const void     *body;             /* during the handler call only */
    size_t          body_len;
};

struct gp_app {
    char                 service[32];
    char                 version[32];
    char                 instance[64];
    char                 health_subject[GP_MAX_SUBJECT + 1];
    gp_route             health;
    gp_common_cfg        cfg;
    unsigned             needs;
    struct ev_loop      *loop;
    ev_signal            sigint, sigterm;
    ev_timer             cron, drain;
    gp_cron_fn          *cron_fn, *stop_fn;
    void                *cron_arg, *stop_arg;
    gp_bus              *bus;
    gp_kv               *kv;
    gp_db               *db;
    gp_http             *http;
    gp_metrics          *metrics;
    route_rt             routes[GP_MAX_ROUTES + 1];   /* + health */
    int                  nroutes;
    void                *state;
    double               started;
    unsigned             inflight;
    gp_req              *pending;
    bool                 stopping;
    bool                 closing;
    uint64_t            *m_inflight_rejects;
    double              *m_inflight, *m_up_nats, *m_up_redis, *m_up_pg;
    uint64_t            *m_bus_dropped, *m_bus_reconnects, *m_kv_timeouts, *m_kv_reconnects;
    uint64_t            *m_db_timeouts, *m_db_reconnects, *m_kv_errors, *m_db_errors;
    uint64_t             spare_counter;
    double               spare_gauge;
};

const gp_cfg_opt gp_common_cfg_opts[] = {
    GP_CFG_STR("nats-url", gp_common_cfg, nats_url, "nats://127.0.0.1:4222", "NATS server URL(s), comma separated"),
    GP_CFG_STR("nats-user", gp_common_cfg, nats_user, "", "NATS user (with nats-password)"),
    GP_CFG_STR("nats-password", gp_common_cfg, nats_password, "", "NATS password"),
    GP_CFG_STR("nats-token", gp_common_cfg, nats_token, "", "NATS token (instead of user and password)"),
    GP_CFG_STR("health-subject", gp_common_cfg, health_subject, "", "subject of the health route (default gp.int.health.<service>)"),
    GP_CFG_STR("redis-host", gp_common_cfg, redis_host, "127.0.0.1", "Redis address (numeric)"),
    GP_CFG_INT("redis-port", gp_common_cfg, redis_port, 6379, 1, 65535, "Redis port"),
    GP_CFG_STR("pg-conninfo", gp_common_cfg, pg_conninfo, "postgresql://postgres@127.0.0.1:5432/gridpool", "PostgreSQL connection string"),
    GP_CFG_STR("http-host", gp_common_cfg, http_host, "127.0.0.1", "address of the /metrics and /healthz endpoint"),
    GP_CFG_INT("http-port", gp_common_cfg, http_port, 0, -1, 65535, "port of /metrics and /healthz (0 any, -1 off)"),
    GP_CFG_STR("log-level", gp_common_cfg, log_level, "info", "debug, info, warn or error"),
    GP_CFG_STR("instance", gp_common_cfg, instance, "", "instance name (default host-pid)"),
    GP_CFG_UINT("request-timeout-ms", gp_common_cfg, request_timeout_ms, 5000, 10, 600000, "deadline of one request"),
    GP_CFG_UINT("redis-timeout-ms", gp_common_cfg, redis_timeout_ms, 2000, 10, 600000, "deadline of one Redis command"),
    GP_CFG_UINT("pg-timeout-ms", gp_common_cfg, pg_timeout_ms, 5000, 10, 600000, "deadline of one PostgreSQL query"),
    GP_CFG_UINT("pg-pool", gp_common_cfg, pg_pool, 4, 1, 64, "PostgreSQL connections per service"),
    GP_CFG_UINT("drain-ms", gp_common_cfg, drain_ms, 5000, 0, 600000, "shutdown waits this long for in-flight requests"),
    GP_CFG_END
};

static double
now_mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- replies ------------------------------------------------------------ */

static void
count_error(route_rt *rt, gp_err rc)
{
    char labels[GP_MAX_SUBJECT + 64];
    uint64_t *c;

    snprintf(labels, sizeof(labels), "route=\"%s\",code=\"%s\"", rt->r->subject, gp_err_name(rc));
    c = gp_metrics_counter(rt->app->metrics, "gp_request_errors_total", labels,
                           "Requests that ended in an error, by route and code");
    if (c != NULL)
        (*c)++;
    (*rt->errors)++;
}

static void
log_bad(route_rt *rt, const char *subject, gp_err rc, const char *detail)
{
    double t = ev_now(rt->app->loop);

    if (t - rt->last_log < LOG_EVERY_S) {
        rt->suppressed++;
        return;
    }
    GP_WARN("request_rejected", "route=%s subject=%s code=%s detail=\"%s\" suppressed=%llu",
            rt->r->subject, subject, gp_err_name(rc), detail, (unsigned long long)rt->suppressed);
    rt->last_log = t;
    rt->suppressed = 0;
}

static void
send_error(gp_app *app, const char *reply, gp_err rc, const char *detail)
{
    gp_buf b;

    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    if (gp_msg_encode_error(rc, detail && *detail ? detail : gp_err_str(rc), &b) == GP_EOK)
        gp_bus_pub(app->bus, reply, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

static void
send_reply(gp_req *req, gp_err rc)
{
    route_rt *rt = req->rt;
    gp_buf    b;

    req->replied = true;
    gp_hist_observe(rt->latency, now_mono() - req->t0);
    if (rc != GP_EOK) {
        count_error(rt, rc);
        if (rt->r->flags & GP_R_NOREPLY || rc == GP_EDECODE || rc == GP_ETYPE ||
            rc == GP_EMISSING || rc == GP_ERANGE || rc == GP_ETOOBIG)
            log_bad(rt, req->subject, rc, req->detail);
    }
    if (req->reply[0] == '\0' || (rt->r->flags & GP_R_NOREPLY))
        return;
    if (rc != GP_EOK) {
        send_error(req->app, req->reply, rc, req->detail);
        return;
    }
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    rc = gp_msg_encode(rt->r->out, req->out, &b);
    if (rc == GP_EOK) {
        gp_bus_pub(req->app->bus, req->reply, NULL, b.p, b.n);
    } else {
        count_error(rt, rc);
        GP_ERROR("reply_encode_failed", "route=%s code=%s", rt->r->subject, gp_err_name(rc));
        send_error(req->app, req->reply, rc, "reply could not be encoded");
    }
    gp_buf_fini(&b);
}

static void
req_free(gp_req *req)
{
    if (req->in != NULL)
        gp_msg_clear(req->rt->r->in, req->in);
    if (req->out != NULL && req->rt->r->out != NULL)
        gp_msg_clear(req->rt->r->out, req->out);
    free(req);
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
route_timeout_ms(const gp_app *app, const route_rt *rt)
{
    return rt->r->timeout_ms ? rt->r->timeout_ms : app->cfg.request_timeout_ms;
}

static void
deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    gp_req *req = GP_CONTAINER_OF(w, gp_req, deadline);

    (void)loop;
    (void)revents;
    snprintf(req->detail, sizeof(req->detail), "no result within %u ms",
             route_timeout_ms(req->app, req->rt));
    send_reply(req, GP_ETIMEOUT);      /* the handler still ends it with gp_req_done */
}

/* ---- dispatch ----------------------------------------------------------- */

static void
tokenize(gp_req *req)
{
    char *p = req->toks;

    memcpy(req->toks, req->subject, sizeof(req->toks));
    req->ntok = 0;
    while (p != NULL && req->ntok < GP_MAX_TOKENS) {
        req->tok[req->ntok++] = p;
        p = strchr(p, '.');
        if (p != NULL)
            *p++ = '\0';
    }
}

static gp_req *
req_new(route_rt *rt, const gp_bus_msg *m)
{
    const gp_route *r = rt->r;
    size_t          in_sz = r->in->size, out_sz = r->out ? r->out->size : 0;
    size_t          base = (sizeof(gp_req) + 15) & ~(size_t)15;
    size_t          in_al = (in_sz + 15) & ~(size_t)15;
    gp_req         *req = calloc(1, base + in_al + out_sz);

    if (req == NULL)
        return NULL;
    req->app = rt->app;
    req->rt = rt;
    req->in = (char *)req + base;
    req->out = out_sz ? (char *)req + base + in_al : NULL;
    snprintf(req->subject, sizeof(req->subject), "%s", m->subject);
    if (m->reply != NULL)
        snprintf(req->reply, sizeof(req->reply), "%s", m->reply);
    tokenize(req);
    return req;
}

/* A request we cannot even allocate or accept: answer without a gp_req. */
static void
reject(route_rt *rt, const gp_bus_msg *m, gp_err rc, const char *detail)
{
    count_error(rt, rc);
    log_bad(rt, m->subject, rc, detail);
    if (m->reply != NULL && !(rt->r->flags & GP_R_NOREPLY))
        send_error(rt->app, m->reply, rc, detail);
}

static void
on_msg(void *arg, const gp_bus_msg *m)
{
    route_rt *rt = arg;
    gp_app   *app = rt->app;
    gp_req   *req;
    gp_err    rc;
    char      detail[GP_ERRBUF_LEN];

    (*rt->calls)++;
    if (m->len > GP_MAX_MSG_BYTES) {
        snprintf(detail, sizeof(detail), "body of %zu bytes exceeds the limit of %d", m->len,
                 GP_MAX_MSG_BYTES);
        reject(rt, m, GP_ETOOBIG, detail);
        return;
    }
    if (app->inflight >= GP_MAX_INFLIGHT || app->stopping) {
        (*app->m_inflight_rejects)++;
        reject(rt, m, GP_EUNAVAIL, app->stopping ? "shutting down" : "too many requests in flight");
        return;
    }
    req = req_new(rt, m);
    if (req == NULL) {
        reject(rt, m, GP_ENOMEM, "out of memory");
        return;
    }
    req->t0 = now_mono();
    rc = gp_msg_decode(rt->r->in, m->data, m->len, req->in, req->detail, sizeof(req->detail));
    req->body = m->data;
    req->body_len = m->len;
    if (rc == GP_EOK)
        rc = rt->r->fn(req, req->in, req->out);
    req->body = NULL;
    if (rc != GP_EPENDING) {
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
    ev_timer_init(&req->deadline, deadline_cb, route_timeout_ms(app, rt) / 1000.0, 0);
    ev_timer_start(app->loop, &req->deadline);
}

/* ---- request accessors ---------------------------------------------------- */

gp_app *gp_req_app(gp_req *req) { return req->app; }
void *gp_req_state(gp_req *req) { return req->app->state; }
const char *gp_req_subject(const gp_req *req) { return req->subject; }
int gp_req_ntokens(const gp_req *req) { return req->ntok; }
void *gp_req_out(gp_req *req) { return req->out; }
const void *gp_req_in(gp_req *req) { return req->in; }

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
    h->uptime_s = (uint64_t)(now_mono() - app->started);
    h->nats = dep_state(true, gp_bus_is_connected(app->bus));
    h->redis = dep_state(app->kv != NULL, app->kv && gp_kv_is_connected(app->kv));
    h->pg = dep_state(app->db != NULL, app->db && gp_db_is_connected(app->db));
    if (!verbose)
        return;
    h->routes.v = calloc((size_t)app->nroutes, sizeof(msg_route_stats));
    if (h->routes.v == NULL)
        return;
    for (int i = 0; i < app->nroutes; i++) {
        msg_route_stats *s = (msg_route_stats *)h->routes.v + h->routes.n++;
        route_rt        *rt = &app->routes[i];

        snprintf(s->subject, sizeof(s->subject), "%s", rt->r->subject);
        s->calls = *rt->calls;
        s->errors = *rt->errors;
        s->p50_us = (uint64_t)(gp_hist_quantile(rt->latency, 0.5) * 1e6);
        s->p99_us = (uint64_t)(gp_hist_quantile(rt->latency, 0.99) * 1e6);
    }
}

static gp_err
on_health(gp_req *req, const void *in, void *out)
{
    const msg_health_request *q = in;

    fill_health(req->app, out, q->verbose);
    return GP_EOK;
}

static const gp_route health_route = {
    NULL, &msg_health_request_desc, &msg_health_desc, on_health, 0, 0
};

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
    *app->m_bus_reconnects = bs.reconnects;
    *app->m_up_nats = gp_bus_is_connected(app->bus);
    *app->m_inflight = app->inflight;
    if (app->kv != NULL) {
        gp_kv_stats ks;

        gp_kv_get_stats(app->kv, &ks);
        *app->m_kv_timeouts = ks.timeouts;
        *app->m_kv_reconnects = ks.reconnects;
        *app->m_kv_errors = ks.errors;
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
        return deps_up(app) ? GP_EOK : GP_EUNAVAIL;
    }
    return GP_ENOTFOUND;
}

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
    C(m_bus_reconnects, "gp_bus_reconnects_total", "NATS reconnects");
    C(m_kv_timeouts, "gp_redis_timeouts_total", "Redis commands past their deadline");
    C(m_kv_reconnects, "gp_redis_reconnects_total", "Redis reconnects");
    C(m_kv_errors, "gp_redis_errors_total", "Redis commands that failed");
    C(m_db_timeouts, "gp_pg_timeouts_total", "PostgreSQL queries past their deadline");
    C(m_db_reconnects, "gp_pg_reconnects_total", "PostgreSQL reconnects");
    C(m_db_errors, "gp_pg_errors_total", "PostgreSQL queries that failed");
    G(m_inflight, "gp_requests_inflight", "Requests accepted and not yet answered");
    G(m_up_nats, "gp_nats_up", "1 when connected to NATS");
    G(m_up_redis, "gp_redis_up", "1 when connected to Redis");
    G(m_up_pg, "gp_pg_up", "1 when a PostgreSQL connection is ready");
#undef C
#undef G
}

/* ---- lifecycle ------------------------------------------------------------ */

static void
on_bus_conn(void *arg, bool up)
{
    gp_app *app = arg;

    GP_INFO(up ? "nats_up" : "nats_down", "service=%s", app->service);
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

static void
cron_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    gp_app *app = GP_CONTAINER_OF(w, gp_app, cron);

    (void)loop;
    (void)revents;
    app->cron_fn(app, app->cron_arg);
}

static gp_err
connect_deps(gp_app *app, const char *migrate_sql)
{
    const gp_common_cfg *c = &app->cfg;
    gp_bus_opts bo = {.url = c->nats_url, .name = app->instance,
                      .user = c->nats_user[0] ? c->nats_user : NULL,
                      .password = c->nats_user[0] ? c->nats_password : NULL,
                      .token = c->nats_token[0] ? c->nats_token : NULL,
                      .jetstream = (app->needs & GP_NEED_JS) != 0};
    gp_err      rc = gp_bus_new(app->loop, &bo, on_bus_conn, app, &app->bus);

    if (rc == GP_EOK && (app->needs & GP_NEED_REDIS)) {
        gp_kv_opts ko = {.host = app->cfg.redis_host, .port = app->cfg.redis_port,
                         .command_timeout_ms = app->cfg.redis_timeout_ms};
        rc = gp_kv_new(app->loop, &ko, NULL, NULL, &app->kv);
    }
    if (rc == GP_EOK && (app->needs & GP_NEED_PG)) {
        gp_db_opts dopt = {.conninfo = app->cfg.pg_conninfo, .pool_size = app->cfg.pg_pool,
                           .query_timeout_ms = app->cfg.pg_timeout_ms,
                           .migrate_sql = migrate_sql};
        rc = gp_db_new(app->loop, &dopt, NULL, NULL, &app->db);
    }
    if (rc == GP_EOK && app->cfg.http_port >= 0) {
        rc = gp_http_new(app->loop, app->cfg.http_host, app->cfg.http_port, on_http, app,
                         &app->http);
    }
    return rc;
}

gp_err
gp_app_new(const char *service, const char *version, const gp_common_cfg *cfg, unsigned needs,
           const char *migrate_sql, gp_app **out)
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
    gp_log_setup(service, cfg->log_level, -1);
    signal(SIGPIPE, SIG_IGN);
    app->loop = ev_default_loop(EVFLAG_AUTO);
    app->started = now_mono();
    app->metrics = gp_metrics_new();
    if (app->loop == NULL || app->metrics == NULL) {
        gp_app_free(app);
        return GP_ENOMEM;
    }
    register_metrics(app);
    gp_metrics_on_collect(app->metrics, collect, app);
    rc = connect_deps(app, migrate_sql);
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
    GP_INFO("starting", "instance=%s version=%s http_port=%d", app->instance, app->version,
            gp_app_http_port(app));
    *out = app;
    return GP_EOK;
}

void
gp_app_set_cron(gp_app *app, double interval_s, gp_cron_fn *fn, void *arg)
{
    app->cron_fn = fn;
    app->cron_arg = arg;
    ev_timer_init(&app->cron, cron_cb, interval_s, interval_s);
    ev_timer_start(app->loop, &app->cron);
}

void
gp_app_on_stop(gp_app *app, gp_cron_fn *fn, void *arg)
{
    app->stop_fn = fn;
    app->stop_arg = arg;
}

static gp_err
add_route(gp_app *app, const gp_route *r, const char *subject)
{
    route_rt *rt = &app->routes[app->nroutes];
    char      labels[GP_MAX_SUBJECT + 16];
    gp_err    rc;

    rt->r = r;
    rt->app = app;
    snprintf(labels, sizeof(labels), "route=\"%s\"", subject);
    rt->calls = gp_metrics_counter(app->metrics, "gp_requests_total", labels, "Requests received, by route");
    rt->errors = gp_metrics_counter(app->metrics, "gp_request_failures_total", labels, "Requests that ended in any error, by route");
    rt->latency = gp_metrics_hist(app->metrics, "gp_request_seconds", labels, "Time from receipt to reply, by route");
    if (rt->calls == NULL || rt->errors == NULL || rt->latency == NULL)
        return GP_ETOOBIG;
    rc = gp_bus_sub_new_lane(app->bus, subject, (r->flags & GP_R_QUEUE) ? app->service : NULL,
                             (r->flags & GP_R_BULK) ? GP_LANE_BULK : GP_LANE_CONTROL, on_msg,
                             rt, &rt->sub);
    if (rc == GP_EOK)
        app->nroutes++;
    return rc;
}

gp_err
gp_app_serve(gp_app *app, const gp_route *routes, void *state)
{
    gp_err          rc = GP_EOK;
    int             n = 0;

    app->state = state;
    for (const gp_route *r = routes; r != NULL && r->subject != NULL; r++)
        n++;
    if (n + 1 > GP_MAX_ROUTES)
        return GP_ETOOBIG;
    for (int i = 0; i < n && rc == GP_EOK; i++)
        rc = add_route(app, &routes[i], routes[i].subject);
    if (app->cfg.health_subject[0] != '\0')
        snprintf(app->health_subject, sizeof(app->health_subject), "%s", app->cfg.health_subject);
    else
        snprintf(app->health_subject, sizeof(app->health_subject), "gp.int.health.%s", app->service);
    app->health = health_route;
    app->health.subject = app->health_subject;
    if (rc == GP_EOK)
        rc = add_route(app, &app->health, app->health_subject);
    return rc;
}

/* Closing order matters: Redis and PostgreSQL first, so that handlers
 * still waiting on them get UNAVAIL and can reply over the bus, which is
 * closed last. */
static void
shutdown_now(gp_app *app)
{
    if (app->closing)
        return;
    app->closing = true;
    ev_timer_stop(app->loop, &app->drain);
    ev_timer_stop(app->loop, &app->cron);
    gp_kv_free(app->kv);
    app->kv = NULL;
    gp_db_free(app->db);
    app->db = NULL;
    while (app->pending != NULL)            /* handlers that never ended: end them */
        gp_req_done(app->pending, GP_EUNAVAIL);
    gp_http_free(app->http);
    app->http = NULL;
    gp_bus_free(app->bus);
    app->bus = NULL;
    ev_break(app->loop, EVBREAK_ALL);
}

static void
maybe_finish_drain(gp_app *app)
{
    if (app->inflight == 0 && !app->closing)
        shutdown_now(app);
}

static void
drain_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    gp_app *app = GP_CONTAINER_OF(w, gp_app, drain);

    (void)loop;
    (void)revents;
    GP_WARN("drain_timeout", "inflight=%u", app->inflight);
    shutdown_now(app);
}

void
gp_app_stop(gp_app *app)
{
    if (app->stopping)
        return;
    app->stopping = true;
    if (app->stop_fn != NULL)
        app->stop_fn(app, app->stop_arg);
    ev_timer_stop(app->loop, &app->cron);
    for (int i = 0; i < app->nroutes; i++) {       /* take no new work */
        gp_bus_sub_free(app->routes[i].sub);
        app->routes[i].sub = NULL;
    }
    GP_INFO("draining", "inflight=%u", app->inflight);
    ev_timer_init(&app->drain, drain_cb, app->cfg.drain_ms / 1000.0, 0);
    ev_timer_start(app->loop, &app->drain);
    maybe_finish_drain(app);
}

gp_err
gp_app_run(gp_app *app)
{
    ev_run(app->loop, 0);
    GP_INFO("stopped", "instance=%s", app->instance);
    return GP_EOK;
}

void
gp_app_free(gp_app *app)
{
    if (app == NULL)
        return;
    shutdown_now(app);
    if (app->loop != NULL) {
        ev_ref(app->loop);                 /* undo the unrefs of the signal watchers */
        ev_ref(app->loop);
        ev_signal_stop(app->loop, &app->sigint);
        ev_signal_stop(app->loop, &app->sigterm);
    }
    gp_metrics_free(app->metrics);
    free(app);
}

struct ev_loop *gp_app_loop(gp_app *app) { return app->loop; }
gp_bus *gp_app_bus(gp_app *app) { return app->bus; }
gp_kv *gp_app_kv(gp_app *app) { return app->kv; }
gp_db *gp_app_db(gp_app *app) { return app->db; }
gp_metrics *gp_app_metrics(gp_app *app) { return app->metrics; }
const gp_common_cfg *gp_app_cfg(gp_app *app) { return &app->cfg; }
const char *gp_app_instance(gp_app *app) { return app->instance; }

int
gp_app_http_port(gp_app *app)
{
    return app->http != NULL ? gp_http_port(app->http) : -1;
}

gp_err
gp_app_publish(gp_app *app, const char *subject, const gp_msg_desc *d, const void *msg)
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

void
gp_lib_close(void)
{
    nats_CloseAndWait(2000);
}
