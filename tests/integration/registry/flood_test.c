/* flood_test.c -- one heartbeat flood cannot starve the rest (issue 6
 * item 7).  gridpool-registry against real NATS, Redis and PostgreSQL:
 *   1. measure what the registry absorbs: heartbeats sent as fast as a
 *      raw cnats publisher can for 2 s, rate = its hb route's calls / 2 s;
 *   2. flood at twice that rate for 6 s while admin (gp.admin.site.get)
 *      and register requests are sent one after the other, each with the
 *      route's 5 s deadline: every one must be answered OK (none TIMEOUT
 *      or UNAVAIL), and the registry must really have been overloaded
 *      (heartbeats dropped at the bus's bulk lane or shed).
 * Before the bus had lanes, the flood filled the one inbox and requests
 * were dropped with the heartbeats (TIMEOUT). */
/* test-tags: alone (tests/run.sh) */
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>

#include "gp/call.h"
#include "msg_gen.h"
#include "test_stack.h"

#define NODES     50
#define CAL_S     2.0
#define FLOOD_S   6.0
#define DEADLINE  5000

static struct ev_loop *loop;
static gp_bus         *bus;
static int             http_port;

static natsConnection *pubnc;
static char            subj[NODES][64];
static gp_buf          beat[NODES];
static _Atomic long    rate;          /* beats per second; 0 = as fast as possible */
static atomic_bool     stop_pub, pause_pub;
static _Atomic long    sent;

static void *
publisher(void *arg)
{
    double t0 = tl_now();
    long   mine = 0;
    int    i = 0;

    (void)arg;
    while (!atomic_load(&stop_pub)) {
        long r = atomic_load(&rate);

        if (atomic_load(&pause_pub)) {
            usleep(1000);
            t0 = tl_now();
            mine = 0;
            continue;
        }
        if (r > 0 && mine >= (long)((tl_now() - t0) * (double)r)) {
            usleep(200);
            continue;
        }
        natsConnection_Publish(pubnc, subj[i], beat[i].p, (int)beat[i].n);
        atomic_fetch_add(&sent, 1);
        mine++;
        i = (i + 1) % NODES;
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

static double
hb_calls(void)
{
    return metric("gp_requests_total{route=\"gp.node.*.*.hb\"}");
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
    snprintf(q.agent_version, sizeof(q.agent_version), "flood");
    snprintf(g.uuid, sizeof(g.uuid), "GPU-flood-%d", i);
    snprintf(g.model, sizeof(g.model), "L4");
    q.gpus.v = &g;
    q.gpus.n = 1;
    snprintf(s, sizeof(s), "gp.node.s1.n%d.register", i);
    rc = call(s, &msg_node_register_desc, &q, &msg_node_registered_desc, &r, d);
    gp_msg_clear(&msg_node_registered_desc, &r);
    return rc;
}

static gp_err
site_get(void)
{
    msg_id_request q = {0};
    msg_site       out = {0};
    char           d[GP_ERRBUF_LEN];
    gp_err         rc;

    snprintf(q.id, sizeof(q.id), "s1");
    rc = call("gp.admin.site.get", &msg_id_request_desc, &q, &msg_site_desc, &out, d);
    gp_msg_clear(&msg_site_desc, &out);
    return rc;
}

static void
setup(void)
{
    char       d[GP_ERRBUF_LEN] = "";
    msg_tenant t = {0}, tout = {0};
    msg_site   s = {0}, sout = {0};
    gp_err     rc;
    int        ok = 0;

    snprintf(t.id, sizeof(t.id), "op");
    t.kind = MSG_TENANT_KIND_OPERATOR;
    rc = call("gp.admin.tenant.create", &msg_tenant_desc, &t, &msg_tenant_desc, &tout, d);
    T_OKM(rc == GP_EOK, "tenant created (%s %s)", gp_err_name(rc), d);
    gp_msg_clear(&msg_tenant_desc, &tout);
    snprintf(s.id, sizeof(s.id), "s1");
    snprintf(s.tenant, sizeof(s.tenant), "op");
    snprintf(s.region, sizeof(s.region), "eu-west");
    rc = call("gp.admin.site.create", &msg_site_desc, &s, &msg_site_desc, &sout, d);
    T_OKM(rc == GP_EOK, "site created (%s %s)", gp_err_name(rc), d);
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

int
main(void)
{
    char        port[16], bin[512];
    const char *argv[] = {bin, "--http-port", port, "--log-level", "error", NULL};
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "flood-test"};
    pthread_t   th;
    pid_t       pid;
    double      h0, h1, t0, absorbed, drop0, shed0, drop1, shed1, worst = 0;
    int         n = 0, bad = 0, codes[GP_ERR_COUNT] = {0};
    long        sent0;

    loop = ev_loop_new(EVFLAG_AUTO);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    http_port = tl_free_port();
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-registry", tl_env("GP_BUILD"));
    snprintf(port, sizeof(port), "%d", http_port);
    pid = tl_spawn((char *const *)argv);
    for (t0 = tl_now(); tl_now() - t0 < 30 && site_get() == GP_ENOROUTE;)
        usleep(200000);
    usleep(500000);                               /* Redis and PostgreSQL connected */
    setup();
    T_OK(natsConnection_ConnectTo(&pubnc, tl_env("GP_NATS_URL")) == NATS_OK);

    /* 1. What the registry absorbs, flooded as hard as we can. */
    atomic_store(&rate, 0);
    pthread_create(&th, NULL, publisher, NULL);
    usleep(300000);
    h0 = hb_calls();
    t0 = tl_now();
    usleep((useconds_t)(CAL_S * 1e6));
    h1 = hb_calls();
    absorbed = (h1 - h0) / (tl_now() - t0);
    atomic_store(&pause_pub, true);
    printf("# the registry absorbs %.0f heartbeats/s (sent %ld so far)\n", absorbed,
           atomic_load(&sent));
    T_OKM(absorbed > 100, "registry absorbs heartbeats (%.0f/s)", absorbed);
    usleep(3000000);                              /* let the backlog drain */

    /* 2. Twice that, with requests answered meanwhile. */
    drop0 = metric("gp_bus_dropped_total");
    shed0 = metric("gp_registry_heartbeats_shed_total");
    sent0 = atomic_load(&sent);
    atomic_store(&rate, (long)(2 * absorbed));
    atomic_store(&pause_pub, false);
    usleep(500000);                               /* the flood is on */
    /* At least FLOOD_S seconds and at least 8 requests: on a loaded CI
     * machine a request may take a second or more, and the flood stays on
     * until the eighth is answered. */
    for (t0 = tl_now(); tl_now() - t0 < FLOOD_S || n < 8; n++) {
        double t1 = tl_now(), took;
        gp_err rc = n % 2 ? site_get() : register_node(n % NODES);

        took = tl_now() - t1;
        if (took > worst)
            worst = took;
        if (rc != GP_EOK) {
            bad++;
            if ((int)rc >= 0 && (int)rc < GP_ERR_COUNT)
                codes[rc]++;
            printf("# request %d: %s after %.3f s\n", n, gp_err_name(rc), took);
        }
        usleep(50000);
    }
    drop1 = metric("gp_bus_dropped_total");
    shed1 = metric("gp_registry_heartbeats_shed_total");
    atomic_store(&stop_pub, true);
    pthread_join(th, NULL);
    printf("# flood at %.0f/s: sent %ld beats, dropped %.0f at the bus, shed %.0f; %d requests, "
           "slowest %.3f s\n", 2 * absorbed, atomic_load(&sent) - sent0, drop1 - drop0,
           shed1 - shed0, n, worst);
    /* Under ASan the publisher is as slow as the registry and may not
     * overload it; the property below (requests answered) is still
     * checked, the overload itself only in the normal build. */
    if (strstr(tl_env("GP_BUILD"), "san") != NULL && drop1 - drop0 + shed1 - shed0 <= 0)
        printf("ok %d - # SKIP sanitizer build: the publisher could not overload the registry\n",
               ++t_run);
    else
        T_OKM(drop1 - drop0 + shed1 - shed0 > 0,
              "the registry was overloaded: %.0f beats dropped or shed", drop1 - drop0 + shed1 - shed0);
    T_OKM(n >= 8, "%d requests sent during the flood", n);
    T_OKM(bad == 0, "every admin and register request answered OK during the flood "
          "(%d of %d failed; TIMEOUT %d, UNAVAIL %d)", bad, n, codes[GP_ETIMEOUT],
          codes[GP_EUNAVAIL]);
    T_OKM(worst < DEADLINE / 1000.0, "slowest request %.3f s, within the %d ms deadline", worst,
          DEADLINE);

    natsConnection_Destroy(pubnc);
    kill(pid, SIGTERM);
    T_OKM(tl_wait_exit(pid, 15) == 0, "registry exited 0 on SIGTERM");
    for (int i = 0; i < NODES; i++)
        gp_buf_fini(&beat[i]);
    gp_bus_free(bus);
    ev_loop_destroy(loop);
    gp_lib_close();
    return T_DONE();
}
