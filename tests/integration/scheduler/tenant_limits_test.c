/* tenant_limits_test.c -- fair limits per tenant at the API (issue 26):
 * a real gridpool-scheduler (and gridpool-registry for the tenants), with
 * tenant "hog" limited to HOG_RATE submits a second (--tenant-limits) and
 * "calm" on the defaults.  Calm submits at CALM_RATE throughout 16 short
 * phases, idle and flood in turn (interleaved, so a machine loaded by
 * something else weighs on both alike); in the flood phases hog submits at
 * 10x its rate.  Checks:
 *   - hog's excess is refused RATE_LIMITED, with retry_after_ms in the
 *     error reply (and "retry after N ms" in the decoded detail); hog gets
 *     about its rate x the flood time + its bursts accepted, no more;
 *   - calm is never refused, and the p99 of its submits' latency in the
 *     flood phases is within 2x of the p99 in the idle phases (both
 *     printed; the acceptance of issue 26; see latency_check);
 *   - /metrics: gp_tenant_limited_total{tenant="hog"} is hog's refusals,
 *     and calm has no such series;
 *   - gpctl prints the code, the reason and the retry hint (tenant "tiny",
 *     1 submit a second, kept busy by the test meanwhile).
 * test-tags: pass=normal (tests/run.sh) */
#include <poll.h>
#include <sys/wait.h>

#include "msg_gen.h"
#include "test_stack.h"

#define HOG_RATE    20                /* hog's configured rate, submits/s (sched_args) */
#define HOG_BURST   5                 /* and its burst */
#define HOG_SEND    (10 * HOG_RATE)   /* what it sends in a flood phase */
#define CALM_RATE   40                /* calm's submits/s, all phases */
#define PHASE_S     0.75
#define PHASES      16                /* idle, flood, idle, flood, ... */
#define PER_PHASE   256               /* calm's samples kept per phase */

static struct ev_loop *loop;
static gp_bus         *bus;

typedef struct stats {
    int    sent, ok, limited, other, hinted;
    double lat[PHASES][PER_PHASE];    /* calm: latencies by phase sent in, s */
    int    nlat[PHASES];
    char   first_other[GP_ERRBUF_LEN + 32];
    char   detail[GP_ERRBUF_LEN];     /* a RATE_LIMITED detail as a client decodes it */
    unsigned retry_max;
} stats;

static stats hog, calm, tiny;

typedef struct pending {
    stats *st;
    int    phase;
    double t0;
} pending;

/* ---- helpers ------------------------------------------------------------- */

static pid_t
start(const char *name, int http, const char *const *extra)
{
    char        bin[512], port[16];
    const char *argv[16] = {bin, "--http-port", port};
    int         n = 3;

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-%s", tl_env("GP_BUILD"), name);
    snprintf(port, sizeof(port), "%d", http);
    for (; extra != NULL && *extra != NULL && n < 15; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    return tl_spawn((char *const *)argv);
}

static bool
healthy(const char *service)
{
    msg_health_request hq = {0};
    msg_health         h = {0};
    char               subj[64], d[GP_ERRBUF_LEN];
    const char        *args[] = {service};
    bool               up;

    gp_op_subject(GP_OP_HEALTH, subj, sizeof(subj), args);
    up = tl_call(loop, bus, subj, &msg_health_request_desc, &hq, &msg_health_desc, &h, 1000, d,
                 sizeof(d)) == GP_EOK && h.pg == MSG_HEALTH_PG_UP;
    gp_msg_clear(&msg_health_desc, &h);
    return up;
}

static void
make_tenant(const char *id)
{
    msg_tenant t = {0}, got = {0};
    char       subj[GP_MAX_SUBJECT], d[GP_ERRBUF_LEN];
    gp_err     rc;

    snprintf(t.id, sizeof(t.id), "%s", id);
    t.kind = MSG_TENANT_KIND_CUSTOMER;
    gp_op_subject(GP_OP_ADMIN_TENANT_CREATE, subj, sizeof(subj), NULL);
    rc = tl_call(loop, bus, subj, &msg_tenant_desc, &t, &msg_tenant_desc, &got, 5000, d,
                 sizeof(d));
    T_OKM(rc == GP_EOK, "tenant %s created (%s %s)", id, gp_err_name(rc), d);
}

/* ---- the load ------------------------------------------------------------- */

/* Reads a RATE_LIMITED reply the way a client in another language would:
 * the ErrorReply of the contract, retry_after_ms included. */
static void
note_limited(stats *st, const char *data, size_t len)
{
    msg_error_reply er = {0};

    if (gp_msg_decode(&msg_error_reply_desc, data, len, &er, NULL, 0) == GP_EOK &&
        GP_HAS(&er.error, MSG_ERROR__RETRY_AFTER_MS) && er.error.retry_after_ms > 0) {
        st->hinted++;
        if (er.error.retry_after_ms > st->retry_max)
            st->retry_max = er.error.retry_after_ms;
    }
    gp_msg_clear(&msg_error_reply_desc, &er);
}

static void
on_reply(void *arg, gp_err err, const char *data, size_t len)
{
    pending *p = arg;
    stats   *st = p->st;
    msg_job  job = {0};
    char     d[GP_ERRBUF_LEN] = "";

    if (err == GP_EOK)
        err = gp_msg_decode_reply(&msg_job_desc, data, len, &job, d, sizeof(d));
    gp_msg_clear(&msg_job_desc, &job);
    if (err == GP_EOK) {
        st->ok++;
        if (st == &calm && st->nlat[p->phase] < PER_PHASE)
            st->lat[p->phase][st->nlat[p->phase]++] = tl_now() - p->t0;
    } else if (err == GP_ERATE_LIMITED) {
        st->limited++;
        snprintf(st->detail, sizeof(st->detail), "%s", d);
        note_limited(st, data, len);
    } else if (st->other++ == 0) {
        snprintf(st->first_other, sizeof(st->first_other), "%s %s", gp_err_name(err), d);
    }
    free(p);
}

static void
send_submit(const char *tenant, stats *st, int phase)
{
    msg_job_spec sp = {0};
    pending     *p = malloc(sizeof(*p));
    char         subj[GP_MAX_SUBJECT];
    gp_buf       b;

    snprintf(sp.command, sizeof(sp.command), "sim:run=300s exit=0");
    sp.gpus_per_node = 1;
    snprintf(sp.client_request_id, sizeof(sp.client_request_id), "%s-%d", tenant, st->sent);
    gp_op_subjectf(GP_OP_API_JOB_SUBMIT, subj, sizeof(subj), tenant);
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    *p = (pending){st, phase, tl_now()};
    st->sent++;
    if (gp_msg_encode(&msg_job_spec_desc, &sp, &b) != GP_EOK ||
        gp_bus_request(bus, subj, b.p, b.n, 10000, on_reply, p) != GP_EOK) {
        st->other++;
        free(p);
    }
    gp_buf_fini(&b);
}

/* One phase: calm at CALM_RATE, hog at HOG_SEND in the odd (flood)
 * phases, each sent when due (a late loop turn catches up instead of
 * sending less). */
static void
run_phase(int phase)
{
    int    flood = phase % 2;
    double t0 = tl_now(), t;
    int    calm0 = calm.sent, hog0 = hog.sent;

    while ((t = tl_now() - t0) < PHASE_S) {
        while (calm.sent - calm0 < (int)(t * CALM_RATE) + 1)
            send_submit("calm", &calm, phase);
        while (flood && hog.sent - hog0 < (int)(t * HOG_SEND) + 1)
            send_submit("hog", &hog, phase);
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
        usleep(500);
    }
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* The q-th percentile (nearest rank) of v, sorted here. */
static double
pct(double *v, int n, int q)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[(n * q + 99) / 100 - 1];
}

/* ---- checks ---------------------------------------------------------------- */

/* The median of n values (sorted here). */
static double
median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* calm's p99 in the idle and in the flood phases.  A p99 of a few hundred
 * samples on a shared 2-core machine is decided by one stall of the
 * machine (another test's burst of CPU), in either kind of phase: so the
 * phases are short and many, and each kind's p99 is the median of its
 * phases' p99s, which one stall moves only in its own phase.  Without the
 * limit hog's 10x is all admitted and every flood phase is slower (calm's
 * p90 several times the idle one). */
static void
latency_check(void)
{
    double p[2][PHASES / 2], all[2][PHASES / 2 * PER_PHASE], m[2];
    int    n[2] = {0, 0}, na[2] = {0, 0};

    for (int ph = 0; ph < PHASES; ph++) {
        int k = ph % 2;

        p[k][n[k]++] = pct(calm.lat[ph], calm.nlat[ph], 99);
        for (int i = 0; i < calm.nlat[ph]; i++)
            all[k][na[k]++] = calm.lat[ph][i];
    }
    m[0] = median(p[0], n[0]);
    m[1] = median(p[1], n[1]);
    printf("# calm submit latency, idle / during hog's flood: p99 (median of %d phases' p99) "
           "%.2f / %.2f ms; over all samples p50 %.2f / %.2f, p90 %.2f / %.2f, p99 %.2f / "
           "%.2f ms (%d / %d samples)\n", n[0], m[0] * 1e3, m[1] * 1e3,
           pct(all[0], na[0], 50) * 1e3, pct(all[1], na[1], 50) * 1e3,
           pct(all[0], na[0], 90) * 1e3, pct(all[1], na[1], 90) * 1e3,
           pct(all[0], na[0], 99) * 1e3, pct(all[1], na[1], 99) * 1e3, na[0], na[1]);
    T_OKM(na[0] >= PHASES / 2 * CALM_RATE * PHASE_S * 0.9 && na[1] >= na[0] * 0.9 &&
          m[1] <= 2 * m[0], "calm's submits keep their latency while hog floods: p99 %.2f ms "
          "within 2x of idle %.2f ms", m[1] * 1e3, m[0] * 1e3);
}

static void
test_flood(int http)
{
    double flood_s = PHASE_S * PHASES / 2;
    int    cap;
    char  *body = NULL;

    for (int ph = 0; ph < PHASES; ph++)
        run_phase(ph);
    tl_spin(loop, 1.0);                            /* the last replies */
    latency_check();
    printf("# hog: sent %d ok %d limited %d other %d; calm: sent %d ok %d limited %d other %d\n",
           hog.sent, hog.ok, hog.limited, hog.other, calm.sent, calm.ok, calm.limited,
           calm.other);
    T_OKM(hog.ok + hog.limited == hog.sent && hog.other == 0,
          "every hog submit answered, accepted or RATE_LIMITED (%d other: %s)", hog.other,
          hog.first_other);
    /* a burst per flood (the bucket refills in each idle phase) + the rate */
    cap = PHASES / 2 * HOG_BURST + (int)(HOG_RATE * flood_s) + HOG_RATE / 2;
    T_OKM(hog.ok <= cap && hog.ok >= (int)(HOG_RATE * flood_s) / 2,
          "hog at 10x its rate got about its rate: %d accepted of %d (at most %d)", hog.ok,
          hog.sent, cap);
    T_OKM(hog.limited >= hog.sent / 2, "hog's excess refused RATE_LIMITED (%d of %d)",
          hog.limited, hog.sent);
    T_OKM(hog.hinted == hog.limited && hog.retry_max > 0 && hog.retry_max <= 1000 / HOG_RATE + 1,
          "every refusal carries retry_after_ms (%d of %d, at most %u ms)", hog.hinted,
          hog.limited, hog.retry_max);
    T_OKM(strstr(hog.detail, "over its request rate") != NULL &&
          strstr(hog.detail, "retry after") != NULL, "a client's detail: %s", hog.detail);
    T_OKM(calm.ok == calm.sent && calm.limited == 0 && calm.other == 0,
          "calm: every submit accepted (%d of %d, %d limited, other: %s)", calm.ok, calm.sent,
          calm.limited, calm.first_other);
    T_OK(tl_http_get(http, "/metrics", &body) > 0);
    T_OKM(tl_metric(body, "gp_tenant_limited_total{tenant=\"hog\"}") == hog.limited,
          "/metrics: gp_tenant_limited_total{tenant=\"hog\"} %.0f", tl_metric(body,
          "gp_tenant_limited_total{tenant=\"hog\"}"));
    T_OK(tl_metric(body, "gp_tenant_limited_total{tenant=\"calm\"}") < 0);
    T_OK(tl_metric(body, "gp_tenant_limited_reason_total{reason=\"rate\"}") == hog.limited);
    free(body);
}

/* Runs gpctl submit as tenant tiny while the test keeps tiny's bucket
 * empty (a submit of its own every 10 ms), so gpctl's is refused however
 * long gpctl takes to start; its output into out, its exit status. */
static int
gpctl_flooded(char *out, size_t n)
{
    char    cmd[1024];
    size_t  got = 0;
    double  next = tl_now();
    FILE   *f;
    ssize_t k = 1;

    snprintf(cmd, sizeof(cmd), "%s/bin/gpctl --nats-url %s submit --tenant tiny "
             "--command 'sim:run=300s' --gpus 1 2>&1", tl_env("GP_BUILD"),
             tl_env("GP_NATS_URL"));
    if ((f = popen(cmd, "r")) == NULL)
        return -1;
    while (k > 0) {
        struct pollfd p = {.fd = fileno(f), .events = POLLIN};

        if (tl_now() >= next) {
            send_submit("tiny", &tiny, 0);
            next += 0.01;
        }
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
        if (poll(&p, 1, 2) > 0 && (k = read(p.fd, out + got, n - 1 - got)) > 0)
            got += (size_t)k;
    }
    out[got] = '\0';
    return pclose(f);
}

/* gpctl's own output for a refused submit (up to 3 tries: gpctl's request
 * may still meet the one token a second that tiny's bucket gets). */
static void
test_gpctl(void)
{
    char out[2048] = "";
    int  st = -1;

    for (int i = 0; i < 3 && strstr(out, "RATE_LIMITED") == NULL; i++)
        st = gpctl_flooded(out, sizeof(out));
    tl_spin(loop, 0.5);
    printf("# gpctl: %s", out);
    T_OKM(WIFEXITED(st) && WEXITSTATUS(st) == 1, "gpctl's submit over the tenant's rate fails");
    T_OKM(strstr(out, "gpctl: RATE_LIMITED: tenant tiny is over its request rate (1/s, burst 1)"
                  "; retry after ") != NULL, "gpctl prints the code, why and the retry hint");
}

int
main(void)
{
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "tenant-limits-test"};
    const char *sched_args[] = {"--tenant-limits", "hog=20/5/ tiny=1/1/", NULL};
    int         http = tl_free_port();
    pid_t       reg, sched;
    double      t0 = tl_now();
    bool        up = false;

    loop = ev_default_loop(0);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    reg = start("registry", tl_free_port(), NULL);
    sched = start("scheduler", http, sched_args);
    while (!up && tl_now() - t0 < 30) {
        up = healthy("registry") && healthy("scheduler");
        if (!up)
            usleep(100000);
    }
    T_OKM(up, "registry and scheduler healthy");
    make_tenant("hog");
    make_tenant("calm");
    make_tenant("tiny");
    tl_spin(loop, 0.5);
    test_flood(http);
    test_gpctl();
    kill(sched, SIGTERM);
    kill(reg, SIGTERM);
    T_OKM(tl_wait_exit(sched, 10) == 0, "the scheduler stops cleanly");
    tl_wait_exit(reg, 10);
    gp_bus_free(bus);
    gp_lib_close();
    return T_DONE();
}
