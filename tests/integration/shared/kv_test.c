/* kv_test.c -- gp_kv against a private redis-server (tests/harness).
 *
 * Needs GP_REDIS_HOST/GP_REDIS_PORT, GP_STACK_DIR and GP_HARNESS from
 * tests/harness/with-stack.sh.  Everything runs on one libev loop; each
 * step runs the loop until a predicate holds or a guard timer fires. */
#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gp/kv.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "test.h"

/* T_EQ_INT evaluates its arguments twice: never give it a call. */
#define T_ERR(expr, want) do {                                                 \
        gp_err e_ = (expr);                                                    \
        T_OKM(e_ == (want), "%s -> %s", #expr, gp_err_name(e_));               \
    } while (0)

static struct ev_loop *L;
static const char     *host;
static int             port;

/* ---- loop driving ------------------------------------------------------- */

typedef bool pred_fn(void *ctx);
static pred_fn *g_pred;
static void    *g_ctx;

static void
check_cb(struct ev_loop *l, ev_prepare *w, int rev)
{
    (void)w;
    (void)rev;
    if (g_pred != NULL && g_pred(g_ctx))
        ev_break(l, EVBREAK_ONE);
}

static void
guard_cb(struct ev_loop *l, ev_timer *w, int rev)
{
    (void)w;
    (void)rev;
    ev_break(l, EVBREAK_ONE);
}

/* Runs the loop until p(ctx) holds (true) or timeout seconds pass. */
static bool
run_until(pred_fn *p, void *ctx, double timeout)
{
    ev_prepare c;
    ev_timer g;

    if (p != NULL && p(ctx))
        return true;
    g_pred = p;
    g_ctx = ctx;
    ev_prepare_init(&c, check_cb);
    ev_prepare_start(L, &c);
    ev_timer_init(&g, guard_cb, timeout, 0.);
    ev_timer_start(L, &g);
    ev_run(L, 0);
    ev_prepare_stop(L, &c);
    ev_timer_stop(L, &g);
    g_pred = NULL;
    return p == NULL || p(ctx);
}

static void
run_for(double s)
{
    run_until(NULL, NULL, s);
}

/* ---- callbacks ---------------------------------------------------------- */

typedef struct conn_st {
    int  up, down;
    bool connected;
    gp_kv **free_on_down;                  /* gp_kv_free(*it) on "down" */
} conn_st;

static void
conn_cb(void *arg, bool connected)
{
    conn_st *s = arg;

    if (connected)
        s->up++;
    else
        s->down++;
    s->connected = connected;
    if (!connected && s->free_on_down != NULL && *s->free_on_down != NULL) {
        gp_kv_free(*s->free_on_down);
        *s->free_on_down = NULL;
    }
}

typedef struct res {
    int       calls;
    gp_err    err;
    int       type;
    long long integer;
    size_t    len;
    char      str[256];
    double    at;
    gp_kv   **free_me;                     /* gp_kv_free(*it) from the callback */
} res;

static void
res_cb(void *arg, const redisReply *r, gp_err err)
{
    res *x = arg;

    x->calls++;
    x->err = err;
    x->at = ev_time();
    x->type = r != NULL ? r->type : 0;
    x->integer = r != NULL ? r->integer : 0;
    x->len = 0;
    x->str[0] = '\0';
    if (r != NULL && r->str != NULL) {
        x->len = r->len;
        memcpy(x->str, r->str, r->len < sizeof(x->str) - 1 ? r->len : sizeof(x->str) - 1);
        x->str[r->len < sizeof(x->str) - 1 ? r->len : sizeof(x->str) - 1] = '\0';
    }
    if (x->free_me != NULL && *x->free_me != NULL) {
        gp_kv *kv = *x->free_me;
        *x->free_me = NULL;
        gp_kv_free(kv);
    }
}

static bool
p_called(void *ctx)
{
    return ((res *)ctx)->calls > 0;
}

static bool
p_up(void *ctx)
{
    return ((conn_st *)ctx)->connected;
}

static bool
p_down(void *ctx)
{
    return !((conn_st *)ctx)->connected;
}

typedef struct many {
    int  n, want;
    int  bad_order, bad_err;
    long long base;
} many;

static void
many_cb(void *arg, const redisReply *r, gp_err err)
{
    many *m = arg;

    if (err != GP_EOK || r == NULL || r->type != REDIS_REPLY_INTEGER)
        m->bad_err++;
    else if (r->integer != m->base + m->n + 1)
        m->bad_order++;
    m->n++;
}

static bool
p_many(void *ctx)
{
    many *m = ctx;
    return m->n >= m->want;
}

static void
count_cb(void *arg, const redisReply *r, gp_err err)
{
    (void)r;
    if (err == GP_EOK)
        (*(int *)arg)++;
}

static bool
p_count(void *ctx)
{
    int **pp = ctx;
    return *pp[0] >= *pp[1];
}

static gp_kv *
new_kv(int p, unsigned cto, unsigned cmdto, conn_st *cs)
{
    gp_kv_opts o = {.host = host, .port = p, .connect_timeout_ms = cto,
                    .command_timeout_ms = cmdto};
    gp_kv     *kv = NULL;
    gp_err     e = gp_kv_new(L, &o, conn_cb, cs, &kv);

    T_OKM(e == GP_EOK && kv != NULL, "gp_kv_new port %d: %s", p, gp_err_name(e));
    return kv;
}

static int
stack(const char *what)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "\"%s/stack.sh\" %s \"%s\"", getenv("GP_HARNESS"), what,
             getenv("GP_STACK_DIR"));
    return system(cmd);
}

/* A port nobody listens on. */
static int
closed_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t          n = sizeof(a);
    int                fd = socket(AF_INET, SOCK_STREAM, 0), p;

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &n);
    p = ntohs(a.sin_port);
    close(fd);
    return p;
}

/* ---- tests -------------------------------------------------------------- */

static void
test_basic(gp_kv *kv, conn_st *cs)
{
    res         r1 = {0}, r2 = {0}, r3 = {0};
    const char *argv[] = {"SET", "gp:kv:bin", "a\0b"};
    size_t      lens[] = {3, 9, 3};
    gp_kv_stats st;

    T_OK(run_until(p_up, cs, 5));
    T_OK(gp_kv_is_connected(kv));
    T_EQ_INT(cs->up, 1);

    /* SET (binary, argv) / GET (format) round trip. */
    T_ERR(gp_kv_cmd(kv, res_cb, &r1, 3, argv, lens), GP_EOK);
    T_ERR(gp_kv_cmdf(kv, res_cb, &r2, "GET %s", "gp:kv:bin"), GP_EOK);
    T_OK(run_until(p_called, &r2, 3));
    T_OK(r1.calls == 1 && r1.err == GP_EOK && r1.type == REDIS_REPLY_STATUS &&
         strcmp(r1.str, "OK") == 0);
    T_OK(r2.calls == 1 && r2.err == GP_EOK && r2.type == REDIS_REPLY_STRING && r2.len == 3 &&
         memcmp(r2.str, "a\0b", 3) == 0);

    /* A Redis error reply is OK + REDIS_REPLY_ERROR, and counted. */
    gp_kv_get_stats(kv, &st);
    uint64_t errs = st.errors;
    T_ERR(gp_kv_cmdf(kv, res_cb, &r3, "INCR %s", "gp:kv:bin"), GP_EOK);
    T_OK(run_until(p_called, &r3, 3));
    T_OK(r3.calls == 1 && r3.err == GP_EOK && r3.type == REDIS_REPLY_ERROR);
    printf("# error reply: %s\n", r3.str);
    gp_kv_get_stats(kv, &st);
    T_EQ_INT(st.errors, errs + 1);

    /* NULL callback is allowed. */
    T_ERR(gp_kv_cmdf(kv, NULL, NULL, "SET gp:kv:nocb 1"), GP_EOK);

    /* Subscribe-mode commands break the reply FIFO: refused. */
    const char *sub[] = {"subscribe", "ch"};
    T_ERR(gp_kv_cmd(kv, res_cb, &r3, 2, sub, NULL), GP_EINVAL);
    T_ERR(gp_kv_cmdf(kv, res_cb, &r3, "PSUBSCRIBE %s", "x*"), GP_EINVAL);
    T_EQ_INT(r3.calls, 1);
}

static void
test_pipeline(gp_kv *kv)
{
    many        m = {.want = 10000};
    gp_kv_stats st;
    res         r = {0};
    double      t0;
    int         fails = 0;

    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "SET gp:kv:ctr 0"), GP_EOK);
    T_OK(run_until(p_called, &r, 3) && r.err == GP_EOK);
    t0 = ev_time();
    for (int i = 0; i < m.want; i++)
        if (gp_kv_cmdf(kv, many_cb, &m, "INCR gp:kv:ctr") != GP_EOK)
            fails++;
    gp_kv_get_stats(kv, &st);
    T_EQ_INT(fails, 0);
    T_EQ_INT(st.inflight, 10000);
    T_OK(run_until(p_many, &m, 10));
    T_EQ_INT(m.n, 10000);
    T_EQ_INT(m.bad_err, 0);
    T_EQ_INT(m.bad_order, 0);
    printf("# 10000 pipelined INCR in %.1f ms\n", (ev_time() - t0) * 1000);
    gp_kv_get_stats(kv, &st);
    T_EQ_INT(st.inflight, 0);

    /* The in-flight cap: TOOBIG, callback not called. */
    int got = 0, want = GP_KV_MAX_INFLIGHT, *pp[2] = {&got, &want};
    fails = 0;
    t0 = ev_time();
    for (int i = 0; i < GP_KV_MAX_INFLIGHT; i++)
        if (gp_kv_cmdf(kv, count_cb, &got, "PING") != GP_EOK)
            fails++;
    T_EQ_INT(fails, 0);
    T_ERR(gp_kv_cmdf(kv, count_cb, &got, "PING"), GP_ETOOBIG);
    T_OK(run_until(p_count, pp, 20));
    printf("# %d pipelined PING in %.1f ms\n", GP_KV_MAX_INFLIGHT, (ev_time() - t0) * 1000);
    run_for(0.02);
    T_EQ_INT(got, GP_KV_MAX_INFLIGHT);
}

/* ---- per-command timeout ------------------------------------------------ */

typedef struct late {
    gp_kv *kv;
    res   *r;
    int    n;
} late;

static void
late_cb(struct ev_loop *l, ev_timer *w, int rev)
{
    late *x = w->data;

    (void)l;
    (void)rev;
    for (int i = 0; i < x->n; i++)
        T_ERR(gp_kv_cmdf(x->kv, res_cb, &x->r[i], "PING"), GP_EOK);
}

static bool
p_timeout_done(void *ctx)
{
    res *r = ctx;                          /* sleep, late ping, kv7 x2 */
    return r[0].calls && r[1].calls && r[2].calls && r[3].calls;
}

static gp_kv_stats age_st;                 /* kv2's stats 100 ms into the block */

static void
age_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l;
    (void)revents;
    gp_kv_get_stats(w->data, &age_st);
}

static void
test_timeout(gp_kv *main_kv)
{
    conn_st     cs2 = {0}, cs7 = {0};
    gp_kv      *kv2 = new_kv(port, 0, 200, &cs2);
    gp_kv      *kv7 = new_kv(port, 0, 200, &cs7);
    res         probe = {0}, r[4] = {{0}}, after = {0};
    gp_kv_stats st;
    bool        debug_ok;
    ev_timer    t_late, t_late7, t_age;
    late        l2 = {kv2, &r[1], 1}, l7 = {kv7, &r[2], 2};
    double      t0;

    T_OK(run_until(p_up, &cs2, 5) && run_until(p_up, &cs7, 5));
    /* Redis 7 refuses DEBUG unless enable-debug-command; then a Lua busy
     * loop blocks the server the same way. */
    gp_kv_cmdf(main_kv, res_cb, &probe, "DEBUG SLEEP 0");
    T_OK(run_until(p_called, &probe, 3));
    debug_ok = probe.err == GP_EOK && probe.type != REDIS_REPLY_ERROR;
    printf("# blocking with %s\n", debug_ok ? "DEBUG SLEEP 1" : "a 1 s Lua busy loop");

    t0 = ev_time();
    if (debug_ok)
        T_ERR(gp_kv_cmdf(kv2, res_cb, &r[0], "DEBUG SLEEP 1"), GP_EOK);
    else
        T_ERR(gp_kv_cmdf(kv2, res_cb, &r[0],
                            "EVAL %s 0",
                            "local function now() local t = redis.call('TIME') "
                            "return tonumber(t[1]) + tonumber(t[2]) / 1e6 end "
                            "local s = now() while now() - s < 1 do end return 1"),
                 GP_EOK);
    /* kv2: a second command 150 ms later is still within its deadline when
     * the first one's expires: UNAVAIL, not TIMEOUT. */
    ev_timer_init(&t_late, late_cb, 0.15, 0.);
    t_late.data = &l2;
    ev_timer_start(L, &t_late);
    /* kv7: two commands stuck behind the blocked server; the first one's
     * callback frees the client from inside the timeout drain. */
    ev_timer_init(&t_late7, late_cb, 0.05, 0.);
    t_late7.data = &l7;
    ev_timer_start(L, &t_late7);
    ev_timer_init(&t_age, age_cb, 0.1, 0.);
    t_age.data = kv2;
    ev_timer_start(L, &t_age);
    r[2].free_me = &kv7;
    T_OK(run_until(p_timeout_done, r, 3));
    /* The age of the oldest command in flight is what the registry sheds
     * heartbeats by. */
    T_OKM(age_st.inflight >= 1 && age_st.oldest_ms >= 90,
          "100 ms into the block: %u in flight, the oldest waiting %u ms", age_st.inflight,
          age_st.oldest_ms);

    double el = r[0].at - t0;
    T_OKM(r[0].calls == 1 && r[0].err == GP_ETIMEOUT, "blocked command: %d call(s), %s",
          r[0].calls, gp_err_name(r[0].err));
    T_OKM(el >= 0.18 && el <= 0.6, "TIMEOUT after %.0f ms (200 ms deadline)", el * 1000);
    T_OKM(r[1].calls == 1 && r[1].err == GP_EUNAVAIL, "later command: %d call(s), %s",
          r[1].calls, gp_err_name(r[1].err));
    T_OKM(r[2].calls == 1 && r[2].err == GP_ETIMEOUT, "kv7 first: %s", gp_err_name(r[2].err));
    T_OKM(r[3].calls == 1 && r[3].err == GP_EUNAVAIL, "kv7 second (after free): %s",
          gp_err_name(r[3].err));
    T_OK(kv7 == NULL);
    gp_kv_get_stats(kv2, &st);
    T_EQ_INT(st.timeouts, 1);
    T_EQ_INT(cs2.down, 1);
    T_EQ_INT(cs7.down, 0);                 /* no conn_cb after gp_kv_free */

    /* Reconnects by itself; once the server is free again commands work. */
    T_OK(run_until(p_up, &cs2, 5));
    double left = t0 + 1.3 - ev_time();
    if (left > 0)
        run_for(left);
    T_OK(gp_kv_is_connected(kv2));
    T_ERR(gp_kv_cmdf(kv2, res_cb, &after, "PING"), GP_EOK);
    T_OK(run_until(p_called, &after, 3));
    T_OK(after.calls == 1 && after.err == GP_EOK && strcmp(after.str, "PONG") == 0);
    T_EQ_INT(cs2.up, 2);
    gp_kv_get_stats(kv2, &st);
    T_OKM(st.inflight == 0 && st.oldest_ms == 0, "nothing in flight: oldest %u ms", st.oldest_ms);
    T_OKM(st.reconnects >= 1, "kv2 reconnects=%llu", (unsigned long long)st.reconnects);
    gp_kv_free(kv2);
    run_for(0.05);
    T_EQ_INT(cs7.up, 1);
    T_EQ_INT(r[2].calls + r[3].calls, 2);  /* still exactly once each */
}

/* ---- gp_kv_free from callbacks ------------------------------------------ */

static void
conn_free_cb(void *arg, bool connected)
{
    void **a = arg;                        /* {gp_kv **, res[2], int *calls} */
    gp_kv **pkv = a[0];
    res    *r = a[1];

    ++*(int *)a[2];
    if (connected && *pkv != NULL) {
        T_ERR(gp_kv_cmdf(*pkv, res_cb, &r[0], "PING"), GP_EOK);
        T_ERR(gp_kv_cmdf(*pkv, res_cb, &r[1], "PING"), GP_EOK);
        gp_kv_free(*pkv);
        *pkv = NULL;
    }
}

static bool
p_calls4(void *ctx)
{
    res *r = ctx;
    return r[0].calls && r[1].calls && r[2].calls && r[3].calls;
}

static void
test_free_in_cb(void)
{
    conn_st cs3 = {0};
    gp_kv  *kv3 = new_kv(port, 0, 0, &cs3);
    res     r[4] = {{0}};

    T_OK(run_until(p_up, &cs3, 5));
    r[0].free_me = &kv3;
    for (int i = 0; i < 4; i++)
        T_ERR(gp_kv_cmdf(kv3, res_cb, &r[i], "PING"), GP_EOK);
    T_OK(run_until(p_calls4, r, 3));
    run_for(0.05);
    T_OK(r[0].calls == 1 && r[0].err == GP_EOK && kv3 == NULL);
    for (int i = 1; i < 4; i++)
        T_OKM(r[i].calls == 1 && r[i].err == GP_EUNAVAIL, "pending %d: %d call(s), %s", i,
              r[i].calls, gp_err_name(r[i].err));
    T_EQ_INT(cs3.down, 0);

    /* From inside the connect callback (hiredis does not defer there). */
    gp_kv     *kv4 = NULL;
    res        q[2] = {{0}};
    int        ccalls = 0;
    void      *a[3] = {&kv4, q, &ccalls};
    gp_kv_opts o = {.host = host, .port = port};

    T_ERR(gp_kv_new(L, &o, conn_free_cb, a, &kv4), GP_EOK);
    T_OK(run_until(p_called, &q[1], 5));
    run_for(0.05);
    T_OK(kv4 == NULL);
    T_EQ_INT(ccalls, 1);
    T_OKM(q[0].calls == 1 && q[1].calls == 1, "each called once (%d, %d): %s, %s", q[0].calls,
          q[1].calls, gp_err_name(q[0].err), gp_err_name(q[1].err));

    /* Free right after new (still connecting) and NULL. */
    conn_st cs5 = {0};
    gp_kv  *kv5 = new_kv(port, 0, 0, &cs5);
    gp_kv_free(kv5);
    gp_kv_free(NULL);
    run_for(0.1);
    T_EQ_INT(cs5.up + cs5.down, 0);
}

/* ---- Redis stopped and restarted ---------------------------------------- */

static void
test_restart(gp_kv *kv, conn_st *cs)
{
    conn_st     cs6 = {0};
    gp_kv      *kv6 = new_kv(port, 0, 0, &cs6);
    res         r = {0}, s = {0}, g = {0};
    gp_kv_stats st0, st;

    cs6.free_on_down = &kv6;               /* frees itself from conn_cb(false) */
    T_OK(run_until(p_up, &cs6, 5));
    gp_kv_get_stats(kv, &st0);
    { int rc_ = stack("stop-redis"); T_EQ_INT(rc_, 0); }
    T_OK(run_until(p_down, cs, 5));
    T_EQ_INT(cs->down, 1);
    T_OK(!gp_kv_is_connected(kv));
    run_for(0.5);                          /* a few refused attempts */
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "PING"), GP_EUNAVAIL);
    const char *argv[] = {"PING"};
    T_ERR(gp_kv_cmd(kv, res_cb, &r, 1, argv, NULL), GP_EUNAVAIL);
    run_for(0.01);
    T_EQ_INT(r.calls, 0);                  /* not called on UNAVAIL */
    T_OK(kv6 == NULL && cs6.down == 1);
    gp_kv_get_stats(kv, &st);
    T_OKM(st.reconnects > st0.reconnects, "reconnect attempts while down: %llu",
          (unsigned long long)(st.reconnects - st0.reconnects));

    { int rc_ = stack("start-redis"); T_EQ_INT(rc_, 0); }
    T_OK(run_until(p_up, cs, 8));
    T_EQ_INT(cs->up, 2);
    T_ERR(gp_kv_cmdf(kv, res_cb, &s, "SET gp:kv:after %s", "restart"), GP_EOK);
    T_ERR(gp_kv_cmdf(kv, res_cb, &g, "GET gp:kv:after"), GP_EOK);
    T_OK(run_until(p_called, &g, 3));
    T_OK(s.err == GP_EOK && g.err == GP_EOK && strcmp(g.str, "restart") == 0);
}

/* ---- nobody listening / connect timeout --------------------------------- */

static void
test_closed_port(void)
{
    conn_st     cs8 = {0};
    int         p = closed_port();
    gp_kv      *kv8 = new_kv(p, 500, 0, &cs8);
    gp_kv_stats st;
    res         r = {0};

    run_for(1.6);
    gp_kv_get_stats(kv8, &st);
    T_OK(!gp_kv_is_connected(kv8));
    T_EQ_INT(cs8.up + cs8.down, 0);
    /* Backoff 100, 200, 400, 800 ms +-25%: 3 or 4 retries in 1.6 s; a tight
     * loop would make thousands. */
    T_OKM(st.reconnects >= 2 && st.reconnects <= 6, "closed port: %llu reconnects in 1.6 s",
          (unsigned long long)st.reconnects);
    T_ERR(gp_kv_cmdf(kv8, res_cb, &r, "PING"), GP_EUNAVAIL);
    gp_kv_free(kv8);
}

/* A listener with a full accept queue: SYNs are dropped, connect() hangs. */
static int
blackhole(int *lfd, int fill[4], int *nfill)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t          n = sizeof(a);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    *lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(*lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(*lfd, 0) != 0)
        return -1;
    getsockname(*lfd, (struct sockaddr *)&a, &n);
    *nfill = 0;
    for (int i = 0; i < 4; i++) {
        int           fd = socket(AF_INET, SOCK_STREAM, 0);
        struct pollfd pf = {.fd = fd, .events = POLLOUT};

        fcntl(fd, F_SETFL, O_NONBLOCK);
        fill[(*nfill)++] = fd;
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
            continue;
        if (errno != EINPROGRESS)
            return -1;
        if (poll(&pf, 1, 300) == 0)
            return ntohs(a.sin_port);      /* this one hangs: so will ours */
    }
    return -1;
}

static void
test_connect_timeout(void)
{
    int lfd = -1, fill[4], nfill = 0, p = blackhole(&lfd, fill, &nfill);

    if (p < 0) {
        printf("ok %d - # SKIP no connect black hole on this host\n", ++t_run);
    } else {
        conn_st     cs9 = {0};
        gp_kv      *kv9 = new_kv(p, 150, 0, &cs9);
        gp_kv_stats st;

        run_for(1.5);
        gp_kv_get_stats(kv9, &st);
        T_OK(!gp_kv_is_connected(kv9));
        /* 150 ms deadline + 100, 200, 400 ms backoff: ~3 retries; without a
         * connect deadline hiredis would still be in its first connect(). */
        T_OKM(st.reconnects >= 2 && st.reconnects <= 6, "black hole: %llu reconnects in 1.5 s",
              (unsigned long long)st.reconnects);
        gp_kv_free(kv9);
    }
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    if (lfd >= 0)
        close(lfd);
}

/* ---- AUTH as an ACL user ------------------------------------------------ */

static gp_kv *
auth_kv(const char *user, const char *pw, conn_st *cs)
{
    gp_kv_opts o = {.host = host, .port = port, .connect_timeout_ms = 500,
                    .command_timeout_ms = 2000, .user = user, .password = pw};
    gp_kv     *kv = NULL;

    T_ERR(gp_kv_new(L, &o, conn_cb, cs, &kv), GP_EOK);
    return kv;
}

static void
test_auth(gp_kv *main_kv)
{
    conn_st     ok_cs = {0}, bad_cs = {0};
    res         setup = {0}, mine = {0}, other = {0}, probe = {0};
    gp_kv      *good, *bad;
    gp_kv_stats st;

    gp_kv_cmdf(main_kv, res_cb, &setup, "ACL SETUSER kvt_user reset on >kvt-pw ~kvt:* +@all");
    T_OK(run_until(p_called, &setup, 3) && setup.err == GP_EOK &&
         setup.type != REDIS_REPLY_ERROR);
    good = auth_kv("kvt_user", "kvt-pw", &ok_cs);
    bad = auth_kv("kvt_user", "wrong", &bad_cs);
    T_OKM(run_until(p_up, &ok_cs, 5), "the right password: connected as the ACL user");
    T_ERR(gp_kv_cmdf(good, res_cb, &mine, "SET kvt:a 1"), GP_EOK);
    T_ERR(gp_kv_cmdf(good, res_cb, &other, "SET other:a 1"), GP_EOK);
    T_ERR(gp_kv_cmdf(good, res_cb, &probe, "ACL WHOAMI"), GP_EOK);
    T_OK(run_until(p_called, &probe, 3));
    T_OKM(mine.err == GP_EOK && mine.type == REDIS_REPLY_STATUS, "its own keys: %s", mine.str);
    T_OKM(other.err == GP_EOK && other.type == REDIS_REPLY_ERROR &&
          strncmp(other.str, "NOPERM", 6) == 0, "another key refused by Redis: %s", other.str);
    T_OKM(strcmp(probe.str, "kvt_user") == 0, "ACL WHOAMI: %s", probe.str);
    /* A wrong password never counts as up, and is retried with backoff. */
    run_for(1.0);
    T_OKM(bad_cs.up == 0 && !gp_kv_is_connected(bad), "a wrong password never connects (%d ups)",
          bad_cs.up);
    gp_kv_get_stats(bad, &st);
    T_OKM(st.errors >= 1, "the refused AUTH counted (%llu errors)", (unsigned long long)st.errors);
    T_ERR(gp_kv_cmdf(bad, res_cb, NULL, "PING"), GP_EUNAVAIL);
    gp_kv_free(good);
    gp_kv_free(bad);
    run_for(0.05);
}

int
main(void)
{
    conn_st cs = {0};
    gp_kv  *kv;

    signal(SIGPIPE, SIG_IGN);              /* hiredis 0.14 write()s to a dead peer */
    host = getenv("GP_REDIS_HOST");
    port = getenv("GP_REDIS_PORT") ? atoi(getenv("GP_REDIS_PORT")) : 0;
    if (host == NULL || port <= 0 || !getenv("GP_STACK_DIR") || !getenv("GP_HARNESS")) {
        printf("not ok 1 - run under tests/harness/with-stack.sh\n1..1\n");
        return 1;
    }
    gp_log_setup("kv_test", getenv("GP_LOG_LEVEL"), 2);
    L = ev_loop_new(EVFLAG_AUTO);

    {
        gp_kv_opts o = {.host = host, .port = 0};
        gp_kv     *x = (gp_kv *)1;
        T_ERR(gp_kv_new(L, &o, NULL, NULL, &x), GP_EINVAL);
        T_OK(x == NULL);
    }
    kv = new_kv(port, 0, 15000, &cs);      /* valgrind: 65536 PINGs take seconds */
    T_OK(!gp_kv_is_connected(kv));         /* connecting is asynchronous */
    T_ERR(gp_kv_cmdf(kv, res_cb, NULL, "PING"), GP_EUNAVAIL);
    test_basic(kv, &cs);
    test_pipeline(kv);
    test_timeout(kv);
    test_free_in_cb();
    test_restart(kv, &cs);
    test_closed_port();
    test_connect_timeout();
    test_auth(kv);

    gp_kv_stats st;
    gp_kv_get_stats(kv, &st);
    printf("# main: commands=%llu errors=%llu timeouts=%llu reconnects=%llu\n",
           (unsigned long long)st.commands, (unsigned long long)st.errors,
           (unsigned long long)st.timeouts, (unsigned long long)st.reconnects);
    gp_kv_free(kv);
    /* Nothing of ours may be left on the loop. */
    /* Nothing of ours may be left active on the loop: ev_run returns. */
    alarm(10);
    double t0 = ev_time();
    ev_run(L, 0);
    alarm(0);
    T_OKM(ev_time() - t0 < 1, "loop empty after gp_kv_free (%.3f s)", ev_time() - t0);
    ev_loop_destroy(L);
    return T_DONE();
}
