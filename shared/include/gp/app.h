/* gp/app.h -- the service chassis: one libev loop with its signals, one
 * periodic timer, the bus, Redis, PostgreSQL, metrics and health over
 * HTTP, and the dispatcher that turns a table of routes into subscribed,
 * validated, counted, deadline-bound handlers.
 *
 * A service's main.c loads its config table, calls gp_app_new, builds
 * its state, calls gp_app_serve with its routes, and gp_app_run.
 * Handlers never touch NATS or msgpack: they get a decoded request and
 * fill a zeroed reply struct.
 *
 * Everything here runs on the loop thread. */
#ifndef GP_APP_H
#define GP_APP_H

#include <stdbool.h>
#include <stdint.h>

#include "gp/bus.h"
#include "gp/call.h"          /* gp_call: typed request/reply */
#include "gp/cfg.h"
#include "gp/codec.h"
#include "gp/db.h"
#include "gp/err.h"
#include "gp/kv.h"
#include "gp/metrics.h"

struct ev_loop;

/* Options every service has; embed as a member and list it in the
 * service's table with GP_CFG_TABLE(T, member, gp_common_cfg_opts). */
typedef struct gp_common_cfg {
    char     nats_url[512];
    char     nats_user[128];         /* "" = none */
    char     nats_password[128];
    char     nats_token[256];        /* instead of user/password */
    char     health_subject[256];    /* "" = gp.int.health.<service> */
    char     redis_host[128];
    int      redis_port;
    char     pg_conninfo[512];
    char     http_host[64];
    int      http_port;              /* 0 = any free port, -1 = no HTTP endpoint */
    char     log_level[8];
    char     instance[64];           /* "" = <hostname>-<pid> */
    unsigned request_timeout_ms;     /* deadline of a request handler */
    unsigned redis_timeout_ms;
    unsigned pg_timeout_ms;
    unsigned pg_pool;
    unsigned drain_ms;               /* how long shutdown waits for in-flight requests */
} gp_common_cfg;

extern const gp_cfg_opt gp_common_cfg_opts[];

typedef struct gp_app gp_app;
typedef struct gp_req gp_req;

/* Returns OK (reply with out), an error (error reply), or GP_EPENDING:
 * the handler will call gp_req_done() later, exactly once. */
typedef gp_err gp_handler(gp_req *req, const void *in, void *out);

#define GP_R_QUEUE    0x1u    /* one instance of the service takes each message */
#define GP_R_NOREPLY  0x2u    /* events (heartbeats): no reply; errors counted and logged */
#define GP_R_BULK     0x4u    /* bulk telemetry: the bus's bulk lane, so a flood of it never
                               * sheds or delays requests (gp/bus.h lanes) */

typedef struct gp_route {
    const char        *subject;      /* may hold NATS wildcards (* and >) */
    const gp_msg_desc *in;
    const gp_msg_desc *out;          /* NULL with GP_R_NOREPLY */
    gp_handler        *fn;
    unsigned           flags;
    unsigned           timeout_ms;   /* 0 = request-timeout-ms */
} gp_route;

#define GP_NEED_REDIS  0x1u
#define GP_NEED_PG     0x2u
#define GP_NEED_JS     0x4u

typedef void gp_cron_fn(gp_app *app, void *arg);

/* Creates the loop context and starts connecting to what `needs` lists
 * (connections come up in the background; the service runs meanwhile).
 * migrate_sql (may be NULL) runs on every new PostgreSQL connection. */
gp_err gp_app_new(const char *service, const char *version, const gp_common_cfg *cfg,
                  unsigned needs, const char *migrate_sql, gp_app **out);
/* One periodic timer for the service's housekeeping. */
void   gp_app_set_cron(gp_app *app, double interval_s, gp_cron_fn *fn, void *arg);
/* Called when shutdown starts (before draining), e.g. to stop timers. */
void   gp_app_on_stop(gp_app *app, gp_cron_fn *fn, void *arg);
/* Subscribes the routes (table ends with a NULL subject) and the built-in
 * health route gp.int.health.<service>.  state is what gp_req_state gives. */
gp_err gp_app_serve(gp_app *app, const gp_route *routes, void *state);
/* Runs until SIGINT/SIGTERM or gp_app_stop, then drains in-flight
 * requests (up to drain-ms) and closes everything. */
gp_err gp_app_run(gp_app *app);
void   gp_app_stop(gp_app *app);
void   gp_app_free(gp_app *app);
/* At process exit, after the last gp_app_free: releases the NATS
 * library's own threads and memory (so valgrind sees a clean exit). */
void   gp_lib_close(void);

struct ev_loop      *gp_app_loop(gp_app *app);
gp_bus              *gp_app_bus(gp_app *app);
gp_kv               *gp_app_kv(gp_app *app);
gp_db               *gp_app_db(gp_app *app);
gp_metrics          *gp_app_metrics(gp_app *app);
const gp_common_cfg *gp_app_cfg(gp_app *app);
const char          *gp_app_instance(gp_app *app);
/* The HTTP port actually bound (when http-port was 0), or -1. */
int                  gp_app_http_port(gp_app *app);

/* Encodes msg with d and publishes it (no reply expected). */
gp_err gp_app_publish(gp_app *app, const char *subject, const gp_msg_desc *d, const void *msg);

/* ---- inside a handler ----------------------------------------------- */

gp_app     *gp_req_app(gp_req *req);
void       *gp_req_state(gp_req *req);
const char *gp_req_subject(const gp_req *req);
/* Token i of the subject ("gp.node.s1.n7.hb": 2 -> "s1"), or "" past the end. */
const char *gp_req_token(const gp_req *req, int i);
int         gp_req_ntokens(const gp_req *req);
void       *gp_req_out(gp_req *req);
/* The encoded request body; valid only until the handler returns. */
const void *gp_req_body(const gp_req *req, size_t *len);
const void *gp_req_in(gp_req *req);
/* Sets the human-readable detail of the error reply; returns code, so a
 * handler can `return gp_req_fail(req, GP_EINVAL, "price must be >= 0");` */
gp_err      gp_req_fail(gp_req *req, gp_err code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Ends a request whose handler returned GP_EPENDING: replies with out
 * (rc OK) or an error, and frees the request.  After the deadline has
 * passed the reply was already sent (TIMEOUT) and this only frees. */
void        gp_req_done(gp_req *req, gp_err rc);

#endif
