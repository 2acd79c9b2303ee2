/* app_test.c -- the chassis' periodic tasks, JetStream durable routes and
 * shutdown, under the real test service (tests/helpers/testsvc) with real
 * nats-server (JetStream), redis-server and PostgreSQL:
 *   - two tasks, each on its own period, counted apart in the metrics;
 *   - a durable route acks what succeeds, retries a transient failure
 *     until it succeeds, dead-letters a refused message and one that keeps
 *     failing past its maximum deliveries (copied to gp.int.dlq.<service>.
 *     <consumer> with the reason), counting each;
 *   - SIGTERM while a handler waits on an outstanding bus call (and drain
 *     shorter than that call): the service exits 0 with no sanitizer
 *     report (with-stack.sh fails the test on any);
 *   - a stop hook's gp_app_hold keeps the drain open until released,
 *     never past drain-ms. */
#include <hiredis/hiredis.h>

#include "msg_gen.h"
#include "test_stack.h"

static struct ev_loop *loop;
static gp_bus         *bus;
static int             http_port;

static pid_t
start_service_hold(const char *drain_ms, const char *hold_ms)
{
    char        port[16], bin[512];
    const char *argv[16];
    int         argc = 0;

    snprintf(port, sizeof(port), "%d", http_port);
    snprintf(bin, sizeof(bin), "%s/test/bin/testsvc", tl_env("GP_BUILD"));
    argv[argc++] = bin;
    argv[argc++] = "--http-port";
    argv[argc++] = port;
    argv[argc++] = "--drain-ms";
    argv[argc++] = drain_ms;
    if (hold_ms != NULL) {
        argv[argc++] = "--stop-hold-ms";
        argv[argc++] = hold_ms;
    }
    argv[argc] = NULL;
    return tl_spawn((char *const *)argv);
}

static pid_t
start_service(const char *drain_ms)
{
    return start_service_hold(drain_ms, NULL);
}

static bool
up(double limit_s)
{
    double t0 = tl_now();

    while (tl_now() - t0 < limit_s) {
        msg_sleep_request in = {.ms = 1}, out = {0};
        char              detail[GP_ERRBUF_LEN];

        if (tl_call(loop, bus, GP_OP_TEST_REDIS->address, &msg_sleep_request_desc, &in,
                    &msg_sleep_request_desc, &out, 1000, detail, sizeof(detail)) == GP_EOK)
            return true;
        usleep(100000);
    }
    return false;
}

static long long
metric(const char *series)
{
    char     *body = NULL;
    long long v = -1;

    if (tl_http_get(http_port, "/metrics", &body) > 0)
        v = tl_metric(body, series);
    free(body);
    return v;
}

static void
test_tasks(void)
{
    long long tick0 = metric("gp_task_runs_total{task=\"tick\"}");
    long long tock0 = metric("gp_task_runs_total{task=\"tock\"}");
    long long tick, tock;

    tl_run_until(loop, &(int){0}, 2.0);
    tick = metric("gp_task_runs_total{task=\"tick\"}") - tick0;
    tock = metric("gp_task_runs_total{task=\"tock\"}") - tock0;
    /* 100 ms and 250 ms periods: about 20 and 8 runs in 2 s */
    T_OKM(tick >= 12 && tick <= 22, "task tick (100 ms) ran %lld times in 2 s", tick);
    T_OKM(tock >= 5 && tock <= 9, "task tock (250 ms) ran %lld times in 2 s", tock);
    T_OKM(tick > tock, "each task keeps its own period (%lld > %lld)", tick, tock);
    T_OKM(metric("gp_task_seconds_count{task=\"tick\"}") > 0, "task durations are observed");
}

/* ---- durable routes ------------------------------------------------------ */

typedef struct dlq {
    int             n;
    msg_dead_letter last[8];
} dlq;

static void
on_dlq(void *arg, const gp_bus_msg *m)
{
    dlq *d = arg;

    if (d->n < 8 &&
        gp_msg_decode(&msg_dead_letter_desc, m->data, m->len, &d->last[d->n], NULL, 0) == GP_EOK)
        d->n++;
}

static int js_done, js_ok;

static void
js_pub_cb(void *arg, gp_err err)
{
    (void)arg;
    js_done++;
    js_ok += err == GP_EOK;
}

static void
publish_item(const char *id, int fail, unsigned fail_times)
{
    msg_durable_item it = {0};
    char             subject[GP_MAX_SUBJECT + 1], msgid[80];
    gp_buf           b;

    snprintf(it.id, sizeof(it.id), "%s", id);
    it.fail = fail;
    it.fail_times = fail_times;
    it.has = ~0ull;
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_msg_encode(&msg_durable_item_desc, &it, &b);
    gp_op_subjectf(GP_OP_TEST_DURABLE, subject, sizeof(subject), "a");
    snprintf(msgid, sizeof(msgid), "item-%s", id);
    gp_bus_js_pub(bus, subject, msgid, b.p, b.n, js_pub_cb, NULL);
    gp_buf_fini(&b);
}

static long long
recorded(redisContext *rc, const char *id)
{
    redisReply *r = redisCommand(rc, "HGET gp:test:durable %s", id);
    long long   v = -1;

    if (r != NULL && r->type == REDIS_REPLY_STRING)
        v = atoll(r->str);
    freeReplyObject(r);
    return v;
}

static void
test_durable(void)
{
    redisContext *rc = redisConnect("127.0.0.1", atoi(tl_env("GP_REDIS_PORT")));
    dlq           d = {0};
    gp_bus_sub   *sub = NULL;
    char          pat[GP_MAX_SUBJECT + 1];
    double        t0;
    int           found_refused = 0, found_worn = 0;

    T_OK(rc != NULL && rc->err == 0);
    gp_op_pattern(GP_OP_DEAD_LETTER, pat, sizeof(pat), (const char *[]){"testsvc", NULL});
    T_OK(gp_bus_sub_new(bus, pat, NULL, on_dlq, &d, &sub) == GP_EOK);
    publish_item("ok1", MSG_DURABLE_ITEM_FAIL_NONE, 0);
    publish_item("retry2", MSG_DURABLE_ITEM_FAIL_TRANSIENT, 2);
    publish_item("refused", MSG_DURABLE_ITEM_FAIL_PERMANENT, 0);
    publish_item("worn", MSG_DURABLE_ITEM_FAIL_TRANSIENT, 50);
    t0 = tl_now();
    while (tl_now() - t0 < 20 && (d.n < 2 || recorded(rc, "retry2") < 0))
        tl_run_until(loop, &(int){0}, 0.2);
    T_OKM(js_ok == 4, "4 items stored in the stream (%d of %d acks OK)", js_ok, js_done);
    T_EQ_INT(recorded(rc, "ok1"), 1);
    T_OKM(recorded(rc, "retry2") == 3, "a transient failure is retried until it succeeds "
          "(succeeded on delivery %lld, want 3)", recorded(rc, "retry2"));
    T_OKM(recorded(rc, "refused") < 0 && recorded(rc, "worn") < 0,
          "refused and worn-out items are not recorded");
    T_OKM(d.n == 2, "two dead letters published (%d)", d.n);
    for (int i = 0; i < d.n; i++) {
        msg_durable_item it = {0};

        gp_msg_decode(&msg_durable_item_desc, d.last[i].data.p, d.last[i].data.n, &it, NULL, 0);
        if (strcmp(it.id, "refused") == 0)
            found_refused = strcmp(d.last[i].code, "INVAL") == 0 && d.last[i].deliveries == 1 &&
                            strcmp(d.last[i].consumer, "testsvc-items") == 0 &&
                            strcmp(d.last[i].stream, "GPTEST") == 0;
        if (strcmp(it.id, "worn") == 0)
            found_worn = strcmp(d.last[i].code, "UNAVAIL") == 0 && d.last[i].deliveries == 4;
        gp_msg_clear(&msg_durable_item_desc, &it);
    }
    T_OKM(found_refused, "a refused item is dead-lettered at once with INVAL and its body");
    T_OKM(found_worn, "a failing item is dead-lettered after max_deliver (4) deliveries");
    T_EQ_INT(metric("gp_dead_letters_total{route=\"gp.test.durable.*\"}"), 2);
    T_OKM(metric("gp_request_errors_total{route=\"gp.test.durable.*\",code=\"UNAVAIL\"}") >= 6,
          "transient failures are counted by code");
    /* redelivery after a restart must not record twice: ok1 stays 1 */
    tl_run_until(loop, &(int){0}, 1.0);
    T_EQ_INT(recorded(rc, "ok1"), 1);
    for (int i = 0; i < d.n; i++)
        gp_msg_clear(&msg_dead_letter_desc, &d.last[i]);
    gp_bus_sub_free(sub);
    redisFree(rc);
}

/* ---- shutdown while a handler waits on a bus call ------------------------- */

static int heard;

static void
on_blackhole(void *arg, const gp_bus_msg *m)
{
    (void)arg;
    (void)m;
    heard++;                              /* and never answer */
}

static int call_done_flag;
static gp_err call_err;

static void
call_cb(void *arg, gp_err err, const void *reply, const char *detail)
{
    (void)arg;
    (void)reply;
    (void)detail;
    call_err = err;
    call_done_flag = 1;
}

static void
test_shutdown_under_call(pid_t pid)
{
    gp_bus_sub       *sub = NULL;
    msg_sleep_request in = {.ms = 20000};
    int               st;

    T_OK(gp_bus_sub_new(bus, GP_OP_TEST_BLACKHOLE->address, NULL, on_blackhole, NULL, &sub) ==
         GP_EOK);
    gp_bus_flush_blocking(bus, 2000);
    T_OK(gp_call(bus, GP_OP_TEST_CALL->address, &msg_sleep_request_desc, &in,
                 &msg_sleep_request_desc, 30000, call_cb, NULL) == GP_EOK);
    tl_run_until(loop, &heard, 5);
    T_OKM(heard == 1, "the handler's call to the blackhole is outstanding");
    kill(pid, SIGTERM);
    st = tl_wait_exit(pid, 15);
    T_OKM(st == 0, "SIGTERM with a call outstanding past drain-ms: exit 0 (status %d)", st);
    tl_run_until(loop, &call_done_flag, 5);
    T_OKM(call_done_flag && call_err == GP_EUNAVAIL,
          "the caller is answered UNAVAIL, not left to time out (%s)", gp_err_name(call_err));
    gp_bus_sub_free(sub);
}

/* The service's own pending work holds the drain (gp_app_hold): SIGTERM
 * with a hold released after 1.5 s exits no sooner than that (drain-ms
 * 8000, nothing in flight); a hold past drain-ms (1000) does not keep the
 * process longer than the drain. */
static void
test_stop_hold(void)
{
    pid_t  pid;
    double t0, took;
    int    st;

    pid = start_service_hold("8000", "1500");
    T_OKM(up(30), "test service with a 1.5 s stop hold up");
    t0 = tl_now();
    kill(pid, SIGTERM);
    st = tl_wait_exit(pid, 15);
    took = tl_now() - t0;
    T_OKM(st == 0 && took >= 1.4 && took < 7.0,
          "a held drain waits for the release: exit 0 after 1.5 s, not at once nor at "
          "drain-ms (status %d, %.2f s)", st, took);
    pid = start_service_hold("1000", "20000");
    T_OKM(up(30), "test service with a 20 s stop hold up");
    t0 = tl_now();
    kill(pid, SIGTERM);
    st = tl_wait_exit(pid, 15);
    took = tl_now() - t0;
    T_OKM(st == 0 && took >= 0.9 && took < 6.0,
          "a hold past drain-ms ends at the drain (status %d, %.2f s)", st, took);
}

/* "HTTP/1.0 200 ..." -> 200 */
static int
http_status(int port, const char *path)
{
    char *body = NULL;
    int   st = -1;

    if (tl_http_get(port, path, &body) > 0 && strncmp(body, "HTTP/1.", 7) == 0)
        st = atoi(body + 9);
    free(body);
    return st;
}

/* Liveness and readiness: a service whose Redis is unreachable answers
 * /healthz (its loop runs) but not /readyz. */
static void
test_probes(void)
{
    char        port[16], redis[16], bin[512];
    const char *argv[8];
    int         p2 = tl_free_port(), live = -1;
    pid_t       pid;

    T_EQ_INT(http_status(http_port, "/healthz"), 200);
    /* ready once its engines answered (a loaded machine: a second or two) */
    for (int i = 0; i < 50 && http_status(http_port, "/readyz") != 200; i++)
        usleep(100000);
    T_EQ_INT(http_status(http_port, "/readyz"), 200);
    snprintf(port, sizeof(port), "%d", p2);
    snprintf(redis, sizeof(redis), "%d", tl_free_port());     /* nobody listens there */
    snprintf(bin, sizeof(bin), "%s/test/bin/testsvc", tl_env("GP_BUILD"));
    argv[0] = bin;
    argv[1] = "--http-port";
    argv[2] = port;
    argv[3] = "--redis-port";
    argv[4] = redis;
    argv[5] = "--instance";
    argv[6] = "no-redis";
    argv[7] = NULL;
    pid = tl_spawn((char *const *)argv);
    for (int i = 0; i < 100 && live != 200; i++) {
        usleep(100000);
        live = http_status(p2, "/healthz");
    }
    T_OKM(live == 200, "Redis unreachable: /healthz still 200 (%d)", live);
    T_OKM(http_status(p2, "/readyz") == 503, "... and /readyz 503: not ready");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int
main(void)
{
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "app-test", .jetstream = true};
    pid_t       pid;

    loop = ev_loop_new(EVFLAG_AUTO);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    http_port = tl_free_port();
    pid = start_service("300");
    T_OKM(up(30), "test service up");
    test_probes();
    test_tasks();
    test_durable();
    test_shutdown_under_call(pid);
    test_stop_hold();
    gp_bus_free(bus);
    ev_loop_destroy(loop);
    gp_lib_close();
    return T_DONE();
}
