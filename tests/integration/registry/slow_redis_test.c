/* slow_redis_test.c -- the registry keeps recording at what a slowed Redis
 * can take and recovers when it is fast again (issue 30, part 3).
 * gridpool-registry against real NATS, Redis and PostgreSQL, NODES nodes
 * registered, each beating once a second (1 s interval, so the detector's
 * deadlines are a few seconds), the window to Redis made small
 * (--hb-window 8) so that it fills:
 *   1. steady: every beat recorded, nothing waiting;
 *   2. Redis slowed to about a quarter of its time for SLOW_S (SIGSTOP
 *      300 ms, SIGCONT 100 ms, over and over: each stop well under the
 *      command timeout): beats wait, one per node (the gauge
 *      gp_registry_heartbeats_waiting is seen above 0), none fails, a
 *      registration meanwhile is answered OK, and no node is reported lost
 *      (NodeState events);
 *   3. Redis at full speed again: within 10 s nothing waits and the beats
 *      recorded over 3 s are at least 90% of those sent. */
/* test-tags: pass=normal (tests/run.sh) */
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>

#include "gp/call.h"
#include "msg_gen.h"
#include "test_stack.h"

#define NODES    200
#define SLOW_S   8.0
#define DEADLINE 5000

static struct ev_loop *loop;
static gp_bus         *bus;
static int             http_port;
static natsConnection *pubnc;
static char            subj[NODES][64];
static gp_buf          beat[NODES];
static atomic_bool     stop_pub;
static _Atomic long    sent;
static int             lost, suspect;

/* Each node once a second, spread over the second. */
static void *
publisher(void *arg)
{
    double t0 = tl_now();
    long   mine = 0;

    (void)arg;
    while (!atomic_load(&stop_pub)) {
        if (mine >= (long)((tl_now() - t0) * NODES)) {
            usleep(1000);
            continue;
        }
        natsConnection_Publish(pubnc, subj[mine % NODES], beat[mine % NODES].p,
                               (int)beat[mine % NODES].n);
        atomic_fetch_add(&sent, 1);
        mine++;
    }
    natsConnection_FlushTimeout(pubnc, 5000);
    return NULL;
}

static double
metric(const char *series)
{
    char  *body = NULL;
    double v = -1;

    if (tl_http_get(http_port, "/metrics", &body) > 0)
        v = tl_metric(body, series);
    free(body);
    return v;
}

static gp_err
call(const char *s, const gp_msg_desc *ind, const void *in, const gp_msg_desc *outd, void *out,
     char *detail)
{
    return gp_call_wait(loop, bus, s, ind, in, outd, out, DEADLINE, detail, GP_ERRBUF_LEN, NULL);
}

static gp_err
register_node(int i)
{
    msg_node_register   q = {0};
    msg_node_registered r = {0};
    msg_gpu             g = {.index = 0, .vram_mb = 24576};
    char                s[GP_MAX_SUBJECT + 1], d[GP_ERRBUF_LEN];
    gp_err              rc;

    snprintf(q.site, sizeof(q.site), "s1");
    snprintf(q.node, sizeof(q.node), "n%d", i);
    snprintf(q.agent_version, sizeof(q.agent_version), "slow");
    snprintf(g.uuid, sizeof(g.uuid), "GPU-slow-%d", i);
    snprintf(g.model, sizeof(g.model), "L4");
    q.gpus.v = &g;
    q.gpus.n = 1;
    snprintf(s, sizeof(s), "gp.node.s1.n%d.register", i);
    rc = call(s, &msg_node_register_desc, &q, &msg_node_registered_desc, &r, d);
    if (rc != GP_EOK)
        printf("# register n%d: %s %s\n", i, gp_err_name(rc), d);
    gp_msg_clear(&msg_node_registered_desc, &r);
    return rc;
}

static void
on_state(void *arg, const gp_bus_msg *m)
{
    msg_node_state st = {0};

    (void)arg;
    if (gp_msg_decode(&msg_node_state_desc, m->data, m->len, &st, NULL, 0) != GP_EOK)
        return;
    lost += st.state == MSG_NODE_STATE_STATE_LOST;
    suspect += st.state == MSG_NODE_STATE_STATE_SUSPECT;
    if (st.state == MSG_NODE_STATE_STATE_LOST || st.state == MSG_NODE_STATE_STATE_SUSPECT)
        printf("# %s %s: %s\n", st.node, st.state == MSG_NODE_STATE_STATE_LOST ? "lost" : "suspect",
               st.reason);
}

static void
setup(void)
{
    char       d[GP_ERRBUF_LEN] = "";
    msg_tenant t = {0}, tout = {0};
    msg_site   s = {0}, sout = {0};
    int        ok = 0;

    snprintf(t.id, sizeof(t.id), "op");
    t.kind = MSG_TENANT_KIND_OPERATOR;
    T_OK(call("gp.admin.tenant.create", &msg_tenant_desc, &t, &msg_tenant_desc, &tout, d) ==
         GP_EOK);
    gp_msg_clear(&msg_tenant_desc, &tout);
    snprintf(s.id, sizeof(s.id), "s1");
    snprintf(s.tenant, sizeof(s.tenant), "op");
    snprintf(s.region, sizeof(s.region), "eu-west");
    T_OK(call("gp.admin.site.create", &msg_site_desc, &s, &msg_site_desc, &sout, d) == GP_EOK);
    gp_msg_clear(&msg_site_desc, &sout);
    for (int i = 0; i < NODES; i++)
        ok += register_node(i) == GP_EOK;
    T_EQ_INT(ok, NODES);
    for (int i = 0; i < NODES; i++) {
        msg_heartbeat hb = {0};

        snprintf(hb.site, sizeof(hb.site), "s1");
        snprintf(hb.node, sizeof(hb.node), "n%d", i);
        hb.seq = 1;
        hb.sent_ms = (uint64_t)time(NULL) * 1000;
        hb.uplink_rtt_ms = 10;
        snprintf(subj[i], sizeof(subj[i]), "gp.node.s1.n%d.hb", i);
        gp_buf_init(&beat[i], 0);
        gp_msg_encode(&msg_heartbeat_desc, &hb, &beat[i]);
    }
}

/* Beats recorded (Redis ran the script) and sent over s seconds. */
static void
rates(double s, double *recorded, double *sent_n)
{
    double h0 = metric("gp_registry_heartbeats_total");
    long   s0 = atomic_load(&sent);

    tl_spin(loop, s);
    *recorded = metric("gp_registry_heartbeats_total") - h0;
    *sent_n = (double)(atomic_load(&sent) - s0);
}

int
main(void)
{
    char        port[16], bin[512], pidf[600];
    const char *argv[] = {bin, "--http-port", port, "--log-level", "warn", "--heartbeat-ms",
                          "1000", "--hb-window", "8", NULL};
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "slow-redis-test"};
    gp_bus_sub *sub;
    pthread_t   th;
    pid_t       pid, redis = 0;
    double      t0, rec, snt, bad0, bad1, waiting_max = 0, drained = -1;
    gp_err      reg_rc;
    FILE       *f;

    loop = ev_loop_new(EVFLAG_AUTO);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    gp_bus_sub_new(bus, "gp.node.*.*.state", NULL, on_state, NULL, &sub);
    snprintf(pidf, sizeof(pidf), "%s/redis.pid", tl_env("GP_STACK_DIR"));
    if ((f = fopen(pidf, "r")) != NULL) {
        if (fscanf(f, "%d", &redis) != 1)
            redis = 0;
        fclose(f);
    }
    T_OKM(redis > 0, "redis-server's pid (%d)", (int)redis);
    http_port = tl_free_port();
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-registry", tl_env("GP_BUILD"));
    snprintf(port, sizeof(port), "%d", http_port);
    pid = tl_spawn((char *const *)argv);
    for (t0 = tl_now(); tl_now() - t0 < 30 && metric("gp_registry_heartbeats_total") < 0;)
        usleep(200000);
    usleep(500000);
    setup();
    T_OK(natsConnection_ConnectTo(&pubnc, tl_env("GP_NATS_URL")) == NATS_OK);
    pthread_create(&th, NULL, publisher, NULL);
    tl_spin(loop, 3.0);

    /* 1. steady */
    rates(3.0, &rec, &snt);
    T_OKM(rec >= 0.9 * snt && snt > 0, "steady: %.0f of %.0f beats recorded in 3 s", rec, snt);

    /* 2. Redis at a quarter of its time */
    bad0 = metric("gp_registry_heartbeat_write_failures_total");
    lost = suspect = 0;
    reg_rc = GP_EOK;
    for (t0 = tl_now(); tl_now() - t0 < SLOW_S;) {
        double w;

        kill(redis, SIGSTOP);
        tl_spin(loop, 0.25);
        /* read while Redis is stopped: once it runs again the queue drains
         * within milliseconds */
        if ((w = metric("gp_registry_heartbeats_waiting")) > waiting_max)
            waiting_max = w;
        tl_spin(loop, 0.05);
        kill(redis, SIGCONT);
        tl_spin(loop, 0.1);
        if (tl_now() - t0 > SLOW_S / 2 && reg_rc == GP_EOK && waiting_max > 0) {
            double t1 = tl_now();

            kill(redis, SIGSTOP);              /* the registration lands in a stop */
            tl_spin(loop, 0.1);
            kill(redis, SIGCONT);
            reg_rc = register_node(NODES + 1);
            printf("# a registration during the slowdown: %s in %.2f s\n", gp_err_name(reg_rc),
                   tl_now() - t1);
            reg_rc = reg_rc == GP_EOK ? GP_EEXISTS : reg_rc;   /* once */
        }
    }
    kill(redis, SIGCONT);
    bad1 = metric("gp_registry_heartbeat_write_failures_total");
    T_OKM(waiting_max > 0, "slowed: beats waited for the window (up to %.0f nodes' at once)",
          waiting_max);
    T_OKM(bad1 - bad0 == 0, "no beat failed (%.0f write failures)", bad1 - bad0);
    T_OKM(reg_rc == GP_EEXISTS, "a registration meanwhile was answered OK");
    T_OKM(lost == 0, "no node reported lost (%d lost, %d suspect)", lost, suspect);

    /* 3. full speed again */
    for (t0 = tl_now(); tl_now() - t0 < 10;) {
        tl_spin(loop, 0.2);
        if (metric("gp_registry_heartbeats_waiting") == 0) {
            drained = tl_now() - t0;
            break;
        }
    }
    T_OKM(drained >= 0, "nothing waits %.1f s after Redis is fast again", drained);
    rates(3.0, &rec, &snt);
    T_OKM(rec >= 0.9 * snt && snt > 0, "full speed: %.0f of %.0f beats recorded in 3 s", rec,
          snt);
    T_OKM(lost == 0, "still no node lost (%d)", lost);

    atomic_store(&stop_pub, true);
    pthread_join(th, NULL);
    natsConnection_Destroy(pubnc);
    kill(pid, SIGTERM);
    T_OKM(tl_wait_exit(pid, 15) == 0, "registry exited 0 on SIGTERM");
    for (int i = 0; i < NODES; i++)
        gp_buf_fini(&beat[i]);
    gp_bus_sub_free(sub);
    gp_bus_free(bus);
    ev_loop_destroy(loop);
    gp_lib_close();
    return T_DONE();
}
