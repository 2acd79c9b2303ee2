/* chassis_bench.c -- request/reply round trips per second through the
 * chassis (tests/helpers/testsvc, route gp.test.echo: decode, handler,
 * encode) next to a raw cnats responder in this process (a subscription
 * whose callback publishes the request bytes back to the reply subject),
 * measured by the same client code in the same run.
 *
 * The client is a gp_bus on an ev loop keeping W requests in flight
 * (W = 1 and W = 32); it sends the Echo sample of msg_all and decodes each
 * reply with gp_msg_decode_reply, whichever side answered.  Trials of the
 * two sides alternate (order swapped each trial, so drift on a noisy
 * machine hits both); each trial is bounded in time and count; the median
 * is reported.  Ratio = chassis / raw.
 *
 * The reference responder's connection uses natsOptions_SetSendAsap, as
 * the chassis' bus does (a reply goes to the socket at once instead of
 * through cnats' flusher thread).  For information, W = 1 is also measured
 * against a responder with cnats' default buffering.
 *
 * Needs the stack's environment (tests/bench/run.sh): GP_NATS_URL, ... and
 * GP_BUILD (testsvc is started from GP_BUILD/test/bin/testsvc).
 * Output: key=value lines (see bench.h). */
#include <ev.h>
#include <nats/nats.h>

#include "bench.h"
#include "gp/app.h"
#include "gp/bus.h"
#include "gp/limits.h"

#define TRIALS      3
#define TRIAL_S     1.0
#define WARM_S      0.3
#define MAX_REQS    2000000
#define REQ_TIMEOUT 5000
#define RAW_SUBJECT "gp.bench.raw.echo"
#define ASAP_SUBJECT "gp.bench.rawasap.echo"

static struct ev_loop *loop;
static gp_bus         *bus;
static const char     *body;
static size_t          body_n;

typedef struct run {
    const char *subject;
    int         window;
    int         inflight;
    long        sent, ok, errors;
    double      t0, t_end;
    bool        stopping;
} run;

static void issue(run *r);

static void
on_reply(void *arg, gp_err err, const char *data, size_t len)
{
    run     *r = arg;
    msg_echo out;
    gp_err   rc = err;

    r->inflight--;
    if (rc == GP_EOK)
        rc = gp_msg_decode_reply(&msg_echo_desc, data, len, &out, NULL, 0);
    if (rc == GP_EOK) {
        r->ok++;
        gp_msg_clear(&msg_echo_desc, &out);
    } else {
        r->errors++;
    }
    issue(r);
}

/* Tops the window up unless the time or count is spent. */
static void
issue(run *r)
{
    if (!r->stopping && (b_now() >= r->t_end || r->sent >= MAX_REQS))
        r->stopping = true;
    while (!r->stopping && r->inflight < r->window) {
        if (gp_bus_request(bus, r->subject, body, body_n, REQ_TIMEOUT, on_reply, r) != GP_EOK) {
            r->errors++;
            r->stopping = true;
            break;
        }
        r->inflight++;
        r->sent++;
    }
}

static void
tick_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l;
    (void)w;
    (void)revents;
}

/* Round trips per second over seconds, window W, on subject. */
static double
measure(const char *subject, int window, double seconds, long *errors)
{
    run      r = {.subject = subject, .window = window};
    ev_timer tick;
    double   t1, end_wait;

    ev_timer_init(&tick, tick_cb, 0.05, 0.05);
    ev_timer_start(loop, &tick);
    r.t0 = b_now();
    r.t_end = r.t0 + seconds;
    issue(&r);
    end_wait = r.t_end + REQ_TIMEOUT / 1000.0 + 1;
    while ((r.inflight > 0 || !r.stopping) && b_now() < end_wait) {
        ev_run(loop, EVRUN_ONCE);
        if (!r.stopping && b_now() >= r.t_end)
            issue(&r);
    }
    t1 = b_now();
    ev_timer_stop(loop, &tick);
    if (errors != NULL)
        *errors += r.errors;
    return (double)r.ok / (t1 - r.t0);
}

/* ---- the raw cnats responder --------------------------------------------- */

static void
raw_cb(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *arg)
{
    (void)sub;
    (void)arg;
    if (natsMsg_GetReply(m) != NULL)
        natsConnection_Publish(nc, natsMsg_GetReply(m), natsMsg_GetData(m),
                               natsMsg_GetDataLength(m));
    natsMsg_Destroy(m);
}

static void
conn_cb(void *arg, bool connected)
{
    (void)arg;
    (void)connected;
}

int
main(void)
{
    const char       *url = b_env("GP_NATS_URL");
    const char       *build = b_env("GP_BUILD"), *stack = b_env("GP_STACK_DIR");
    const msg_sample *s = NULL;
    natsConnection   *rawnc = NULL;
    natsSubscription *rawsub = NULL;
    natsConnection   *asapnc = NULL;
    natsSubscription *asapsub = NULL;
    natsOptions      *asapo = NULL;
    gp_bus_opts       o = {.url = url, .name = "chassis-bench"};
    gp_buf            b;
    char              bin[512], port[16], logp[512];
    const char       *argv[8];
    int               http_port = b_free_port(), windows[2] = {1, 32};
    long              errors = 0;
    pid_t             svc;
    double            t;
    int               rc = 1;

    for (const msg_sample *m = msg_all; m->desc != NULL; m++)
        if (m->desc == &msg_echo_desc)
            s = m;
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    if (s == NULL || gp_msg_encode(&msg_echo_desc, s->sample, &b) != GP_EOK) {
        b_note("chassis: no Echo sample");
        return 1;
    }
    body = b.p;
    body_n = b.n;

    snprintf(bin, sizeof(bin), "%s/test/bin/testsvc", build);
    snprintf(port, sizeof(port), "%d", http_port);
    snprintf(logp, sizeof(logp), "%s/testsvc.log", stack);
    argv[0] = bin;
    argv[1] = "--http-port";
    argv[2] = port;
    argv[3] = "--log-level";
    argv[4] = "warn";
    argv[5] = NULL;
    svc = b_spawn((char *const *)argv, logp);
    if (!b_wait_healthy(svc, http_port, 20)) {
        b_note("chassis: testsvc not healthy within 20 s (log: %s)", logp);
        goto out;
    }

    loop = ev_default_loop(0);
    if (gp_bus_new(loop, &o, conn_cb, NULL, &bus) != GP_EOK)
        goto out;
    for (t = b_now(); !gp_bus_is_connected(bus) && b_now() - t < 10;)
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT), usleep(1000);
    if (natsConnection_ConnectTo(&rawnc, url) != NATS_OK ||
        natsConnection_Subscribe(&rawsub, rawnc, RAW_SUBJECT, raw_cb, NULL) != NATS_OK ||
        natsConnection_Flush(rawnc) != NATS_OK) {
        b_note("chassis: raw responder could not subscribe");
        goto out;
    }
    if (natsOptions_Create(&asapo) != NATS_OK || natsOptions_SetURL(asapo, url) != NATS_OK ||
        natsOptions_SetSendAsap(asapo, true) != NATS_OK ||
        natsConnection_Connect(&asapnc, asapo) != NATS_OK ||
        natsConnection_Subscribe(&asapsub, asapnc, ASAP_SUBJECT, raw_cb, NULL) != NATS_OK ||
        natsConnection_Flush(asapnc) != NATS_OK) {
        b_note("chassis: send-asap responder could not subscribe");
        goto out;
    }
    /* Both sides answer before anything is timed. */
    for (t = b_now(); b_now() - t < 10; usleep(100000)) {
        long e = 0;

        if (measure("gp.test.echo", 1, 0.05, &e) > 0 && e == 0 &&
            measure(ASAP_SUBJECT, 1, 0.05, &e) > 0 && e == 0)
            break;
    }
    b_kv("chassis_body_bytes", (double)body_n);
    for (int wi = 0; wi < 2; wi++) {
        int    w = windows[wi];
        double chassis[TRIALS], raw[TRIALS], mc, mr;
        char   key[64];

        measure("gp.test.echo", w, WARM_S, NULL);
        measure(ASAP_SUBJECT, w, WARM_S, NULL);
        for (int k = 0; k < TRIALS; k++) {
            if (k % 2 == 0) {
                chassis[k] = measure("gp.test.echo", w, TRIAL_S, &errors);
                raw[k] = measure(ASAP_SUBJECT, w, TRIAL_S, &errors);
            } else {
                raw[k] = measure(ASAP_SUBJECT, w, TRIAL_S, &errors);
                chassis[k] = measure("gp.test.echo", w, TRIAL_S, &errors);
            }
            b_note("chassis: W=%d trial %d: chassis %.0f/s, raw %.0f/s", w, k, chassis[k], raw[k]);
        }
        mc = b_median(chassis, TRIALS);
        mr = b_median(raw, TRIALS);
        snprintf(key, sizeof(key), "chassis_w%d_rps", w);
        b_kv(key, (double)(long long)mc);
        snprintf(key, sizeof(key), "chassis_w%d_raw_rps", w);
        b_kv(key, (double)(long long)mr);
        snprintf(key, sizeof(key), "chassis_w%d_ratio", w);
        b_kv(key, mr > 0 ? mc / mr : 0);
        if (w == 1) {
            double buffered[TRIALS];

            measure(RAW_SUBJECT, w, WARM_S, NULL);
            for (int k = 0; k < TRIALS; k++)
                buffered[k] = measure(RAW_SUBJECT, w, TRIAL_S, &errors);
            b_kv("chassis_w1_raw_buffered_rps", (double)(long long)b_median(buffered, TRIALS));
        }
    }
    b_kv("chassis_errors", (double)errors);
    rc = 0;
out:
    gp_bus_free(bus);
    natsSubscription_Destroy(rawsub);
    natsConnection_Destroy(rawnc);
    natsSubscription_Destroy(asapsub);
    natsConnection_Destroy(asapnc);
    natsOptions_Destroy(asapo);
    b_stop(svc, 10);
    gp_buf_fini(&b);
    gp_lib_close();
    return rc;
}
