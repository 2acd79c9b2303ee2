/* bus_test.c -- gp/bus.h against a real nats-server (tests/harness/with-stack.sh).
 *
 * Everything runs on one libev loop; run_until() turns the loop until a
 * condition holds or a deadline passes.  The only blocking calls on the
 * loop thread are the test's own: flush_blocking in the overflow test (the
 * loop is deliberately not running there) and the nats-server stop/start
 * in the outage test. */
#include <ev.h>
#include <nats/nats.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gp/bus.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "gp/streamcfg.h"
#include "test.h"

static struct ev_loop *loop;
static pthread_t       loop_thread;

static double
now_s(void)
{
    ev_now_update(loop);
    return ev_now(loop);
}

static void tick_cb(struct ev_loop *l, ev_timer *w, int revents) { (void)l; (void)w; (void)revents; }

/* Turns the loop until *flag is true or timeout_s passes; returns *flag. */
static bool
run_until_flag(const volatile bool *flag, double timeout_s)
{
    ev_timer tick;
    double   end = now_s() + timeout_s;

    ev_timer_init(&tick, tick_cb, 0.01, 0.01);
    ev_timer_start(loop, &tick);
    while (!*flag && now_s() < end)
        ev_run(loop, EVRUN_ONCE);
    ev_timer_stop(loop, &tick);
    return *flag;
}

/* Turns the loop for secs whatever happens. */
static void
run_for(double secs)
{
    bool never = false;

    run_until_flag(&never, secs);
}

#define RUN_UNTIL(cond, secs) do {                                  \
        double end_ = now_s() + (secs);                             \
        ev_timer tick_;                                             \
        ev_timer_init(&tick_, tick_cb, 0.01, 0.01);                 \
        ev_timer_start(loop, &tick_);                               \
        while (!(cond) && now_s() < end_)                           \
            ev_run(loop, EVRUN_ONCE);                              \
        ev_timer_stop(loop, &tick_);                                \
    } while (0)

/* ---- subscribers -------------------------------------------------------- */

typedef struct sub_rec {
    int  n;
    int  off_loop;           /* callbacks not on the loop thread */
    int  no_reply;           /* messages whose reply was NULL */
    char last[64];
    int  seen[256];
} sub_rec;

static void
rec_cb(void *arg, const gp_bus_msg *m)
{
    sub_rec *r = arg;

    r->n++;
    if (!pthread_equal(pthread_self(), loop_thread))
        r->off_loop++;
    if (m->reply == NULL)
        r->no_reply++;
    snprintf(r->last, sizeof(r->last), "%.*s", (int)m->len, m->data);
    if (m->len > 0 && m->len < 8) {
        int i = atoi(r->last);
        if (i >= 0 && i < 256)
            r->seen[i]++;
    }
}

static void
test_pubsub(gp_bus *bus)
{
    sub_rec     r = {0};
    gp_bus_sub *sub;

    T_OK(gp_bus_sub_new(bus, "t.ps", NULL, rec_cb, &r, &sub) == GP_EOK);
    T_OK(gp_bus_pub(bus, "t.ps", NULL, "hello", 5) == GP_EOK);
    T_OK(gp_bus_pub(bus, "t.ps", NULL, "world", 5) == GP_EOK);
    RUN_UNTIL(r.n >= 2, 5);
    T_EQ_INT(r.n, 2);
    T_OKM(r.off_loop == 0, "subscriber callbacks run on the loop thread");
    T_EQ_INT(r.no_reply, 2);
    T_OK(strcmp(r.last, "world") == 0);
    T_OK(gp_bus_pub(bus, "", NULL, "x", 1) == GP_EINVAL);
    gp_bus_sub_free(sub);
}

static void
test_queue_group(gp_bus *bus)
{
    sub_rec     a = {0}, b = {0};
    gp_bus_sub *sa, *sb;
    char        buf[16];
    int         once = 0;

    T_OK(gp_bus_sub_new(bus, "t.q", "workers", rec_cb, &a, &sa) == GP_EOK);
    T_OK(gp_bus_sub_new(bus, "t.q", "workers", rec_cb, &b, &sb) == GP_EOK);
    gp_bus_flush_blocking(bus, 2000);       /* both SUBs reach the server */
    for (int i = 0; i < 200; i++) {
        snprintf(buf, sizeof(buf), "%d", i);
        gp_bus_pub(bus, "t.q", NULL, buf, strlen(buf));
    }
    RUN_UNTIL(a.n + b.n >= 200, 5);
    run_for(0.2);                           /* would show duplicates */
    for (int i = 0; i < 200; i++)
        once += a.seen[i] + b.seen[i] == 1;
    T_EQ_INT(a.n + b.n, 200);
    T_EQ_INT(once, 200);
    T_OKM(a.n > 0 && b.n > 0, "both group members got messages (%d/%d)", a.n, b.n);
    gp_bus_sub_free(sa);
    gp_bus_sub_free(sb);
}

/* A subscriber that frees itself in its first callback. */
typedef struct self_free { gp_bus_sub *sub; int n; } self_free;

static void
self_free_cb(void *arg, const gp_bus_msg *m)
{
    self_free *s = arg;

    (void)m;
    s->n++;
    gp_bus_sub_free(s->sub);
}

static void
test_sub_free_in_cb(gp_bus *bus)
{
    self_free s = {0};

    T_OK(gp_bus_sub_new(bus, "t.once", NULL, self_free_cb, &s, &s.sub) == GP_EOK);
    for (int i = 0; i < 5; i++)
        gp_bus_pub(bus, "t.once", NULL, "x", 1);
    gp_bus_flush_blocking(bus, 2000);
    run_for(0.3);
    T_OKM(s.n == 1, "freed in its callback: queued messages discarded (%d)", s.n);
}

/* ---- request/reply ------------------------------------------------------ */

typedef struct reply_rec {
    int    calls;
    gp_err err;
    char   data[64];
    double at;
} reply_rec;

static void
reply_cb(void *arg, gp_err err, const char *data, size_t len)
{
    reply_rec *r = arg;

    r->calls++;
    r->err = err;
    r->at = now_s();
    snprintf(r->data, sizeof(r->data), "%.*s", (int)len, data != NULL ? data : "");
}

static void
echo_cb(void *arg, const gp_bus_msg *m)
{
    gp_bus *bus = arg;
    char    out[80];
    int     n = snprintf(out, sizeof(out), "echo:%.*s", (int)m->len, m->data);

    if (m->reply != NULL)
        gp_bus_pub(bus, m->reply, NULL, out, (size_t)n);
}

static void
silent_cb(void *arg, const gp_bus_msg *m)
{
    (void)arg;
    (void)m;
}

static void
test_request(gp_bus *bus, gp_bus_sub **silent)
{
    gp_bus_sub  *echo;
    reply_rec    ok = {0}, to = {0}, nr = {0};
    gp_bus_stats st;
    double       t0;

    T_OK(gp_bus_sub_new(bus, "t.echo", NULL, echo_cb, bus, &echo) == GP_EOK);
    T_OK(gp_bus_sub_new(bus, "t.silent", NULL, silent_cb, NULL, silent) == GP_EOK);
    gp_bus_flush_blocking(bus, 2000);

    T_OK(gp_bus_request(bus, "t.echo", "ping", 4, 2000, reply_cb, &ok) == GP_EOK);
    RUN_UNTIL(ok.calls > 0, 5);
    T_EQ_INT(ok.calls, 1);
    T_OK(ok.err == GP_EOK);
    T_OK(strcmp(ok.data, "echo:ping") == 0);

    t0 = now_s();
    T_OK(gp_bus_request(bus, "t.silent", "x", 1, 300, reply_cb, &to) == GP_EOK);
    RUN_UNTIL(to.calls > 0, 5);
    run_for(0.4);
    T_EQ_INT(to.calls, 1);
    T_OK(to.err == GP_ETIMEOUT);
    T_OKM(to.at - t0 >= 0.28 && to.at - t0 < 0.8, "timeout at %.3f s (deadline 0.3)", to.at - t0);

    t0 = now_s();
    T_OK(gp_bus_request(bus, "t.nobody", "x", 1, 3000, reply_cb, &nr) == GP_EOK);
    RUN_UNTIL(nr.calls > 0, 5);
    T_EQ_INT(nr.calls, 1);
    T_OKM(nr.err == GP_ENOROUTE, "no responders -> NOROUTE (%s)", gp_err_name(nr.err));
    T_OKM(nr.at - t0 < 1.0, "NOROUTE fast (%.3f s)", nr.at - t0);

    T_OK(gp_bus_request(bus, "t.echo", "x", 1, 0, reply_cb, &nr) == GP_EINVAL);
    gp_bus_get_stats(bus, &st);
    T_EQ_INT(st.requests, 3);
    T_EQ_INT(st.request_timeouts, 1);
    gp_bus_sub_free(echo);
}

/* ---- inbox overflow ----------------------------------------------------- */

static void
test_overflow(gp_bus *bus)
{
    sub_rec      r = {0};
    gp_bus_sub  *sub;
    gp_bus_stats st0, st;
    const int    extra = 5000, total = GP_MAX_INBOX + extra;
    struct timespec pause = {0, 10 * 1000 * 1000};

    T_OK(gp_bus_sub_new(bus, "t.flood", NULL, rec_cb, &r, &sub) == GP_EOK);
    gp_bus_flush_blocking(bus, 2000);
    gp_bus_get_stats(bus, &st0);
    /* The loop is not running: every message stays in the inbox. */
    for (int i = 0; i < total; i++) {
        gp_bus_pub(bus, "t.flood", NULL, "f", 1);
        if (i % 5000 == 4999)
            gp_bus_flush_blocking(bus, 10000);
    }
    gp_bus_flush_blocking(bus, 10000);
    for (int i = 0; i < 3000; i++) {
        gp_bus_get_stats(bus, &st);
        if (st.dropped - st0.dropped >= (uint64_t)extra)
            break;
        nanosleep(&pause, NULL);
    }
    T_EQ_INT(st.dropped - st0.dropped, extra);
    RUN_UNTIL(r.n >= GP_MAX_INBOX, 30);
    run_for(0.2);
    T_EQ_INT(r.n, GP_MAX_INBOX);
    T_OK(r.off_loop == 0);
    gp_bus_sub_free(sub);
}

/* Large messages past the control lane's byte bound (GP_MAX_INBOX_BYTES)
 * while the loop is not running: exactly what fits is kept, the rest is
 * dropped and counted as dropped at the byte bound, far below the lane's
 * message bound. */
static void
test_overflow_bytes(gp_bus *bus)
{
    sub_rec      r = {0};
    gp_bus_sub  *sub;
    gp_bus_stats st0, st;
    const size_t size = 512 * 1024;
    const int    fit = (int)(GP_MAX_INBOX_BYTES / size), extra = 16;
    char        *big = calloc(1, size);
    struct timespec pause = {0, 10 * 1000 * 1000};

    T_OK(gp_bus_sub_new(bus, "t.bigflood", NULL, rec_cb, &r, &sub) == GP_EOK);
    gp_bus_flush_blocking(bus, 2000);
    gp_bus_get_stats(bus, &st0);
    for (int i = 0; i < fit + extra; i++) {
        gp_bus_pub(bus, "t.bigflood", NULL, big, size);
        if (i % 8 == 7)
            gp_bus_flush_blocking(bus, 10000);
    }
    gp_bus_flush_blocking(bus, 10000);
    for (int i = 0; i < 3000; i++) {
        gp_bus_get_stats(bus, &st);
        if (st.dropped - st0.dropped >= (uint64_t)extra)
            break;
        nanosleep(&pause, NULL);
    }
    T_EQ_INT(st.dropped_bytes - st0.dropped_bytes, extra);
    T_EQ_INT(st.dropped - st0.dropped, extra);
    T_EQ_INT(st.nats_dropped, st0.nats_dropped);
    RUN_UNTIL(r.n >= fit, 30);
    run_for(0.2);
    T_OKM(r.n == fit, "%d messages of %zu KiB kept (the byte bound: %d MiB), %d dropped", r.n,
          size / 1024, GP_MAX_INBOX_BYTES >> 20, extra);
    gp_bus_sub_free(sub);
    free(big);
}

/* ---- lanes -------------------------------------------------------------- */

/* A control message records how many bulk messages came before it. */
typedef struct lane_rec { sub_rec *bulk; int n; int bulk_before_first; } lane_rec;

static void
lane_ctl_cb(void *arg, const gp_bus_msg *m)
{
    lane_rec *l = arg;

    (void)m;
    if (l->n++ == 0)
        l->bulk_before_first = l->bulk->n;
}

/* A bulk flood past its lane's budget, queued while the loop is busy, then
 * control messages: the bulk lane drops only its own overflow (counted per
 * lane), no control message is lost, and the control messages are
 * delivered before the bulk backlog (the loop drains control first). */
static void
test_lanes(gp_bus *bus)
{
    sub_rec      bulk = {0};
    lane_rec     ctl = {.bulk = &bulk, .bulk_before_first = -1};
    gp_bus_sub  *sb, *sc;
    gp_bus_stats st0, st;
    const int    extra = 2000, total = GP_MAX_INBOX_BULK + extra, nctl = 20;
    struct timespec pause = {0, 10 * 1000 * 1000};

    T_OK(gp_bus_sub_new_lane(bus, "t.lane.bulk", NULL, GP_LANE_BULK, rec_cb, &bulk, &sb) == GP_EOK);
    T_OK(gp_bus_sub_new_lane(bus, "t.lane.ctl", NULL, GP_LANE_CONTROL, lane_ctl_cb, &ctl, &sc) == GP_EOK);
    T_OK(gp_bus_sub_new_lane(bus, "t.lane.x", NULL, (gp_bus_lane)7, lane_ctl_cb, &ctl, &sc) == GP_EINVAL);
    gp_bus_flush_blocking(bus, 2000);
    gp_bus_get_stats(bus, &st0);
    for (int i = 0; i < total; i++) {
        gp_bus_pub(bus, "t.lane.bulk", NULL, "b", 1);
        if (i % 5000 == 4999)
            gp_bus_flush_blocking(bus, 10000);
    }
    for (int i = 0; i < nctl; i++)
        gp_bus_pub(bus, "t.lane.ctl", NULL, "c", 1);
    gp_bus_flush_blocking(bus, 10000);
    for (int i = 0; i < 3000; i++) {
        gp_bus_get_stats(bus, &st);
        if (st.dropped_lane[GP_LANE_BULK] - st0.dropped_lane[GP_LANE_BULK] >= (uint64_t)extra)
            break;
        nanosleep(&pause, NULL);
    }
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);   /* the control ones, after */
    gp_bus_get_stats(bus, &st);
    T_EQ_INT(st.dropped_lane[GP_LANE_BULK] - st0.dropped_lane[GP_LANE_BULK], extra);
    T_EQ_INT(st.dropped_lane[GP_LANE_CONTROL] - st0.dropped_lane[GP_LANE_CONTROL], 0);
    T_EQ_INT(st.dropped - st0.dropped, extra);
    RUN_UNTIL(bulk.n >= GP_MAX_INBOX_BULK && ctl.n >= nctl, 30);
    T_EQ_INT(ctl.n, nctl);
    T_EQ_INT(bulk.n, GP_MAX_INBOX_BULK);
    T_OKM(ctl.bulk_before_first >= 0 && ctl.bulk_before_first < 512,
          "control delivered ahead of a %d-message bulk backlog (after %d bulk)",
          GP_MAX_INBOX_BULK, ctl.bulk_before_first);
    gp_bus_sub_free(sb);
    gp_bus_sub_free(sc);
}

/* ---- failing outstanding requests (shutdown) ------------------------------ */

typedef struct retry_rec { gp_bus *bus; int calls; gp_err err; gp_err retry; } retry_rec;

static void
retry_cb(void *arg, gp_err err, const char *data, size_t len)
{
    retry_rec *r = arg;

    (void)data;
    (void)len;
    r->calls++;
    r->err = err;
    /* A callback that retries at once must be refused, not left pending. */
    r->retry = gp_bus_request(r->bus, "t.silent", "x", 1, 10000, retry_cb, r);
}

static void
test_fail_requests(const char *url)
{
    gp_bus_opts  o = {.url = url, .name = "bus-test-fail"};
    gp_bus      *b = NULL;
    gp_bus_sub  *echo = NULL;
    retry_rec    r1 = {0}, r2 = {0};
    reply_rec    after = {0}, ok = {0};
    double       t0;

    T_OK(gp_bus_new(loop, &o, NULL, NULL, &b) == GP_EOK);
    r1.bus = r2.bus = b;
    T_OK(gp_bus_sub_new(b, "t.fail.echo", NULL, echo_cb, b, &echo) == GP_EOK);
    gp_bus_flush_blocking(b, 2000);
    T_OK(gp_bus_request(b, "t.fail.echo", "a", 1, 2000, reply_cb, &ok) == GP_EOK);
    RUN_UNTIL(ok.calls > 0, 5);
    T_OK(gp_bus_request(b, "t.silent", "x", 1, 10000, retry_cb, &r1) == GP_EOK);
    T_OK(gp_bus_request(b, "t.silent", "y", 1, 10000, retry_cb, &r2) == GP_EOK);
    run_for(0.05);
    t0 = now_s();
    T_EQ_INT(gp_bus_fail_requests(b), 2);
    T_OKM(r1.calls == 1 && r2.calls == 1 && r1.err == GP_EUNAVAIL && r2.err == GP_EUNAVAIL,
          "outstanding requests failed at once with UNAVAIL (%d, %d calls)", r1.calls, r2.calls);
    T_OKM(r1.retry == GP_EUNAVAIL && r2.retry == GP_EUNAVAIL,
          "a request made inside the callback is refused (%s)", gp_err_name(r1.retry));
    T_OK(now_s() - t0 < 0.5);
    T_OK(gp_bus_request(b, "t.fail.echo", "b", 1, 2000, reply_cb, &after) == GP_EUNAVAIL);
    T_OK(gp_bus_pub(b, "t.fail.echo", NULL, "c", 1) == GP_EOK);   /* replies still go out */
    T_EQ_INT(gp_bus_fail_requests(b), 0);
    run_for(0.1);
    gp_bus_free(b);                          /* nothing left to fail: no second call */
    T_OK(r1.calls == 1 && r2.calls == 1 && after.calls == 0);
}

/* ---- the cap on requests outstanding -------------------------------------- */

static void
count_cb(void *arg, gp_err err, const char *data, size_t len)
{
    (void)err, (void)data, (void)len;
    (*(int *)arg)++;
}

/* max_pending bounds the requests outstanding (the simulator raises it for
 * its fleet's lease renewals); past it a request is refused TOOBIG, and a
 * slot that came free is taken again. */
static void
test_max_pending(const char *url)
{
    gp_bus_opts o = {.url = url, .name = "bus-test-pending", .max_pending = 3};
    gp_bus     *b = NULL;
    int         answered = 0;
    gp_err      rc[4];

    T_OK(gp_bus_new(loop, &o, NULL, NULL, &b) == GP_EOK);
    for (int i = 0; i < 4; i++)
        rc[i] = gp_bus_request(b, "t.silent", "x", 1, 300, count_cb, &answered);
    T_OKM(rc[0] == GP_EOK && rc[1] == GP_EOK && rc[2] == GP_EOK && rc[3] == GP_ETOOBIG,
          "max_pending 3: three requests out, the fourth TOOBIG (%s)", gp_err_name(rc[3]));
    RUN_UNTIL(answered == 3, 5);
    T_OKM(answered == 3, "the three time out (%d)", answered);
    T_OKM(gp_bus_request(b, "t.silent", "y", 1, 300, count_cb, &answered) == GP_EOK,
          "their slots came free: a request is taken again");
    RUN_UNTIL(answered == 4, 5);
    gp_bus_free(b);
}

/* ---- the reply inbox prefix ---------------------------------------------- */

typedef struct seen_reply { gp_bus *bus; char reply[GP_MAX_SUBJECT + 1]; } seen_reply;

static void
note_reply_cb(void *arg, const gp_bus_msg *m)
{
    seen_reply *s = arg;

    snprintf(s->reply, sizeof(s->reply), "%s", m->reply != NULL ? m->reply : "");
    if (m->reply != NULL)
        gp_bus_pub(s->bus, m->reply, NULL, "pong", 4);
}

static void
test_inbox_prefix(gp_bus *bus, const char *url)
{
    const char  *prefix = "gp.node.s1.n1._reply";
    gp_bus_opts  o = {.url = url, .name = "bus-test-prefix", .inbox_prefix = prefix};
    gp_bus_opts  bad = {.url = url, .name = "bus-test-bad", .inbox_prefix = "gp.node.*"};
    gp_bus      *b = NULL, *nb = NULL;
    gp_bus_sub  *sub;
    seen_reply   s = {.bus = bus};
    reply_rec    r = {0};

    T_OK(gp_bus_new(loop, &bad, NULL, NULL, &nb) == GP_EINVAL && nb == NULL);
    T_OK(gp_bus_new(loop, &o, NULL, NULL, &b) == GP_EOK);
    T_OK(gp_bus_sub_new(bus, "t.prefix", NULL, note_reply_cb, &s, &sub) == GP_EOK);
    gp_bus_flush_blocking(bus, 2000);
    T_OK(gp_bus_request(b, "t.prefix", "ping", 4, 3000, reply_cb, &r) == GP_EOK);
    RUN_UNTIL(r.calls > 0, 5);
    T_OKM(r.calls == 1 && r.err == GP_EOK && strcmp(r.data, "pong") == 0,
          "request with a custom inbox prefix answered (%s)", gp_err_name(r.err));
    T_OKM(strncmp(s.reply, prefix, strlen(prefix)) == 0 && s.reply[strlen(prefix)] == '.',
          "reply subject in the prefix's subtree: %s", s.reply);
    gp_bus_sub_free(sub);
    gp_bus_free(b);
}

/* ---- JetStream ---------------------------------------------------------- */

typedef struct done_rec { int calls; gp_err err; } done_rec;

static void
done_cb(void *arg, gp_err err)
{
    done_rec *d = arg;

    d->calls++;
    d->err = err;
}

typedef struct pull_rec {
    int      n;
    int      off_loop;
    uint64_t delivered[8];
    char     data[8][32];
    bool     nak_first;     /* nak delivery 1, ack the rest */
} pull_rec;

static void
pull_cb(void *arg, gp_jsmsg *m)
{
    pull_rec *p = arg;
    uint64_t  d = gp_jsmsg_delivered(m);

    if (!pthread_equal(pthread_self(), loop_thread))
        p->off_loop++;
    if (p->n < 8) {
        p->delivered[p->n] = d;
        snprintf(p->data[p->n], sizeof(p->data[0]), "%.*s", (int)gp_jsmsg_len(m),
                 (const char *)gp_jsmsg_data(m));
    }
    p->n++;
    if (p->nak_first && d == 1)
        gp_jsmsg_nak(m, 0);
    else
        gp_jsmsg_ack(m);
}

static void
test_jetstream(gp_bus *bus)
{
    const char   *subjects[] = {"gpt.>", NULL};
    gp_stream_cfg sc = {.name = "GPT", .subjects = subjects, .duplicate_window_s = 60, .memory = true};
    done_rec      s1 = {0}, s2 = {0}, p1 = {0}, p2 = {0}, p3 = {0}, bad = {0};
    pull_rec      r1 = {0}, r2 = {.nak_first = true};
    gp_pull_cfg   c1 = {.stream = "GPT", .durable = "d1", .filter_subject = "gpt.a", .ack_wait_ms = 5000};
    gp_pull_cfg   c2 = {.stream = "GPT", .durable = "d2", .filter_subject = "gpt.b", .ack_wait_ms = 5000};
    gp_pull_cfg   c3 = {.stream = "GPT", .durable = "d3", .batch = 1, .max_inflight = 1};
    pull_rec      r3 = {0}, r4 = {0};
    const char   *late_subj[] = {"late.>", NULL};
    gp_stream_cfg late = {.name = "LATE", .subjects = late_subj, .memory = true};
    gp_pull_cfg   c4 = {.stream = "LATE", .durable = "d4"};
    done_rec      s3 = {0}, p4 = {0};
    gp_bus_pull  *pl4;
    gp_bus_pull  *pl1, *pl2, *pl3;
    gp_bus_stats  st;

    T_OK(gp_bus_js_stream(bus, &sc, done_cb, &s1) == GP_EOK);
    RUN_UNTIL(s1.calls > 0, 10);
    T_OKM(s1.calls == 1 && s1.err == GP_EOK, "stream created (%s)", gp_err_name(s1.err));
    T_OK(gp_bus_js_stream(bus, &sc, done_cb, &s2) == GP_EOK);
    RUN_UNTIL(s2.calls > 0, 10);
    T_OKM(s2.calls == 1 && s2.err == GP_EOK, "existing stream updated (%s)", gp_err_name(s2.err));

    T_OK(gp_bus_js_pub(bus, "gpt.a", "m1", "first", 5, done_cb, &p1) == GP_EOK);
    T_OK(gp_bus_js_pub(bus, "gpt.a", "m1", "first", 5, done_cb, &p2) == GP_EOK);
    T_OK(gp_bus_js_pub(bus, "nostream.x", "m2", "x", 1, done_cb, &bad) == GP_EOK);
    RUN_UNTIL(p1.calls > 0 && p2.calls > 0 && bad.calls > 0, 10);
    T_OK(p1.calls == 1 && p1.err == GP_EOK);
    T_OKM(p2.calls == 1 && p2.err == GP_EOK, "duplicate publish reported OK");
    T_OKM(bad.calls == 1 && bad.err == GP_ENOROUTE, "publish without a stream: NOROUTE (%s)",
          gp_err_name(bad.err));

    T_OK(gp_bus_js_pull_new(bus, &c1, pull_cb, &r1, &pl1) == GP_EOK);
    RUN_UNTIL(r1.n > 0, 10);
    run_for(1.5);                           /* a second copy would show up */
    T_OKM(r1.n == 1, "same msg_id stored once (%d delivered)", r1.n);
    T_OK(strcmp(r1.data[0], "first") == 0);
    T_EQ_INT(r1.delivered[0], 1);
    T_OK(r1.off_loop == 0);

    T_OK(gp_bus_js_pub(bus, "gpt.b", "n1", "again", 5, done_cb, &p3) == GP_EOK);
    T_OK(gp_bus_js_pull_new(bus, &c2, pull_cb, &r2, &pl2) == GP_EOK);
    RUN_UNTIL(r2.n >= 2, 10);
    T_EQ_INT(r2.n, 2);
    T_EQ_INT(r2.delivered[0], 1);
    T_OKM(r2.delivered[1] == 2, "nak -> redelivered, delivered count 2");
    T_OK(strcmp(r2.data[1], "again") == 0);
    run_for(0.5);
    T_EQ_INT(r2.n, 2);                      /* acked: not delivered again */

    /* No filter: the whole stream, from the start. */
    T_OK(gp_bus_js_pull_new(bus, &c3, pull_cb, &r3, &pl3) == GP_EOK);
    RUN_UNTIL(r3.n >= 2, 10);
    run_for(0.3);
    T_OKM(r3.n == 2, "unfiltered consumer sees the stream (%d)", r3.n);

    /* A consumer made before its stream keeps retrying until it exists. */
    T_OK(gp_bus_js_pull_new(bus, &c4, pull_cb, &r4, &pl4) == GP_EOK);
    run_for(0.3);
    T_OK(gp_bus_js_stream(bus, &late, done_cb, &s3) == GP_EOK);
    T_OK(gp_bus_js_pub(bus, "late.x", "l1", "late", 4, done_cb, &p4) == GP_EOK);
    RUN_UNTIL(r4.n >= 1, 10);
    T_OKM(s3.err == GP_EOK && p4.err == GP_EOK && r4.n == 1,
          "pull consumer created before its stream (%d)", r4.n);
    gp_bus_js_pull_free(pl4);

    gp_bus_get_stats(bus, &st);
    T_EQ_INT(st.js_published, 4);
    T_EQ_INT(st.js_publish_errors, 1);
    T_EQ_INT(st.js_delivered, 6);
    gp_bus_js_pull_free(pl1);
    gp_bus_js_pull_free(pl2);
    gp_bus_js_pull_free(pl3);
    run_for(1.2);                           /* workers finish their fetch */
}

/* ---- stream limits: never lowered, listed, full ------------------------- */

typedef struct list_rec {
    const char     *want;           /* the stream looked for */
    int             calls;
    gp_err          err;
    size_t          n;
    gp_stream_state lim;            /* it, as listed */
    bool            found;
} list_rec;

static void
list_cb(void *arg, gp_err err, const gp_stream_state *s, size_t n)
{
    list_rec *l = arg;

    l->calls++;
    l->err = err;
    l->n = n;
    l->found = false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].name, l->want) == 0) {
            l->lim = s[i];
            l->found = true;
        }
}

static bool
list_lim(gp_bus *bus, list_rec *l)
{
    int calls = l->calls;

    if (gp_bus_js_streams(bus, list_cb, l) != GP_EOK)
        return false;
    RUN_UNTIL(l->calls > calls, 10);
    return l->calls == calls + 1 && l->err == GP_EOK && l->found;
}

static gp_err
declare(gp_bus *bus, const gp_stream_cfg *sc)
{
    done_rec d = {0};

    if (gp_bus_js_stream(bus, sc, done_cb, &d) != GP_EOK)
        return GP_EINTERNAL;
    RUN_UNTIL(d.calls > 0, 10);
    return d.calls == 1 ? d.err : GP_ETIMEOUT;
}

/* A declaration is a floor: a larger byte limit or age that the stream
 * has (an operator's, another service's) stays when it is declared again,
 * a smaller one is raised; discard new is the default; a full stream
 * refuses a publish with TOOBIG, counted in js_full; the listing shows
 * how full it is. */
static void
test_stream_limits(gp_bus *bus)
{
    const char   *subj[] = {"lim.>", NULL};
    gp_stream_cfg want = {.name = "LIM", .subjects = subj, .max_age_s = 3600, .max_bytes = 4096,
                          .memory = true};
    gp_stream_cfg raised = want, lowered = want;
    list_rec      l = {.want = "LIM"}, l2 = {.want = "LIM2"};
    gp_bus_stats  before, after;
    char          body[1000], id[16];
    done_rec      p[8] = {{0}};
    int           stored = 0, refused = 0;

    T_OKM(declare(bus, &want) == GP_EOK, "LIM declared: 4 KiB, an hour");
    T_OKM(list_lim(bus, &l) && l.lim.max_bytes == 4096 && l.lim.max_age_ns == 3600000000000LL &&
          l.lim.replicas == 1 && !l.lim.discard_old && l.n >= 2,
          "listed with its limits, 1 replica, discard new (%zu streams; max_bytes %lld)", l.n,
          (long long)l.lim.max_bytes);
    raised.max_bytes = 8192;
    raised.max_age_s = 7200;
    T_OK(declare(bus, &raised) == GP_EOK);
    T_OKM(declare(bus, &want) == GP_EOK && list_lim(bus, &l) && l.lim.max_bytes == 8192 &&
          l.lim.max_age_ns == 7200000000000LL,
          "declared again with less: the stream keeps 8 KiB and two hours (%lld, %lld)",
          (long long)l.lim.max_bytes, (long long)l.lim.max_age_ns);
    raised.max_bytes = 0;                   /* unlimited is the largest of all */
    T_OKM(declare(bus, &raised) == GP_EOK && declare(bus, &want) == GP_EOK && list_lim(bus, &l) &&
          l.lim.max_bytes <= 0, "an unlimited stream stays unlimited (%lld)",
          (long long)l.lim.max_bytes);
    {   /* a request with a message id (an agent's attempt event): a retry is stored once */
        reply_rec r1 = {0}, r2 = {0};

        T_OK(gp_bus_request_msgid(bus, "lim.r", "r1", "x", 1, 3000, reply_cb, &r1) == GP_EOK);
        RUN_UNTIL(r1.calls > 0, 5);
        T_OK(gp_bus_request_msgid(bus, "lim.r", "r1", "x", 1, 3000, reply_cb, &r2) == GP_EOK);
        RUN_UNTIL(r2.calls > 0, 5);
        T_OKM(r1.err == GP_EOK && strstr(r1.data, "\"seq\"") != NULL && r2.err == GP_EOK &&
              strstr(r2.data, "\"duplicate\"") != NULL && strstr(r2.data, "true") != NULL && list_lim(bus, &l) && l.lim.msgs == 1,
              "the same id requested twice: stored once, the second a duplicate (%s; %llu stored)",
              r2.data, (unsigned long long)l.lim.msgs);
        T_OK(gp_bus_request_msgid(bus, "lim.r", "", "x", 1, 3000, reply_cb, &r2) == GP_EINVAL);
    }
    /* filling: a fresh stream of 4 KiB */
    lowered.name = "LIM2";
    lowered.subjects = (const char *[]){"lim2.>", NULL};
    T_OK(declare(bus, &lowered) == GP_EOK);

    gp_bus_get_stats(bus, &before);
    memset(body, 'x', sizeof(body));
    for (int i = 0; i < 8; i++) {
        snprintf(id, sizeof(id), "f%d", i);
        T_OK(gp_bus_js_pub(bus, "lim2.a", id, body, sizeof(body), done_cb, &p[i]) == GP_EOK);
    }
    RUN_UNTIL(p[7].calls > 0, 10);
    for (int i = 0; i < 8; i++) {
        stored += p[i].calls == 1 && p[i].err == GP_EOK;
        refused += p[i].calls == 1 && p[i].err == GP_ETOOBIG;
    }
    gp_bus_get_stats(bus, &after);
    T_OKM(stored >= 3 && stored < 5 && refused == 8 - stored,
          "8 KB into a 4 KiB stream: %d stored, the other %d refused TOOBIG", stored, refused);
    T_OKM(after.js_full - before.js_full == (uint64_t)refused &&
          after.js_publish_errors - before.js_publish_errors == (uint64_t)refused,
          "each refusal counted in js_full (%llu)",
          (unsigned long long)(after.js_full - before.js_full));
    T_OKM(list_lim(bus, &l2) && l2.lim.msgs == (uint64_t)stored && l2.n >= 3 &&
          gp_stream_fill_pct(l2.lim.bytes, l2.lim.max_bytes, l2.lim.msgs, l2.lim.max_msgs) >= 70,
          "the listing shows it full: %llu messages, %llu of %lld bytes",
          (unsigned long long)l2.lim.msgs, (unsigned long long)l2.lim.bytes,
          (long long)l2.lim.max_bytes);
}

/* A durable made by one party (gp_bus_js_consumer: created, not read) and
 * read by another that only binds to it (bind_only): the reader gets the
 * maker's filter, whatever filter it asks for, and binding never creates
 * a missing durable. */
static void
test_made_consumer(gp_bus *bus)
{
    gp_pull_cfg  made = {.stream = "GPT", .durable = "made-a", .filter_subject = "gpt.a"};
    gp_pull_cfg  bind = {.stream = "GPT", .durable = "made-a", .bind_only = true};
    gp_pull_cfg  none = {.stream = "GPT", .durable = "never-made", .bind_only = true};
    done_rec     m1 = {0}, m2 = {0}, pb = {0};
    pull_rec     rb = {0}, rn = {0};
    gp_bus_pull *pb1, *pb2;

    T_OKM(gp_bus_js_consumer(bus, &bind, done_cb, &m1) == GP_EINVAL,
          "gp_bus_js_consumer of a bind_only config: INVAL");
    T_OK(gp_bus_js_consumer(bus, &made, done_cb, &m1) == GP_EOK);
    T_OK(gp_bus_js_consumer(bus, &made, done_cb, &m2) == GP_EOK);
    RUN_UNTIL(m1.calls > 0 && m2.calls > 0, 10);
    T_OKM(m1.err == GP_EOK && m2.err == GP_EOK, "durable made, and made again alike (%s, %s)",
          gp_err_name(m1.err), gp_err_name(m2.err));
    T_OK(gp_bus_js_pub(bus, "gpt.b", "mb1", "other", 5, done_cb, &pb) == GP_EOK);
    RUN_UNTIL(pb.calls > 0, 10);
    T_OK(gp_bus_js_pull_new(bus, &bind, pull_cb, &rb, &pb1) == GP_EOK);
    T_OK(gp_bus_js_pull_new(bus, &none, pull_cb, &rn, &pb2) == GP_EOK);
    RUN_UNTIL(rb.n >= 1, 10);
    run_for(1.5);                           /* gpt.b messages would show up */
    T_OKM(rb.n == 1 && strcmp(rb.data[0], "first") == 0,
          "the reader bound to the made durable gets its filter's messages only (%d)", rb.n);
    T_OKM(rn.n == 0, "binding to a missing durable reads nothing (%d)", rn.n);
    gp_bus_js_pull_free(pb1);
    gp_bus_js_pull_free(pb2);
    run_for(1.2);
}

/* ---- outage ------------------------------------------------------------- */

typedef struct conn_rec { int up, down; bool seq_ok; } conn_rec;

static void
conn_cb(void *arg, bool connected)
{
    conn_rec *c = arg;

    if (!pthread_equal(pthread_self(), loop_thread))
        c->seq_ok = false;
    if (connected)
        c->up++;
    else
        c->down++;
}

static int
stack(const char *what)
{
    char        cmd[1024];
    const char *h = getenv("GP_HARNESS"), *d = getenv("GP_STACK_DIR");

    if (h == NULL || d == NULL)
        return -1;
    snprintf(cmd, sizeof(cmd), "'%s/stack.sh' %s '%s'", h, what, d);
    return system(cmd);
}

typedef struct freer { gp_bus *bus; int n; } freer;

static void
free_bus_cb(void *arg, const gp_bus_msg *m)
{
    freer *f = arg;

    (void)m;
    f->n++;
    gp_bus_free(f->bus);                    /* from inside its own callback */
}

static void
test_outage(gp_bus *bus, conn_rec *cr, const char *url)
{
    sub_rec      r = {0};
    gp_bus_sub  *sub, *sub2;
    gp_bus      *bus2 = NULL;
    conn_rec     cr2 = {0, 0, true};
    gp_bus_opts  o2 = {.url = url, .name = "bus-test-late"};
    gp_bus_stats st;
    freer        fr = {0};

    T_OK(gp_bus_sub_new(bus, "t.after", NULL, rec_cb, &r, &sub) == GP_EOK);
    gp_bus_flush_blocking(bus, 2000);
    T_OK(gp_bus_is_connected(bus));
    T_OKM(stack("stop-nats") == 0, "nats-server stopped");
    RUN_UNTIL(cr->down > 0, 10);
    T_OKM(cr->down == 1 && cr->up == 0, "conn_cb: disconnected (%d down, %d up)", cr->down, cr->up);
    T_OK(!gp_bus_is_connected(bus));

    /* A server that is down at start is not an error. */
    T_OK(gp_bus_new(loop, &o2, conn_cb, &cr2, &bus2) == GP_EOK);
    T_OK(bus2 != NULL && !gp_bus_is_connected(bus2));

    T_OKM(stack("start-nats") == 0, "nats-server started");
    RUN_UNTIL(cr->up > 0 && cr2.up > 0, 20);
    T_OKM(cr->up == 1, "conn_cb: reconnected (%d up)", cr->up);
    T_OKM(cr2.up == 1, "late bus connected in the background (%d up)", cr2.up);
    T_OK(cr->seq_ok && cr2.seq_ok);
    T_OK(gp_bus_is_connected(bus));
    gp_bus_get_stats(bus, &st);
    T_EQ_INT(st.reconnects, 1);

    /* The old subscription was re-established; the new bus publishes.
     * cnats resends the subscription on reconnect, but the server may take
     * bus2's publish (another connection) before it: a round trip on bus
     * first, whose PONG comes after the server processed the SUB. */
    gp_bus_flush_blocking(bus, 2000);
    T_OK(gp_bus_pub(bus, "t.after", NULL, "a1", 2) == GP_EOK);
    T_OK(gp_bus_pub(bus2, "t.after", NULL, "a2", 2) == GP_EOK);
    RUN_UNTIL(r.n >= 2, 10);
    T_OKM(r.n == 2, "pub/sub works after the restart (%d)", r.n);

    fr.bus = bus2;
    T_OK(gp_bus_sub_new(bus2, "t.bye", NULL, free_bus_cb, &fr, &sub2) == GP_EOK);
    gp_bus_flush_blocking(bus2, 2000);
    gp_bus_pub(bus, "t.bye", NULL, "x", 1);
    gp_bus_pub(bus, "t.bye", NULL, "x", 1);
    RUN_UNTIL(fr.n > 0, 5);
    run_for(0.2);
    T_OKM(fr.n == 1, "gp_bus_free inside a callback (deferred)");
    gp_bus_sub_free(sub);
}

/* ---- publishing to a server that does not read ---------------------------- */

static volatile pid_t stopped_pid;

/* Safety net: if a publish blocks for good, the server is woken anyway
 * (and the stall then shows up as a failed figure, not a hung test). */
static void
alarm_cont(int sig)
{
    (void)sig;
    if (stopped_pid > 0)
        kill(stopped_pid, SIGCONT);
}

static pid_t
nats_pid(void)
{
    char  path[1024];
    FILE *f;
    int   pid = -1;

    snprintf(path, sizeof(path), "%s/nats.pid", getenv("GP_STACK_DIR") ? getenv("GP_STACK_DIR") : ".");
    if ((f = fopen(path, "r")) != NULL) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = -1;
        fclose(f);
    }
    return (pid_t)pid;
}

/* nats-server SIGSTOPped for 3 s while the loop keeps publishing 64 KiB
 * messages: publishes write on the loop thread, so once the socket buffers
 * are full a write waits; the write deadline must bound that wait (the
 * figure is printed), and the bus must publish again after SIGCONT. */
static void
test_pub_stall(const char *url)
{
    gp_bus_opts  o = {.url = url, .name = "bus-test-stall"};
    gp_bus      *b = NULL;
    gp_bus_sub  *sub;
    sub_rec      r = {0};
    size_t       big = 64 * 1024;
    char        *blob = calloc(1, big);
    pid_t        pid = nats_pid();
    double       t_end, worst = 0, t0;
    long         n = 0, errors = 0;
    gp_bus_stats st;

    T_OKM(pid > 0, "nats-server pid %d", (int)pid);
    if (pid <= 0 || blob == NULL) {
        free(blob);
        return;
    }
    T_OK(gp_bus_new(loop, &o, NULL, NULL, &b) == GP_EOK);
    T_OK(gp_bus_sub_new(b, "t.stall.after", NULL, rec_cb, &r, &sub) == GP_EOK);
    gp_bus_flush_blocking(b, 2000);
    signal(SIGALRM, alarm_cont);
    stopped_pid = pid;
    kill(pid, SIGSTOP);
    alarm(8);
    t_end = now_s() + 3;
    while (now_s() < t_end && n < 20000) {
        double t1 = now_s(), d;

        if (gp_bus_pub(b, "t.stall", NULL, blob, big) != GP_EOK)
            errors++;
        d = now_s() - t1;
        if (d > 0.05)
            printf("# stall %.3f s at +%.3f (%s)\n", d, t1 - (t_end - 3), gp_bus_is_connected(b) ? "up" : "down");
        if (d > worst)
            worst = d;
        n++;
        ev_run(loop, EVRUN_NOWAIT);
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
    kill(pid, SIGCONT);
    alarm(0);
    stopped_pid = 0;
    gp_bus_get_stats(b, &st);
    printf("# publish stall under a stopped nats-server: worst %.3f s over %ld publishes of "
           "%zu bytes (%ld failed, write deadline %d ms)\n", worst, n, big, errors,
           GP_BUS_WRITE_DEADLINE_MS);
    T_OKM(worst < 2.0 * GP_BUS_WRITE_DEADLINE_MS / 1000.0 + 0.5,
          "the loop stalled at most %.3f s in one publish (bound %.1f s)", worst,
          2.0 * GP_BUS_WRITE_DEADLINE_MS / 1000.0 + 0.5);
    T_OKM(errors == (long)st.publish_errors, "failed publishes are counted (%ld)", errors);
    t0 = now_s();
    RUN_UNTIL(gp_bus_is_connected(b), 20);
    T_OKM(gp_bus_is_connected(b), "connected again %.2f s after SIGCONT", now_s() - t0);
    RUN_UNTIL((gp_bus_pub(b, "t.stall.after", NULL, "z", 1), gp_bus_flush_blocking(b, 200),
               r.n > 0), 20);
    T_OKM(r.n > 0, "publishing works after the stall (%d)", r.n);
    gp_bus_sub_free(sub);
    gp_bus_free(b);
    free(blob);
}

/* Freeing a bus that never reached a server is quick and clean. */
static void
test_never_connected(void)
{
    gp_bus_opts o = {.url = "nats://127.0.0.1:1", .name = "bus-test-nowhere"};
    gp_bus     *b = NULL;
    reply_rec   r = {0};
    double      t0;

    T_OK(gp_bus_new(loop, &o, NULL, NULL, &b) == GP_EOK);
    T_OK(b != NULL && !gp_bus_is_connected(b));
    T_OK(gp_bus_pub(b, "t.x", NULL, "x", 1) == GP_EOK);          /* buffered */
    T_OK(gp_bus_request(b, "t.x", "x", 1, 5000, reply_cb, &r) == GP_EOK);
    T_OK(gp_bus_js_stream(b, &(gp_stream_cfg){.name = "X", .subjects = (const char *[]){"x", NULL}},
                          NULL, NULL) == GP_EINVAL);           /* opened without JetStream */
    run_for(0.2);
    t0 = now_s();
    gp_bus_free(b);
    T_OKM(now_s() - t0 < 1.0, "free of an unconnected bus is quick (%.3f s)", now_s() - t0);
    T_OK(r.calls == 1 && r.err == GP_EUNAVAIL);
}

/* A burst published from another connection while the loop is busy with
 * earlier batches: every message must be handled without a later message
 * to wake the loop (a burst once left thousands stranded in the inbox). */
typedef struct burst {
    const char *url;
    int         n;
} burst;

static void *
burst_thread(void *arg)
{
    burst          *b = arg;
    natsConnection *nc = NULL;

    if (natsConnection_ConnectTo(&nc, b->url) != NATS_OK)
        return NULL;
    for (int i = 0; i < b->n; i++)
        natsConnection_Publish(nc, "t.burst", "0123456789abcdef", 16);
    natsConnection_FlushTimeout(nc, 5000);
    natsConnection_Destroy(nc);
    return NULL;
}

static void
test_burst(gp_bus *bus, const char *url)
{
    sub_rec     r = {0};
    gp_bus_sub *sub;
    burst       b = {url, 30000};
    pthread_t   t;
    double      t0;

    T_OK(gp_bus_sub_new(bus, "t.burst", NULL, rec_cb, &r, &sub) == GP_EOK);
    run_for(0.1);
    pthread_create(&t, NULL, burst_thread, &b);
    t0 = now_s();
    RUN_UNTIL(r.n >= b.n, 20);
    pthread_join(t, NULL);
    T_OKM(r.n == b.n, "a burst of %d messages is handled in full without a later wake-up "
          "(%d in %.2f s)", b.n, r.n, now_s() - t0);
    gp_bus_sub_free(sub);
}

int
main(void)
{
    const char  *url = getenv("GP_NATS_URL");
    gp_bus      *bus;
    gp_bus_sub  *silent = NULL;
    conn_rec     cr = {0, 0, true};
    reply_rec    last = {0};
    gp_bus_opts  o = {.name = "bus-test", .jetstream = true};

    if (url == NULL) {
        printf("not ok 1 - GP_NATS_URL not set (run under tests/harness/with-stack.sh)\n");
        return 1;
    }
    gp_log_setup("bus_test", "warn", 2);
    loop = EV_DEFAULT;
    loop_thread = pthread_self();
    o.url = url;
    T_OK(gp_bus_new(loop, &o, conn_cb, &cr, &bus) == GP_EOK);
    T_OK(gp_bus_is_connected(bus));

    test_never_connected();
    test_pubsub(bus);
    test_queue_group(bus);
    test_sub_free_in_cb(bus);
    test_request(bus, &silent);
    test_overflow(bus);
    test_overflow_bytes(bus);
    test_lanes(bus);
    test_fail_requests(url);
    test_max_pending(url);
    test_inbox_prefix(bus, url);
    test_burst(bus, url);
    test_jetstream(bus);
    test_stream_limits(bus);
    test_made_consumer(bus);
    test_outage(bus, &cr, url);
    test_pub_stall(url);

    /* gp_bus_free fails pending requests with UNAVAIL, once. */
    T_OK(gp_bus_request(bus, "t.silent", "x", 1, 10000, reply_cb, &last) == GP_EOK);
    run_for(0.05);
    gp_bus_free(bus);
    T_EQ_INT(last.calls, 1);
    T_OK(last.err == GP_EUNAVAIL);
    T_OKM(ev_pending_count(loop) == 0, "no watcher left pending");
    ev_loop_destroy(loop);
    nats_CloseAndWait(5000);
    return T_DONE();
}
