/* chassis_test.c -- the chassis under a real service (tests/helpers/testsvc)
 * with real nats-server, redis-server and PostgreSQL:
 *   - typed errors for malformed, wrongly typed, incomplete and oversized
 *     input; the service keeps serving; the error counters show them;
 *   - a handler waiting on pg_sleep does not stop other requests;
 *   - NATS, Redis and PostgreSQL restarted in turn under the running
 *     service: it reconnects and serves again, same process;
 *   - SIGTERM drains and exits 0.
 * GP_SVC_WRAP (e.g. "valgrind ...") runs the service under a wrapper;
 * GP_QUICK=1 skips the restarts (for the valgrind run). */
#include <msgpack.h>
#include <nats/nats.h>

#include "msg_gen.h"
#include "test_stack.h"

static struct ev_loop *loop;
static gp_bus         *bus;
static int             http_port;

static pid_t
start_service(void)
{
    char        port[16];
    const char *argv[32];
    int         argc = 0;
    const char *wrap = getenv("GP_SVC_WRAP");
    char        wrapbuf[512], bin[512];

    snprintf(port, sizeof(port), "%d", http_port);
    snprintf(bin, sizeof(bin), "%s/test/bin/testsvc", tl_env("GP_BUILD"));
    if (wrap != NULL && *wrap != '\0') {
        snprintf(wrapbuf, sizeof(wrapbuf), "%s", wrap);
        for (char *t = strtok(wrapbuf, " "); t != NULL && argc < 20; t = strtok(NULL, " "))
            argv[argc++] = t;
    }
    argv[argc++] = bin;
    argv[argc++] = "--http-port";
    argv[argc++] = port;
    argv[argc++] = "--pg-timeout-ms";
    argv[argc++] = "3000";
    argv[argc++] = "--request-timeout-ms";
    argv[argc++] = "3000";
    argv[argc] = NULL;
    return tl_spawn((char *const *)argv);
}

static gp_err
echo_once(unsigned timeout_ms)
{
    const msg_sample *s = NULL;
    msg_echo          out = {0};
    char              detail[GP_ERRBUF_LEN];
    gp_err            rc;

    for (const msg_sample *m = msg_all; m->desc != NULL; m++)
        if (m->desc == &msg_echo_desc)
            s = m;
    rc = tl_call(loop, bus, "gp.test.echo", &msg_echo_desc, s->sample, &msg_echo_desc, &out,
                 timeout_ms, detail, sizeof(detail));
    if (rc == GP_EOK && !gp_msg_equal(&msg_echo_desc, s->sample, &out))
        rc = GP_EINTERNAL;
    gp_msg_clear(&msg_echo_desc, &out);
    return rc;
}

static gp_err
call_ms(const char *subject, uint32_t ms, unsigned timeout_ms)
{
    msg_sleep_request in = {.ms = ms}, out = {0};
    char              detail[GP_ERRBUF_LEN];

    return tl_call(loop, bus, subject, &msg_sleep_request_desc, &in, &msg_sleep_request_desc, &out,
                   timeout_ms, detail, sizeof(detail));
}

/* Retries op until OK or the time is up; returns seconds taken or -1. */
static double
until_ok(const char *subject, double limit_s)
{
    double t0 = tl_now();

    while (tl_now() - t0 < limit_s) {
        gp_err rc = subject ? call_ms(subject, 1, 1000) : echo_once(1000);
        if (rc == GP_EOK)
            return tl_now() - t0;
        usleep(100000);
    }
    return -1;
}

static void
expect_code(const char *what, const void *p, size_t n, const char *subj, gp_err want)
{
    tl_reply r;
    char     detail[GP_ERRBUF_LEN] = "";
    gp_err   rc = tl_request(loop, bus, subj, p, n, 3000, &r);

    if (rc == GP_EOK)
        rc = tl_reply_code(&r, &msg_sleep_request_desc, detail, sizeof(detail));
    T_OKM(rc == want, "%s -> %s (got %s: %s)", what, gp_err_name(want), gp_err_name(rc), detail);
    free(r.data);
    T_OKM(echo_once(2000) == GP_EOK, "service still answers after %s", what);
}

/* Our own bus refuses to send a body over the limit, so the oversized
 * request goes out through a bare cnats connection (blocking is fine in
 * a test client). */
static void
expect_big(const char *blob, size_t n)
{
    natsConnection *nc = NULL;
    natsMsg        *reply = NULL;
    tl_reply        r = {0};
    char            detail[GP_ERRBUF_LEN] = "";
    gp_err          rc = GP_EUNAVAIL;

    if (natsConnection_ConnectTo(&nc, tl_env("GP_NATS_URL")) == NATS_OK &&
        natsConnection_Request(&reply, nc, "gp.test.sleep", blob, (int)n, 3000) == NATS_OK) {
        r.data = (char *)natsMsg_GetData(reply);
        r.len = (size_t)natsMsg_GetDataLength(reply);
        rc = tl_reply_code(&r, &msg_sleep_request_desc, detail, sizeof(detail));
    }
    T_OKM(rc == GP_ETOOBIG, "body of %zu bytes -> TOOBIG (got %s: %s)", n, gp_err_name(rc), detail);
    natsMsg_Destroy(reply);
    natsConnection_Destroy(nc);
    T_OKM(echo_once(2000) == GP_EOK, "service still answers after an oversized body");
}

static void
pack_map1(msgpack_sbuffer *sb, const char *key, int as_string)
{
    msgpack_packer pk;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, key, strlen(key));
    if (as_string)
        msgpack_pack_str_with_body(&pk, "ten", 3);
    else
        msgpack_pack_uint32(&pk, 10);
}

static void
test_bad_input(void)
{
    static const char garbage[] = "\xc1\xc1\xc1 not msgpack";
    msgpack_sbuffer   sb;
    size_t            big = GP_MAX_MSG_BYTES + 4096;
    char             *blob = calloc(1, big);
    char             *body = NULL;

    expect_code("malformed msgpack", garbage, sizeof(garbage) - 1, "gp.test.sleep", GP_EDECODE);
    pack_map1(&sb, "ms", 1);
    expect_code("wrong field type", sb.data, sb.size, "gp.test.sleep", GP_ETYPE);
    msgpack_sbuffer_destroy(&sb);
    pack_map1(&sb, "unrelated", 0);
    expect_code("missing required field", sb.data, sb.size, "gp.test.sleep", GP_EMISSING);
    msgpack_sbuffer_destroy(&sb);
    blob[0] = (char)0x80;     /* an empty map followed by junk: size is checked first */
    expect_big(blob, big);
    free(blob);

    T_OK(tl_http_get(http_port, "/metrics", &body) > 0);
    T_EQ_INT(tl_metric(body, "gp_request_errors_total{route=\"gp.test.sleep\",code=\"DECODE\"}"), 1);
    T_EQ_INT(tl_metric(body, "gp_request_errors_total{route=\"gp.test.sleep\",code=\"TYPE\"}"), 1);
    T_EQ_INT(tl_metric(body, "gp_request_errors_total{route=\"gp.test.sleep\",code=\"MISSING\"}"), 1);
    T_EQ_INT(tl_metric(body, "gp_request_errors_total{route=\"gp.test.sleep\",code=\"TOOBIG\"}"), 1);
    T_OK(tl_metric(body, "gp_requests_total{route=\"gp.test.echo\"}") >= 4);
    free(body);
}

typedef struct slow {
    int    done;
    gp_err err;
    double at;
} slow;

static void
slow_cb(void *arg, gp_err err, const void *reply, const char *detail)
{
    slow *s = arg;

    (void)reply;
    (void)detail;
    s->err = err;
    s->at = tl_now();
    s->done = 1;
}

/* pg_sleep(1) in flight; echo requests meanwhile must be answered fast. */
static void
test_not_blocked(void)
{
    msg_sleep_request in = {.ms = 1000};
    slow              s = {0};
    double            t0 = tl_now(), worst = 0;
    int               answered = 0;

    T_OK(gp_call(bus, "gp.test.sleep", &msg_sleep_request_desc, &in, &msg_sleep_request_desc, 5000,
                 slow_cb, &s) == GP_EOK);
    while (!s.done && tl_now() - t0 < 0.8) {
        double t1 = tl_now();

        if (echo_once(1000) == GP_EOK)
            answered++;
        if (tl_now() - t1 > worst)
            worst = tl_now() - t1;
    }
    tl_run_until(loop, &s.done, 5);
    T_OKM(s.done && s.err == GP_EOK, "pg_sleep(1) request answered OK");
    T_OKM(s.at - t0 >= 0.95, "pg_sleep request took %.3f s (>= 1 s)", s.at - t0);
    T_OKM(answered >= 20, "%d echo requests answered while pg_sleep(1) was in flight", answered);
    T_OKM(worst < 0.2, "slowest echo during pg_sleep: %.1f ms (< 200 ms)", worst * 1000);
}

/* A handler still waiting when its route's deadline passes: the caller
 * gets TIMEOUT at the deadline, and the late completion is only freed. */
static void
test_deadline(void)
{
    double t0 = tl_now();
    gp_err rc = call_ms("gp.test.sleep", 4000, 8000);
    double took = tl_now() - t0;

    T_OKM(rc == GP_ETIMEOUT && took > 2.9 && took < 3.6,
          "a handler past the 3 s request deadline is answered TIMEOUT after %.2f s (%s)", took,
          gp_err_name(rc));
    T_OKM(echo_once(2000) == GP_EOK, "service answers while the late handler still runs");
    tl_run_until(loop, &(int){0}, 1.5);          /* the late completion arrives and is freed */
    T_OKM(until_ok("gp.test.sleep", 10) >= 0, "the route works after a late completion");
}

/* The one typed call (gp/call.h): a reply decoded, a remote error reply
 * (the handler missed its deadline: TIMEOUT from the service) told apart
 * from transport errors (nobody listening: NOROUTE; no reply at all). */
static void
test_call(void)
{
    msg_sleep_request in = {.ms = 1}, out = {0};
    char              detail[GP_ERRBUF_LEN];
    bool              transport = true;
    gp_err            rc;

    rc = gp_call_wait(loop, bus, "gp.test.sleep", &msg_sleep_request_desc, &in,
                      &msg_sleep_request_desc, &out, 3000, detail, sizeof(detail), &transport);
    T_OKM(rc == GP_EOK && !transport && out.ms == 1, "gp_call_wait: reply decoded (%s)",
          gp_err_name(rc));
    gp_msg_clear(&msg_sleep_request_desc, &out);
    in.ms = 4000;
    rc = gp_call_wait(loop, bus, "gp.test.sleep", &msg_sleep_request_desc, &in,
                      &msg_sleep_request_desc, &out, 8000, detail, sizeof(detail), &transport);
    T_OKM(rc == GP_ETIMEOUT && !transport && detail[0] != '\0',
          "remote TIMEOUT error reply is not a transport error (%s, transport %d: %s)",
          gp_err_name(rc), (int)transport, detail);
    gp_msg_clear(&msg_sleep_request_desc, &out);
    rc = gp_call_wait(loop, bus, "gp.test.nobody", &msg_sleep_request_desc, &in,
                      &msg_sleep_request_desc, &out, 3000, detail, sizeof(detail), &transport);
    T_OKM(rc == GP_ENOROUTE && transport, "nobody listening: NOROUTE, transport (%s, %d)",
          gp_err_name(rc), (int)transport);
    tl_run_until(loop, &(int){0}, 1.5);          /* the late sleep completion is freed */
}

static void
test_restarts(pid_t pid)
{
    double t;

    tl_stack("stop-nats");
    usleep(1500000);
    tl_stack("start-nats");
    t = until_ok(NULL, 20);
    T_OKM(t >= 0, "serves again %.2f s after nats-server restart", t);

    tl_stack("stop-redis");
    T_OKM(call_ms("gp.test.redis", 1, 3000) != GP_EOK, "redis route fails while Redis is down");
    T_OK(echo_once(2000) == GP_EOK);
    tl_stack("start-redis");
    t = until_ok("gp.test.redis", 20);
    T_OKM(t >= 0, "redis route OK %.2f s after redis-server restart", t);

    tl_stack("stop-pg");
    T_OKM(call_ms("gp.test.sleep", 1, 5000) != GP_EOK, "pg route fails while PostgreSQL is down");
    T_OK(echo_once(2000) == GP_EOK);
    tl_stack("start-pg");
    t = until_ok("gp.test.sleep", 30);
    T_OKM(t >= 0, "pg route OK %.2f s after PostgreSQL restart", t);
    T_OKM(kill(pid, 0) == 0, "the same service process served throughout");
}

int
main(void)
{
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "chassis-test"};
    const char *quick = getenv("GP_QUICK");
    pid_t       pid;
    int         st;
    double      t;

    loop = ev_loop_new(EVFLAG_AUTO);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    http_port = tl_free_port();
    pid = start_service();
    t = until_ok(NULL, quick ? 60 : 15);
    T_OKM(t >= 0, "service answers %.2f s after start", t);
    T_OKM(until_ok("gp.test.sleep", 30) >= 0, "service reached PostgreSQL");
    T_OKM(until_ok("gp.test.redis", 30) >= 0, "service reached Redis");
    test_bad_input();
    test_not_blocked();
    test_deadline();
    test_call();
    if (quick == NULL)
        test_restarts(pid);
    kill(pid, SIGTERM);
    st = tl_wait_exit(pid, quick ? 60 : 10);
    T_OKM(st == 0, "service drained and exited 0 on SIGTERM (status %d)", st);
    gp_bus_free(bus);
    ev_loop_destroy(loop);
    gp_lib_close();
    return T_DONE();
}
