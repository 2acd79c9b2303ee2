/* gp/app.h -- the service chassis: one libev loop with its signals, named
 * periodic tasks, the bus, Redis, PostgreSQL, JetStream streams, metrics
 * and health over HTTP, and the dispatcher that turns route tables
 * (contract operations -> handlers) into subscribed, validated, counted,
 * deadline-bound handlers, plain or from JetStream durable consumers.
 *
 * A service's main.c is a gp_service descriptor (its config table,
 * needs, streams, route tables, periodic tasks and hooks) handed to
 * gp_app_main, which loads the config, calls gp_app_new, the hooks,
 * gp_app_every, gp_app_streams, gp_app_serve and gp_app_run in that one
 * order (the functions below, for a program that needs another shape).
 * Handlers never touch NATS or msgpack: they get a decoded request and
 * fill a zeroed reply struct.
 *
 * Everything here runs on the loop thread. */
#ifndef GP_APP_H
#define GP_APP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/bus.h"
#include "gp/call.h"          /* gp_call: typed request/reply */
#include "gp/cfg.h"
#include "gp/codec.h"
#include "gp/db.h"
#include "gp/dbrole.h"
#include "gp/err.h"
#include "gp/kv.h"
#include "gp/metrics.h"
#include "gp/op.h"

struct ev_loop;

/* Options every service has; embed as a member and list it in the
 * service's table with GP_CFG_TABLE(T, member, gp_common_cfg_opts). */
typedef struct gp_common_cfg {
    char     nats_url[512];
    char     nats_user[128];         /* "" = none */
    char     nats_password[128];
    char     nats_token[256];        /* instead of user/password */
    char     redis_host[128];
    int      redis_port;
    bool     redis_cluster;          /* Redis Cluster mode (gp/kv.h) */
    char     redis_seeds[512];       /* cluster seeds "h:p,h:p"; "" = redis-host:redis-port */
    char     redis_user[64];         /* ACL user; "{service}" = the service's name */
    char     redis_password[128];
    char     redis_password_file[256];/* read at start; "{service}" as above */
    char     pg_conninfo[512];
    /* Least privilege (gp/dbrole.h): set, the service migrates first on
     * this connection (a superuser's), as the owner role, making its login
     * role and granting it its list, then logs in as that role; "" = it
     * migrates on pg_conninfo (one user, a development database). */
    char     pg_migrate_conninfo[512];
    char     pg_user[64];            /* the role to log in as ("{service}" = the service's
                                      * name); "" = pg_conninfo's user */
    bool     pg_migrate;             /* false: only check the schema, never migrate */
    bool     migrate_only;           /* gp_app_main: migrate, then exit */
    char     http_host[64];
    int      http_port;              /* 0 = any free port, -1 = no HTTP endpoint */
    char     log_level[8];
    char     instance[64];           /* "" = <hostname>-<pid> */
    char     nats_inbox_prefix[128]; /* reply inbox prefix of the bus; "" = _INBOX */
    unsigned request_timeout_ms;     /* deadline of a request handler */
    unsigned redis_timeout_ms;
    unsigned pg_timeout_ms;
    unsigned pg_pool;
    unsigned drain_ms;               /* how long shutdown waits for in-flight requests */
    unsigned presence_ms;            /* ServicePresence every this often; 0 = none */
    unsigned stream_replicas;        /* replicas of the streams it declares (gp/streamcfg.h) */
    char     stream_max_bytes_mb[512]; /* "NAME=MB,...,*=MB"; "" = each stream's own */
    bool     print_routes;           /* print the operations served, then exit */
    unsigned http_timeout_ms;        /* an HTTP client's read and write deadlines (gp/http.h) */
    /* Per-tenant limits on operations with x-gp-limit-by (the tenant API
     * gp.api.<tenant>.>), per instance (gp/ratelimit.h): */
    unsigned tenant_rate;            /* requests a second; 0 = none */
    unsigned tenant_burst;           /* the bucket: requests at once above the rate */
    unsigned tenant_inflight;        /* requests in flight at once; 0 = no cap */
    char     tenant_limits[2048];    /* overrides "acme=100/200/50 beta=5//" */
    /* Not an option: a program's prepare hook may set it (gp_bus_opts'
     * max_pending; 0 = the default). */
    size_t   bus_max_pending;
} gp_common_cfg;

extern const gp_cfg_opt gp_common_cfg_opts[];

typedef struct gp_app     gp_app;
typedef struct gp_req     gp_req;
typedef struct gp_task    gp_task;
typedef struct gp_binding gp_binding;

/* Returns OK (reply with out), an error (error reply), or GP_EPENDING:
 * the handler will call gp_req_done() later, exactly once.  For an event
 * (an operation without a reply) out is NULL. */
typedef gp_err gp_handler(gp_req *req, const void *in, void *out);

#define GP_R_QUEUE    0x1u    /* one instance of the service takes each message */
#define GP_R_BULK     0x4u    /* bulk telemetry: the bus's bulk lane, so a flood of it never
                               * sheds or delays requests (gp/bus.h lanes) */
#define GP_R_OVERHEAR 0x8u    /* a request another service answers, taken for what it says:
                               * never replied to, not even with an error (the registry,
                               * metering and alerting on a lease renewal that carries a
                               * heartbeat) */

/* A route served from a JetStream durable pull consumer instead of a plain
 * subscription: the message is acked when the handler says OK (or EXISTS:
 * already done), nak'ed with a doubling delay on a transient failure
 * (UNAVAIL, TIMEOUT, NOMEM, INTERNAL, CONFLICT, or the route's deadline),
 * terminated and copied to the dead-letter subject (gp.int.dlq.<service>.
 * <consumer>, stored in the DLQ stream) when it is malformed or refused
 * (DECODE, TYPE, MISSING, RANGE, TOOBIG, INVAL, NOTFOUND, DENIED) or has
 * failed max_deliver times.  Handlers must be idempotent: a message may be
 * delivered again after a crash or a deadline. */
typedef struct gp_durable {
    const char *stream;              /* a stream the service declares (gp_app_streams) */
    const char *name;                /* durable consumer name (a subject token) */
    unsigned    max_deliver;         /* 0 = 5 */
    unsigned    ack_wait_ms;         /* redelivery when neither acked nor nak'ed; 0 = 30000 */
    unsigned    backoff_ms;          /* first nak delay, doubling per delivery; 0 = 500 */
    unsigned    backoff_max_ms;      /* the longest nak delay; 0 = 60000.  A nak'ed message
                                      * keeps its place under max_inflight until it is
                                      * delivered again (nats-server counts it pending), so a
                                      * consumer of max_inflight 1 waits out every delay */
    int         max_inflight;        /* un-ended messages; 0 = 256 */
} gp_durable;

/* One line of a route table: the contract operation served, its handler
 * and how.  A table ends with a NULL op. */
typedef struct gp_route {
    const gp_op      *op;            /* GP_OP_...: subject pattern, request and reply types */
    gp_handler       *fn;
    unsigned          flags;         /* GP_R_QUEUE */
    unsigned          timeout_ms;    /* 0 = request-timeout-ms */
    const void       *data;          /* gp_req_data(): lets one handler serve several ops */
    const gp_durable *durable;       /* non-NULL: served from a JetStream consumer */
} gp_route;

/* A subject parameter bound to a value: {"site", "s1"}.  Lists end with a
 * NULL name. */
typedef struct gp_param {
    const char *name;
    const char *value;
} gp_param;

#define GP_NEED_REDIS  0x1u
#define GP_NEED_PG     0x2u
#define GP_NEED_JS     0x4u

typedef void gp_cron_fn(gp_app *app, void *arg);

/* Checks what the config table alone cannot (tenant-limits): INVAL with
 * the reason in err.  gp_app_main runs it after loading the config (also
 * for --check-config); gp_app_new refuses the same config. */
gp_err gp_app_check_cfg(const gp_common_cfg *cfg, char *err, size_t errlen);

/* Creates the loop context and starts connecting to what `needs` lists
 * (connections come up in the background; the service runs meanwhile).
 * migrations (may be NULL): the service's schema steps, applied under the
 * service's name before PostgreSQL takes queries (gp/db.h); a database
 * with a newer schema than the steps know stops the service and makes
 * gp_app_run return CONFLICT.  With pg-migrate-conninfo the steps run as
 * the owner role on that connection first (gp_db_migrate, roles mode),
 * which grants the login role grants (may be NULL: none), and the pool
 * then logs in as the login and only checks the schema; a failed step,
 * setup or grant stops the service (INTERNAL).  With pg-migrate off the
 * pool only checks. */
gp_err gp_app_new(const char *service, const char *version, const gp_common_cfg *cfg,
                  unsigned needs, const gp_migration *migrations, const gp_grant *grants,
                  gp_app **out);

/* --migrate-only: the migration phase alone, as gp_app_new would run it
 * (roles mode with pg-migrate-conninfo), on a loop of its own, and back:
 * OK migrated; CONFLICT refused; INTERNAL a step, setup or grant failed;
 * INVAL a bad role.  No NATS, no Redis. */
gp_err gp_app_migrate(const char *service, const gp_common_cfg *cfg,
                      const gp_migration *migrations, const gp_grant *grants);

/* A periodic task with its own period and name (in logs and in the
 * metrics gp_task_runs_total, gp_task_seconds, gp_task_overruns_total
 * {task="name"}).  The first run is one period after start.  Tasks stop
 * when shutdown starts.  Owned by the app. */
gp_task *gp_app_every(gp_app *app, const char *name, double period_s, gp_cron_fn *fn, void *arg);
/* Runs the task on the next loop iteration as well as on its period (a
 * trigger, e.g. "capacity changed"); several kicks before it runs are one run. */
void     gp_task_kick(gp_task *t);
/* The task of that name, or NULL: for a service whose tasks gp_app_main
 * added from its table and which kicks one. */
gp_task *gp_app_task(gp_app *app, const char *name);

/* Called when the NATS connection goes down or comes back (the agent
 * renews its lease at once when it is back). */
void   gp_app_on_bus(gp_app *app, gp_bus_conn_cb *fn, void *arg);
/* Called when shutdown starts (before draining), e.g. to stop timers. */
void   gp_app_on_stop(gp_app *app, gp_cron_fn *fn, void *arg);
/* The service's own pending work (e.g. a write queue being flushed from
 * the stop hook) holds the drain like an in-flight request: shutdown
 * waits, up to drain-ms in all, until every hold is released.  When the
 * drain expires, everything is closed anyway (a held write then fails
 * with UNAVAIL).  Release each hold once; releasing after the close is
 * harmless. */
void   gp_app_hold(gp_app *app);
void   gp_app_release(gp_app *app);

/* The JetStream streams this service owns, created or updated to cfg at
 * start (and again after a failure, with backoff).  Ends with a NULL
 * name.  The table must outlive the app.  Needs GP_NEED_JS. */
gp_err gp_app_streams(gp_app *app, const gp_stream_cfg *streams);

/* Subscribes route tables (varargs, ending with NULL) and the built-in
 * health route.  state is what gp_req_state gives every handler.  Each
 * subscribes its op's pattern (every parameter a wildcard). */
gp_err gp_app_serve(gp_app *app, void *state, ...)
    __attribute__((sentinel));
/* The same with the tables in a NULL-terminated array (NULL: none). */
gp_err gp_app_serve_tables(gp_app *app, void *state, const gp_route *const *tables);

/* The health route answers on op with params bound instead of
 * gp.int.health.<service> (the agent answers on its node's subject).
 * Call before gp_app_serve. */
void   gp_app_set_health(gp_app *app, const gp_op *op, const gp_param *params);

/* Declares a table that will be bound later (metrics exist from the start,
 * and --print-routes lists it). */
gp_err gp_app_declare(gp_app *app, const gp_route *table);

/* Subscribes table with the given parameters bound (the others stay
 * wildcards), handlers getting data from gp_req_data instead of each
 * route's own.  Requests already accepted finish normally after unbind. */
gp_err gp_app_bind(gp_app *app, const gp_route *table, const gp_param *params, void *data,
                   gp_binding **out);
/* Unsubscribes a binding at once (a request then gets "no responders"). NULL ok. */
void   gp_app_unbind(gp_binding *b);

/* Runs until SIGINT/SIGTERM or gp_app_stop, then drains in-flight
 * requests (up to drain-ms) and closes everything: GP_EOK, or CONFLICT
 * when the database's schema was refused.  With --print-routes it prints
 * "route <service> <operation id> <subject pattern>" for every operation
 * served, declared or bound, and returns at once. */
gp_err gp_app_run(gp_app *app);
void   gp_app_stop(gp_app *app);
/* Stops as gp_app_stop does, and gp_app_run then returns why (INTERNAL
 * if why is OK): the service refuses to go on and its process fails. */
void   gp_app_fail(gp_app *app, gp_err why);
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
const char          *gp_app_service(gp_app *app);
const char          *gp_app_version(gp_app *app);
const char          *gp_app_instance(gp_app *app);
/* The HTTP port actually bound (when http-port was 0), or -1. */
int                  gp_app_http_port(gp_app *app);

/* Encodes msg with op's request type and publishes it on op's subject
 * with args filled (no reply expected).  INVAL for a bad argument. */
gp_err gp_app_publish(gp_app *app, const gp_op *op, const char *const *args, const void *msg);
/* The same on a subject built by the caller (replies, tests). */
gp_err gp_app_publish_to(gp_app *app, const char *subject, const gp_msg_desc *d,
                         const void *msg);

/* ---- one startup path: a service as a descriptor ---------------------- */

/* A periodic task of a service: its period is an unsigned millisecond
 * field of the service's config struct (GP_SVC_TASK) or fixed
 * (GP_SVC_TASK_FIXED); fn gets the service's state as its arg.  A table
 * ends with a NULL name (GP_SVC_TASKS_END). */
typedef struct gp_svc_task {
    const char *name;                /* in logs and metrics (gp_app_every) */
    gp_cron_fn *fn;
    size_t      period_at;           /* offsetof the config's period field (unsigned, ms) */
    unsigned    period_ms;           /* a fixed period instead, when not 0 (ms) */
} gp_svc_task;

/* The field must be an unsigned (a compile error otherwise). */
#define GP_SVC_TASK(name, T, field, fn) \
    { (name), (fn), _Generic(((T *)0)->field, unsigned: offsetof(T, field)), 0 }
#define GP_SVC_TASK_FIXED(name, ms, fn) { (name), (fn), 0, (ms) }
#define GP_SVC_TASKS_END                { NULL, NULL, 0, 0 }

/* The hooks of a service, each optional.  cfg is the service's config
 * struct and state its state struct, both zeroed by gp_app_main, loaded
 * (cfg) before any hook runs and kept until it returns. */

/* --check-config, after the config table's settings were printed:
 * checks (and prints) what the service derives from them.  Returns the
 * exit status: 0, or 78 (EX_CONFIG) after saying why on stderr. */
typedef int    gp_svc_check_fn(void *cfg, void *state);
/* Before the app exists (no connection yet): what the process needs
 * first (files read, values derived and checked, a device opened, the
 * agent's GPUs, the simulator's fleet).  Returns
 * GP_CFG_CONTINUE to go on, or the exit status to end with (78 after
 * saying why on stderr, 1 for a failure, 0 for a run that ends here). */
typedef int    gp_svc_prepare_fn(void *cfg, void *state);
/* Builds the state on the app: metrics, start functions, bindings.  Not
 * OK: the process exits 1 (the hook logs why).  A service does not call
 * gp_app_on_stop itself: its stop hook is that. */
typedef gp_err gp_svc_init_fn(gp_app *app, const void *cfg, void *state);
/* After the app is freed: frees what prepare and init built, from any
 * point where they stopped (NULL fields are a no-op). */
typedef void   gp_svc_free_fn(void *state);

typedef struct gp_service {
    const char            *name;         /* "registry": logs, metrics, subjects; the
                                          * program's name is gridpool-<name> */
    const char            *version;
    const gp_cfg_opt      *opts;         /* the config table: set with GP_SVC_CFG */
    size_t                 cfg_size;     /* bytes of the config struct */
    size_t                 common_at;    /* offsetof its gp_common_cfg */
    size_t                 state_size;   /* bytes of the state struct */
    unsigned               needs;        /* GP_NEED_* */
    const gp_migration    *migrations;   /* NULL: none */
    const gp_grant        *grants;       /* its login role's privileges (gp/dbrole.h) */
    const gp_stream_cfg   *streams;      /* NULL: none (else needs GP_NEED_JS) */
    const gp_route *const *routes;       /* tables served, NULL-terminated; NULL: none */
    const gp_svc_task     *tasks;        /* NULL: none */
    gp_svc_check_fn       *check;
    gp_svc_prepare_fn     *prepare;
    gp_svc_init_fn        *init;
    gp_cron_fn            *start;        /* serving: first runs, first requests (arg: state) */
    gp_cron_fn            *stop;         /* shutdown starts (arg: state) */
    gp_svc_free_fn        *free;
} gp_service;

/* The config fields of a gp_service: T the config struct, member its
 * gp_common_cfg (a compile error if it is not one), table its options. */
#define GP_SVC_CFG(T, member, table)                                             \
    .opts = (table), .cfg_size = sizeof(T),                                      \
    .common_at = _Generic(((T *)0)->member, gp_common_cfg: offsetof(T, member))

/* The whole life of a service process, in this order:
 *   1. gp_cfg_load (gridpool-<name>): --help, --check-config or a bad
 *      option end here with its status (after --check-config, the check
 *      hook's);
 *   2. logging set up from log-level; prepare; with --migrate-only,
 *      gp_app_migrate (a service without PostgreSQL has nothing to do)
 *      and the end here: 0 migrated, else 1;
 *   3. gp_app_new; the task table (gp_app_every); init; streams;
 *      gp_app_serve_tables; start (also with --print-routes, when the loop
 *      will not run: a hook that must not act then checks print_routes);
 *   4. gp_app_run; the stop hook runs exactly once after init was called:
 *      when shutdown starts, or before the app is freed if it never ran
 *      (a failed start, --print-routes);
 *   5. gp_app_free; free (whenever the config was loaded); gp_lib_close
 *      (when gp_app_new was called).
 * Returns the exit status: the config loader's or a hook's (1, 2 above), 1
 * when the app could not start or gp_app_run said why not (gp_app_fail,
 * a refused schema), 0 after a clean stop. */
int gp_app_main(const gp_service *svc, int argc, char **argv);

/* ---- inside a handler ----------------------------------------------- */

gp_app     *gp_req_app(gp_req *req);
void       *gp_req_state(gp_req *req);
/* The route's data, or the binding's. */
void       *gp_req_data(gp_req *req);
const gp_op *gp_req_op(const gp_req *req);
const char *gp_req_subject(const gp_req *req);
/* The value of a subject parameter of the op ("site"), or "" if none. */
const char *gp_req_param(const gp_req *req, const char *name);
/* Token i of the subject ("gp.node.s1.n7.hb": 2 -> "s1"), or "" past the end. */
const char *gp_req_token(const gp_req *req, int i);
int         gp_req_ntokens(const gp_req *req);
void       *gp_req_out(gp_req *req);
/* The encoded request body; valid only until the handler returns. */
const void *gp_req_body(const gp_req *req, size_t *len);
const void *gp_req_in(gp_req *req);
/* Delivery count of a durable route's message (1 = first), else 1. */
uint64_t    gp_req_deliveries(const gp_req *req);
/* The caller has its answer already: the route's deadline passed (TIMEOUT
 * went out) or the handler dropped it.  Work still queued for it is for
 * nobody (a registration waiting for its batch). */
bool        gp_req_answered(const gp_req *req);
/* Sets the human-readable detail of the error reply; returns code, so a
 * handler can `return gp_req_fail(req, GP_EINVAL, "price must be >= 0");` */
gp_err      gp_req_fail(gp_req *req, gp_err code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The message is dropped unanswered, as if it never arrived (a simulated
 * node that hangs); the requester sees its own deadline.  A handler
 * returns what this returns. */
gp_err      gp_req_drop(gp_req *req);
/* Ends a request whose handler returned GP_EPENDING: replies with out
 * (rc OK) or an error, and frees the request.  After the deadline has
 * passed the reply was already sent (TIMEOUT) and this only frees. */
void        gp_req_done(gp_req *req, gp_err rc);

#endif
