/* testsvc.c -- a service built on the chassis for the chassis' own tests.
 *
 * It is shaped like every gridpool service (config table, routes, run)
 * and has one route per dependency: echo (no I/O), sleep (PostgreSQL
 * pg_sleep, so a slow query is in flight) and redis (a Redis round trip). */
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "gp/app.h"
#include "gp/log.h"
#include "msg_gen.h"

typedef struct testsvc_cfg {
    gp_common_cfg common;
} testsvc_cfg;

static const gp_cfg_opt testsvc_opts[] = {
    GP_CFG_TABLE(testsvc_cfg, common, gp_common_cfg_opts),
    GP_CFG_END
};

static gp_err
on_echo(gp_req *req, const void *in, void *out)
{
    gp_buf b;
    gp_err rc;

    (void)req;
    gp_buf_init(&b, 0);
    rc = gp_msg_encode(&msg_echo_desc, in, &b);
    if (rc == GP_EOK)
        rc = gp_msg_decode(&msg_echo_desc, b.p, b.n, out, NULL, 0);
    gp_buf_fini(&b);
    return rc;
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

static const gp_route testsvc_routes[] = {
    {"gp.test.echo", &msg_echo_desc, &msg_echo_desc, on_echo, GP_R_QUEUE, 0},
    {"gp.test.sleep", &msg_sleep_request_desc, &msg_sleep_request_desc, on_sleep, GP_R_QUEUE, 0},
    {"gp.test.redis", &msg_sleep_request_desc, &msg_sleep_request_desc, on_redis, GP_R_QUEUE, 0},
    {NULL, NULL, NULL, NULL, 0, 0}
};

int
main(int argc, char **argv)
{
    testsvc_cfg cfg;
    gp_app     *app = NULL;
    int         code;
    gp_err      rc;

    gp_cfg_load("testsvc", testsvc_opts, &cfg, argc, argv, NULL, &code);
    if (code != GP_CFG_CONTINUE)
        return code;
    rc = gp_app_new("testsvc", "test", &cfg.common, GP_NEED_REDIS | GP_NEED_PG, NULL, &app);
    if (rc == GP_EOK)
        rc = gp_app_serve(app, testsvc_routes, NULL);
    if (rc == GP_EOK)
        rc = gp_app_run(app);
    gp_app_free(app);
    gp_lib_close();
    return rc == GP_EOK ? 0 : 1;
}
