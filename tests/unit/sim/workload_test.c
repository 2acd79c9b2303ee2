/* workload_test.c -- gridpool-sim's workload generator
 * (services/sim/workload.c): the file, determinism (same seed -> the same
 * job specs), mix proportions, and every generated spec through the codec
 * and through the agent's sim: grammar.
 *
 * Named agent_* so the Makefile links the agent's code (fleet.c needs the
 * simulated GPU models, the check needs simjob_parse); the simulator's
 * pure files are compiled in here, as the Makefile links no sim_* tests. */
#include <math.h>
#include <string.h>

#include "../../../services/agent/simjob.h"
#include "../../../services/sim/fleet.c"
#include "../../../services/sim/workload.c"
#include "gp/codec.h"
#include "test.h"

#define N 4000

static bool
encode(const msg_job_spec *s, gp_buf *b)
{
    gp_buf_init(b, GP_MAX_MSG_BYTES);
    return gp_msg_encode(&msg_job_spec_desc, s, b) == GP_EOK;
}

static bool
same_job(const workload *a, const fleet *fa, const workload *b, const fleet *fb, unsigned i)
{
    wl_job ja, jb;
    gp_buf ba, bb;
    bool   same;

    workload_job(a, fa, i, &ja);
    workload_job(b, fb, i, &jb);
    same = encode(&ja.spec, &ba) && encode(&jb.spec, &bb) && ba.n == bb.n &&
           memcmp(ba.p, bb.p, ba.n) == 0 && strcmp(ja.tenant, jb.tenant) == 0;
    gp_buf_fini(&ba);
    gp_buf_fini(&bb);
    return same;
}

static void
test_file(void)
{
    workload w;
    char     err[256] = "", path[] = "/tmp/gp-wl-test-XXXXXX";
    int      fd;
    FILE    *f;

    workload_defaults(&w);
    T_EQ_INT(workload_load("deploy/workload-example.conf", &w, err, sizeof(err)), GP_EOK);
    T_OKM(strcmp(w.name, "example") == 0 && w.seed == 42 && w.jobs == 500 && w.rate == 5 &&
          w.tenants.n == 4 && strcmp(w.tenants.c[2].name, "initech") == 0 && w.models.n == 6 &&
          strcmp(w.models.c[3].name, "RTX 4090") == 0 && w.latency_ms.lo == 10 &&
          w.latency_ms.hi == 80, "the example file reads (%s)", err);
    static const char *const bad[][2] = {
        {"speed", "3"}, {"gpus", "17:1"}, {"gpus", "2"}, {"models", "B200:1"}, {"interruptible", "1.5"},
        {"tenants", "a.b:1"}, {"name", "has space"}, {"latency_ms", "80-10"}, {"rate", "0"},
        {"nodes", "9:1"}, {"priority", "100:0"}, {"load", "50-120"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        T_OKM(workload_set(&w, bad[i][0], bad[i][1], err, sizeof(err)) == GP_EINVAL && err[0],
              "%s=%s refused: %s", bad[i][0], bad[i][1], err);
    }
    T_EQ_INT(workload_set(&w, "tenants", "3", err, sizeof(err)), GP_EOK);
    T_OK(w.tenants.n == 3 && strcmp(w.tenants.c[2].name, "cust-03") == 0);
    fd = mkstemp(path);
    f = fdopen(fd, "w");
    fprintf(f, "# comment\n\nseed = 9   # trailing\njobs=10\nnot a line\n");
    fclose(f);
    T_EQ_INT(workload_load(path, &w, err, sizeof(err)), GP_EINVAL);
    T_OKM(strstr(err, "line 5") != NULL, "a bad line is named: %s", err);
    T_OK(w.seed == 9 && w.jobs == 10);
    unlink(path);
}

static void
test_determinism(const fleet *f)
{
    workload a, b, c;
    fleet    f2;
    bool     same = true, differ = false, order = true;
    wl_job   j;

    workload_defaults(&a);
    workload_defaults(&b);
    workload_defaults(&c);
    a.seed = b.seed = 77;
    c.seed = 78;
    fleet_build(&f2, f->nsites, f->seed);
    for (unsigned i = 0; i < 500; i++) {
        same = same && same_job(&a, f, &b, &f2, i);
        differ = differ || !same_job(&a, f, &c, f, i);
    }
    T_OKM(same, "the same seed and fleet give the same 500 job specs and tenants");
    T_OKM(differ, "another seed gives other jobs");
    b.jobs = 5;                        /* a shorter or restarted stream: job i is job i */
    b.rate = 1000;
    for (int i = 499; i >= 0 && order; i -= 7)
        order = same_job(&a, f, &b, f, (unsigned)i);
    T_OKM(order, "job i depends on (seed, fleet, i) only, not on the stream's length or rate");
    workload_job(&a, f, 123, &j);
    T_OKM(strcmp(j.spec.client_request_id, "wl-77-123") == 0 && gp_id_ok(j.spec.client_request_id),
          "client_request_id %s = <name>-<seed>-<index>", j.spec.client_request_id);
    fleet_free(&f2);
}

static bool
near_share(int count, double want, double tol)
{
    return fabs((double)count / N - want) <= tol;
}

static void
test_mix_and_codec(const fleet *f)
{
    workload    w;
    char        err[256] = "";
    int         g[9] = {0}, multi = 0, any = 0, h100 = 0, origin = 0, bound = 0, intr = 0,
                forever = 0, fail = 0, price = 0, prio100 = 0, ckpt = 0, ten[4] = {0};
    int         roundtrip = 0, parses = 0, latency_ok = 0, forever_ok = 0;
    gp_buf      b;

    workload_defaults(&w);
    workload_load("deploy/workload-example.conf", &w, err, sizeof(err));
    for (unsigned i = 0; i < N; i++) {
        wl_job            j;
        msg_job_spec      back;
        const msg_job_spec *s = &j.spec;
        simjob_spec       sj;
        char              d[256];

        workload_job(&w, f, i, &j);
        if (s->gpus_per_node >= 1 && s->gpus_per_node <= 8)
            g[s->gpus_per_node]++;
        multi += s->nodes > 1;
        any += s->gpu_models.n == 0;
        h100 += s->gpu_models.n == 1 && strcmp(((const char (*)[32])s->gpu_models.v)[0], "H100") == 0;
        origin += GP_HAS(s, MSG_JOB_SPEC__ORIGIN_LAT) != 0;
        bound += s->max_latency_ms > 0;
        latency_ok += s->max_latency_ms == 0 ||
                      (GP_HAS(s, MSG_JOB_SPEC__ORIGIN_LAT) && s->max_latency_ms >= 10 &&
                       s->max_latency_ms <= 80);
        intr += s->interruptible;
        forever += strstr(s->command, "run=") == NULL;
        forever_ok += (strstr(s->command, "run=") == NULL) == (s->max_run_s > 0);
        fail += strstr(s->command, "fail_after=") != NULL;
        price += s->max_price_micros_per_gpu_hour > 0 && strcmp(s->currency, "EUR") == 0;
        prio100 += s->priority == 100;
        ckpt += s->checkpoint_interval_s > 0;
        for (int t = 0; t < 4; t++)
            ten[t] += strcmp(j.tenant, w.tenants.c[t].name) == 0;
        memset(&back, 0, sizeof(back));
        if (encode(s, &b) && gp_msg_decode(&msg_job_spec_desc, b.p, b.n, &back, NULL, 0) == GP_EOK &&
            gp_msg_equal(&msg_job_spec_desc, s, &back))
            roundtrip++;
        gp_msg_clear(&msg_job_spec_desc, &back);
        gp_buf_fini(&b);
        parses += simjob_parse(s->command, &sj, d, sizeof(d)) == GP_EOK;
    }
    T_OKM(roundtrip == N, "every spec survives encode/decode unchanged (%d/%d)", roundtrip, N);
    T_OKM(parses == N, "every command is a sim: command the agent accepts (%d/%d)", parses, N);
    T_OKM(near_share(g[1], 0.40, 0.03) && near_share(g[2], 0.30, 0.03) &&
          near_share(g[4], 0.20, 0.03) && near_share(g[8], 0.10, 0.02),
          "gpus_per_node 1/2/4/8: %d %d %d %d (40/30/20/10 %%)", g[1], g[2], g[4], g[8]);
    T_OKM(near_share(multi, 0.04, 0.015), "multi-node jobs are rare: %d (4 %%)", multi);
    T_OKM(near_share(any, 0.40, 0.03) && near_share(h100, 0.05, 0.015),
          "models: any %d (40 %%), H100 %d (5 %%)", any, h100);
    T_OKM(near_share(origin, 0.70, 0.03) && near_share(bound, 0.56, 0.03),
          "origins %d (70 %%), latency bounds %d (56 %%)", origin, bound);
    T_OKM(latency_ok == N, "a latency bound always has an origin and is in 10-80 ms");
    T_OKM(near_share(intr, 0.50, 0.03) && near_share(ckpt, 0.30, 0.03),
          "interruptible %d (50 %%), checkpointing %d (30 %%)", intr, ckpt);
    T_OKM(near_share(forever, 0.05, 0.015) && forever_ok == N,
          "until cancelled (no run=, max_run_s set): %d (5 %%)", forever);
    T_OKM(near_share(fail, 0.095, 0.02), "failing: %d (9.5 %%)", fail);
    T_OKM(near_share(price, 0.20, 0.03), "with max_price: %d (20 %%)", price);
    T_OKM(near_share(prio100, 0.60, 0.03), "priority 100: %d (60 %%)", prio100);
    T_OKM(near_share(ten[0], 5 / 11.0, 0.03) && near_share(ten[3], 1 / 11.0, 0.02),
          "tenants by weight: acme %d (45 %%), umbrella %d (9 %%)", ten[0], ten[3]);
}

int
main(void)
{
    fleet f;

    T_EQ_INT(fleet_build(&f, 50, 7), 0);
    test_file();
    test_determinism(&f);
    test_mix_and_codec(&f);
    fleet_free(&f);
    return T_DONE();
}
