/* testsvc.c -- a service built on the chassis for the chassis' own tests.
 *
 * It is shaped like every gridpool service (config table, routes, tasks,
 * streams, run) and has one route per dependency: echo (no I/O), sleep
 * (PostgreSQL pg_sleep, so a slow query is in flight), redis (a Redis
 * round trip), call (a bus request to gp.test.blackhole, so a call is
 * outstanding), and durable (a JetStream durable consumer whose messages
 * say how to fail); and two periodic tasks, "tick" and "tock". */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include <ev.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "gp/app.h"
#include "gp/log.h"
#include "msg_gen.h"

typedef struct testsvc_cfg {
    gp_common_cfg common;
    unsigned      stop_hold_ms;
} testsvc_cfg;

static const gp_cfg_opt testsvc_opts[] = {
    GP_CFG_TABLE(testsvc_cfg, common, gp_common_cfg_opts),
    GP_CFG_UINT("stop-hold-ms", testsvc_cfg, stop_hold_ms, 0, 0, 600000, "at stop, hold the drain this long (gp_app_hold), 0 = no hold"),
    GP_CFG_END
};

/* Moves the decoded request into the reply instead of copying it: the
 * chassis clears both structs after the reply is sent, and a zeroed struct
 * clears to nothing.  So the handler does no codec work of its own and
 * make bench's chassis figure measures the chassis (decode, dispatch,
 * counters, encode, bus) against a raw cnats responder that echoes bytes. */
static gp_err
on_echo(gp_req *req, const void *in, void *out)
{
    (void)req;
    memcpy(out, in, msg_echo_desc.size);
    memset((void *)(uintptr_t)in, 0, msg_echo_desc.size);
    return GP_EOK;
}

static void
slept(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req *req = arg;

    (void)res;
    (void)nres;
    if (err != GP_EOK)
        gp_req_fail(req, err, "%s", detail);
    gp_req_done(req, err);
}

static gp_err
on_sleep(gp_req *req, const void *in, void *out)
{
    const msg_sleep_request *q = in;
    char                     secs[32];
    const char              *params[1] = {secs};
    gp_err                   rc;

    *(msg_sleep_request *)out = *q;
    snprintf(secs, sizeof(secs), "%.3f", q->ms / 1000.0);
    rc = gp_db_query(gp_app_db(gp_req_app(req)), "SELECT pg_sleep($1::float8)", 1, params,
                     q->ms + 5000, slept, req);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, rc, "database not reachable");
}

static void
redis_done(void *arg, const redisReply *r, gp_err err)
{
    gp_req *req = arg;

    if (err == GP_EOK && r->type == REDIS_REPLY_ERROR)
        err = gp_req_fail(req, GP_EINTERNAL, "%s", r->str);
    gp_req_done(req, err);
}

static gp_err
on_redis(gp_req *req, const void *in, void *out)
{
    const msg_sleep_request *q = in;
    gp_err                   rc;

    *(msg_sleep_request *)out = *q;
    rc = gp_kv_cmdf(gp_app_kv(gp_req_app(req)), redis_done, req, "SET gp:test:last %u", q->ms);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, rc, "redis not reachable");
}

static void
durable_recorded(void *arg, const redisReply *r, gp_err err)
{
    gp_req *req = arg;

    if (err == GP_EOK && r->type == REDIS_REPLY_ERROR)
        err = gp_req_fail(req, GP_EINTERNAL, "%s", r->str);
    gp_req_done(req, err);
}

/* Fails as the item says; on success records "<id> = deliveries" in Redis. */
static gp_err
on_durable(gp_req *req, const void *in, void *out)
{
    const msg_durable_item *q = in;
    uint64_t                n = gp_req_deliveries(req);
    gp_err                  rc;

    (void)out;
    if (q->fail == MSG_DURABLE_ITEM_FAIL_PERMANENT)
        return gp_req_fail(req, GP_EINVAL, "item %s refused", q->id);
    if (q->fail == MSG_DURABLE_ITEM_FAIL_TRANSIENT && n <= q->fail_times)
        return gp_req_fail(req, GP_EUNAVAIL, "item %s: delivery %llu fails", q->id,
                           (unsigned long long)n);
    rc = gp_kv_cmdf(gp_app_kv(gp_req_app(req)), durable_recorded, req,
                    "HSET gp:test:durable %s %llu", q->id, (unsigned long long)n);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, rc, "redis not reachable");
}

static void
called(void *arg, gp_err err, const void *reply, const char *detail)
{
    gp_req *req = arg;

    (void)reply;
    if (err != GP_EOK)
        gp_req_fail(req, err, "blackhole: %s", detail);
    gp_req_done(req, err);
}

static gp_err
on_call(gp_req *req, const void *in, void *out)
{
    const msg_sleep_request *q = in;
    gp_err                   rc;

    *(msg_sleep_request *)out = *q;
    rc = gp_call(gp_app_bus(gp_req_app(req)), GP_OP_TEST_BLACKHOLE->address,
                 &msg_sleep_request_desc, q, &msg_sleep_request_desc, q->ms, called, req);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, rc, "call failed");
}

static void
tick(gp_app *app, void *arg)
{
    (void)app;
    (*(uint64_t *)arg)++;
}

static const gp_durable durable = {.stream = "GPTEST", .name = "testsvc-items",
                                   .max_deliver = 4, .ack_wait_ms = 5000, .backoff_ms = 50};

static const char *const test_stream_subjects[] = {GP_PAT_TEST_DURABLE, NULL};
static const gp_stream_cfg test_streams[] = {
    {.name = "GPTEST", .subjects = (const char **)test_stream_subjects, .max_age_s = 3600,
     .duplicate_window_s = 60, .memory = true},
    {.name = NULL},
};

static const gp_route testsvc_routes[] = {
    {GP_OP_TEST_ECHO, on_echo, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_TEST_SLEEP, on_sleep, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_TEST_REDIS, on_redis, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_TEST_CALL, on_call, GP_R_QUEUE, 60000, NULL, NULL},
    {NULL},
};

static const gp_route testsvc_durable_routes[] = {
    {GP_OP_TEST_DURABLE, on_durable, 0, 2000, NULL, &durable},
    {NULL},
};

/* --stop-hold-ms: the stop hook holds the drain, as a service flushing
 * its own queue would, and releases it after that long. */
typedef struct stop_hold {
    gp_app  *app;
    ev_timer t;
    unsigned ms;
} stop_hold;

static void
hold_over(struct ev_loop *loop, ev_timer *w, int revents)
{
    stop_hold *h = (stop_hold *)((char *)w - offsetof(stop_hold, t));

    (void)loop;
    (void)revents;
    GP_INFO("stop_hold_released", "ms=%u", h->ms);
    gp_app_release(h->app);
}

static void
on_stop(gp_app *app, void *arg)
{
    stop_hold *h = arg;

    h->app = app;
    gp_app_hold(app);
    ev_timer_init(&h->t, hold_over, h->ms / 1000.0, 0);
    ev_timer_start(gp_app_loop(app), &h->t);
}

int
main(int argc, char **argv)
{
    static stop_hold hold;
    testsvc_cfg cfg;
    gp_app     *app = NULL;
    uint64_t    ticks = 0, tocks = 0;
    int         code;
    gp_err      rc;

    gp_cfg_load("testsvc", testsvc_opts, &cfg, argc, argv, NULL, &code);
    if (code != GP_CFG_CONTINUE)
        return code;
    rc = gp_app_new("testsvc", "test", &cfg.common, GP_NEED_REDIS | GP_NEED_PG | GP_NEED_JS,
                    NULL, NULL, &app);
    if (rc == GP_EOK && (gp_app_every(app, "tick", 0.1, tick, &ticks) == NULL ||
                         gp_app_every(app, "tock", 0.25, tick, &tocks) == NULL))
        rc = GP_ENOMEM;
    if (rc == GP_EOK && cfg.stop_hold_ms > 0) {
        hold.ms = cfg.stop_hold_ms;
        gp_app_on_stop(app, on_stop, &hold);
    }
    if (rc == GP_EOK)
        rc = gp_app_streams(app, test_streams);
    if (rc == GP_EOK)
        rc = gp_app_serve(app, NULL, testsvc_routes, testsvc_durable_routes, NULL);
    if (rc == GP_EOK)
        rc = gp_app_run(app);
    gp_app_free(app);
    gp_lib_close();
    return rc == GP_EOK ? 0 : 1;
}
