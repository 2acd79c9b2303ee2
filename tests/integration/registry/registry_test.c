/* registry_test.c -- gridpool-registry against real NATS, Redis and
 * PostgreSQL: admin requests with typed errors, node registration and
 * refusals, heartbeats into the live view, bad heartbeats counted and
 * dropped, stale after missed beats and healthy again, Redis FLUSHALL
 * healed by the next beats, pool capacity; state writes of two instances
 * landing out of order keep the newer state; a graceful stop writes the
 * queued state changes before exit. */
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <msgpack.h>
#include <stdarg.h>

#include "msg_gen.h"
#include "test_stack.h"
#include "../../../services/registry/scripts.h"

#define HB_MS 400
/* The live-view key of a node of site s1 (the registry's layout). */
static const char *
NODE_KEY(const char *id)
{
    static char key[4][REGISTRY_KEY_LEN];
    static int  k;

    k = (k + 1) % 4;
    registry_node_key(key[k], registry_shard("s1"), id);
    return key[k];
}

static struct ev_loop *loop;
static gp_bus         *bus;
static int             http_port;
static int             beating;
static int             stale_events, healthy_events, q1_stale;
static int             stale_p_events;       /* of p1..p4 */
static const char     *beating_q;     /* one more node that beats, or NULL */
static const char     *sick_node;     /* its beats carry sick_xid / sick_dbe / sick_lost */
static int             sick_xid, sick_lost;
static uint64_t        sick_dbe;
static uint64_t        hb_seq;

static gp_err
call(const char *subj, const gp_msg_desc *ind, const void *in, const gp_msg_desc *outd, void *out,
     char *detail)
{
    return tl_call(loop, bus, subj, ind, in, outd, out, 5000, detail, GP_ERRBUF_LEN);
}

static void
expect(const char *what, gp_err got, gp_err want, const char *detail)
{
    T_OKM(got == want, "%s -> %s (got %s: %s)", what, gp_err_name(want), gp_err_name(got), detail);
}

static pid_t
start_registry_at(int http)
{
    char        port[16], hb[16], bin[512];
    const char *argv[] = {bin, "--http-port", port, "--heartbeat-ms", hb, "--detect-floor-ms", "1200", "--lost-ms", "1200",
                          "--sweep-ms", "100", "--history-trim-ms", "300", NULL};

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-registry", tl_env("GP_BUILD"));
    snprintf(port, sizeof(port), "%d", http);
    snprintf(hb, sizeof(hb), "%d", HB_MS);
    return tl_spawn((char *const *)argv);
}

static pid_t
start_registry(void)
{
    return start_registry_at(http_port);
}

static void
on_state(void *arg, const gp_bus_msg *m)
{
    msg_node_state ev = {0};

    (void)arg;
    if (gp_msg_decode(&msg_node_state_desc, m->data, m->len, &ev, NULL, 0) != GP_EOK)
        return;
    stale_events += ev.state == MSG_NODE_STATE_STATE_LOST;
    stale_p_events += ev.state == MSG_NODE_STATE_STATE_LOST && ev.node[0] == 'p' &&
                      ev.node[1] >= '1' && ev.node[1] <= '4' && ev.node[2] == '\0';
    q1_stale += ev.state == MSG_NODE_STATE_STATE_LOST && strcmp(ev.node, "q1") == 0;
    healthy_events += ev.state == MSG_NODE_STATE_STATE_HEALTHY;
}

/* The last SiteChange and NodeChange seen (gp.int.inventory.>). */
static struct inv_seen {
    int      n;
    char     change[16], id[64];
    uint64_t rev;
    uint32_t gpus;
    char     region[64];
} site_seen, node_seen;

static void
on_inventory(void *arg, const gp_bus_msg *m)
{
    msg_site_change sc = {0};
    msg_node_change nc = {0};

    (void)arg;
    if (strncmp(m->subject, "gp.int.inventory.site.", 22) == 0 &&
        gp_msg_decode(&msg_site_change_desc, m->data, m->len, &sc, NULL, 0) == GP_EOK) {
        site_seen.n++;
        snprintf(site_seen.change, sizeof(site_seen.change), "%s",
                 msg_site_change_change_names[sc.change]);
        snprintf(site_seen.id, sizeof(site_seen.id), "%s", sc.id);
        snprintf(site_seen.region, sizeof(site_seen.region), "%s", sc.site.region);
        site_seen.rev = sc.rev;
    } else if (gp_msg_decode(&msg_node_change_desc, m->data, m->len, &nc, NULL, 0) == GP_EOK) {
        node_seen.n++;
        snprintf(node_seen.change, sizeof(node_seen.change), "%s",
                 msg_node_change_change_names[nc.change]);
        snprintf(node_seen.id, sizeof(node_seen.id), "%s", nc.id);
        snprintf(node_seen.region, sizeof(node_seen.region), "%s", nc.node.region);
        node_seen.rev = nc.rev;
        node_seen.gpus = nc.node.gpus.n;
    }
    gp_msg_clear(&msg_site_change_desc, &sc);
    gp_msg_clear(&msg_node_change_desc, &nc);
}

/* Waits (up to 2 s) for the count of events seen to pass n. */
static void
inv_wait(const struct inv_seen *w, int n)
{
    for (int i = 0; i < 40 && w->n <= n; i++)
        tl_run_until(loop, &(int){0}, 0.05);
}

static void
send_beat(const char *node)
{
    msg_heartbeat     hb = {0};
    msg_gpu_telemetry g[2] = {{0}};
    gp_buf            b;
    char              subj[128];

    snprintf(hb.site, sizeof(hb.site), "s1");
    snprintf(hb.node, sizeof(hb.node), "%s", node);
    hb.seq = ++hb_seq;
    hb.sent_ms = (uint64_t)time(NULL) * 1000;
    hb.uplink_rtt_ms = 12.5;
    for (int i = 0; i < 2; i++) {
        g[i].index = i;
        g[i].temp_c = 60 + i;
        g[i].power_w = 250;
        g[i].util_pct = 90;
    }
    if (sick_node != NULL && strcmp(node, sick_node) == 0) {
        static int32_t x[1];

        x[0] = sick_xid;
        g[1].xids = (gp_arr){.v = x, .n = sick_xid ? 1 : 0};
        g[1].ecc_dbe = sick_dbe;
        g[1].state = sick_lost ? MSG_GPU_TELEMETRY_STATE_LOST : MSG_GPU_TELEMETRY_STATE_OK;
        GP_SET_HAS(&g[1], MSG_GPU_TELEMETRY__STATE);
        GP_SET_HAS(&g[1], MSG_GPU_TELEMETRY__ECC_DBE);
        GP_SET_HAS(&g[1], MSG_GPU_TELEMETRY__XIDS);
    }
    hb.gpus.v = g;
    hb.gpus.n = 2;
    gp_buf_init(&b, 0);
    gp_msg_encode(&msg_heartbeat_desc, &hb, &b);
    snprintf(subj, sizeof(subj), "gp.node.s1.%s.hb", node);
    gp_bus_pub(bus, subj, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

/* Extra nodes p1..p4 beat while their bit in beating_p is set. */
static unsigned beating_p;

static void
beat(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l;
    (void)w;
    (void)revents;
    if (beating)
        send_beat("n1");
    if (beating_q != NULL)
        send_beat(beating_q);
    for (int i = 0; i < 4; i++) {
        char node[16];

        snprintf(node, sizeof(node), "p%d", i + 1);
        if (beating_p & (1u << i))
            send_beat(node);
    }
}

static void
wait_s(double s)
{
    int never = 0;

    tl_run_until(loop, &never, s);
}

static void
test_admin(void)
{
    char        d[GP_ERRBUF_LEN] = "";
    msg_tenant  t = {0}, tout = {0};
    msg_site    s = {0}, sout = {0};
    msg_pool    p = {0}, pout = {0};
    msg_product pr = {0}, prout = {0};
    msg_power_price pp[2] = {{.start_min = 0, .price_micros_per_kwh = 180000},
                             {.start_min = 420, .price_micros_per_kwh = 250000}};
    msg_id_request  id = {0};
    gp_err      rc;

    snprintf(t.id, sizeof(t.id), "op");
    t.kind = MSG_TENANT_KIND_OPERATOR;
    expect("create tenant", call("gp.admin.tenant.create", &msg_tenant_desc, &t, &msg_tenant_desc, &tout, d), GP_EOK, d);
    gp_msg_clear(&msg_tenant_desc, &tout);
    expect("create the same tenant", call("gp.admin.tenant.create", &msg_tenant_desc, &t, &msg_tenant_desc, &tout, d), GP_EEXISTS, d);
    T_OKM(strstr(d, "already exists") != NULL, "duplicate detail names it: %s", d);

    snprintf(s.id, sizeof(s.id), "s1");
    snprintf(s.tenant, sizeof(s.tenant), "op");
    snprintf(s.region, sizeof(s.region), "eu-west");
    s.lat = 48.1;
    s.lon = 11.5;
    s.pue_milli = 1200;
    GP_SET_HAS(&s, MSG_SITE__PUE_MILLI);
    s.power_prices.v = pp;
    s.power_prices.n = 2;
    rc = call("gp.admin.site.create", &msg_site_desc, &s, &msg_site_desc, &sout, d);
    expect("create site", rc, GP_EOK, d);
    T_OK(sout.power_prices.n == 2 && ((msg_power_price *)sout.power_prices.v)[1].price_micros_per_kwh == 250000);
    T_OK(sout.pue_milli == 1200 && sout.lat > 48 && strcmp(sout.currency, "EUR") == 0);
    inv_wait(&site_seen, 0);
    T_OKM(site_seen.n == 1 && strcmp(site_seen.change, "created") == 0 &&
          strcmp(site_seen.id, "s1") == 0 && strcmp(site_seen.region, "eu-west") == 0 &&
          sout.rev > 0 && site_seen.rev == sout.rev,
          "SiteChange created s1 (eu-west) at the row's revision (%d seen, %s %s rev %llu, "
          "the row's %llu)", site_seen.n, site_seen.change, site_seen.id,
          (unsigned long long)site_seen.rev, (unsigned long long)sout.rev);
    gp_msg_clear(&msg_site_desc, &sout);

    snprintf(s.id, sizeof(s.id), "s2");
    snprintf(s.tenant, sizeof(s.tenant), "nobody");
    expect("site of an unknown tenant", call("gp.admin.site.create", &msg_site_desc, &s, &msg_site_desc, &sout, d), GP_ENOTFOUND, d);
    T_OKM(strstr(d, "tenant") != NULL, "detail names the tenant: %s", d);
    snprintf(s.id, sizeof(s.id), "bad.id");
    snprintf(s.tenant, sizeof(s.tenant), "op");
    expect("site id with a dot", call("gp.admin.site.create", &msg_site_desc, &s, &msg_site_desc, &sout, d), GP_EINVAL, d);
    snprintf(s.id, sizeof(s.id), "s3");
    pp[0].start_min = 60;
    expect("power prices not starting at 0", call("gp.admin.site.create", &msg_site_desc, &s, &msg_site_desc, &sout, d), GP_EINVAL, d);
    s.power_prices.n = 0;

    snprintf(p.id, sizeof(p.id), "edge");
    snprintf(p.tenant, sizeof(p.tenant), "op");
    p.scope = MSG_POOL_SCOPE_SITE;
    snprintf(p.site, sizeof(p.site), "nosuchsite");
    expect("pool on an unknown site", call("gp.admin.pool.create", &msg_pool_desc, &p, &msg_pool_desc, &pout, d), GP_ENOTFOUND, d);
    p.site[0] = '\0';
    expect("site pool without a site", call("gp.admin.pool.create", &msg_pool_desc, &p, &msg_pool_desc, &pout, d), GP_EINVAL, d);
    p.scope = MSG_POOL_SCOPE_GLOBAL;
    expect("global pool", call("gp.admin.pool.create", &msg_pool_desc, &p, &msg_pool_desc, &pout, d), GP_EOK, d);
    gp_msg_clear(&msg_pool_desc, &pout);

    snprintf(pr.id, sizeof(pr.id), "l4-std");
    snprintf(pr.pool, sizeof(pr.pool), "edge");
    snprintf(pr.currency, sizeof(pr.currency), "EUR");
    pr.price_micros_per_gpu_hour = 450000;
    expect("product", call("gp.admin.product.create", &msg_product_desc, &pr, &msg_product_desc, &prout, d), GP_EOK, d);
    gp_msg_clear(&msg_product_desc, &prout);
    pr.price_micros_per_gpu_hour = -1;
    snprintf(pr.id, sizeof(pr.id), "neg");
    expect("negative price", call("gp.admin.product.create", &msg_product_desc, &pr, &msg_product_desc, &prout, d), GP_ERANGE, d);

    snprintf(id.id, sizeof(id.id), "s9");
    expect("get unknown site", call("gp.admin.site.get", &msg_id_request_desc, &id, &msg_site_desc, &sout, d), GP_ENOTFOUND, d);
    memset(&s, 0, sizeof(s));
    snprintf(s.id, sizeof(s.id), "s1");
    snprintf(s.notes, sizeof(s.notes), "key at the kiosk");
    GP_SET_HAS(&s, MSG_SITE__NOTES);
    {
        uint64_t created = site_seen.rev;
        int      seen = site_seen.n;

        expect("update site notes", call("gp.admin.site.update", &msg_site_desc, &s, &msg_site_desc, &sout, d), GP_EOK, d);
        T_OK(strcmp(sout.notes, "key at the kiosk") == 0 && strcmp(sout.region, "eu-west") == 0);
        inv_wait(&site_seen, seen);
        T_OKM(site_seen.n == seen + 1 && strcmp(site_seen.change, "updated") == 0 &&
              site_seen.rev == sout.rev && sout.rev > created,
              "SiteChange updated, its revision past the create's (%llu > %llu); refused writes "
              "published none", (unsigned long long)site_seen.rev, (unsigned long long)created);
        gp_msg_clear(&msg_site_desc, &sout);
    }
    {
        msg_site       tmp = {0};
        msg_deleted    del = {0};
        msg_id_request q = {0};
        uint64_t       made;
        int            seen = site_seen.n;

        snprintf(tmp.id, sizeof(tmp.id), "sdel");
        snprintf(tmp.tenant, sizeof(tmp.tenant), "op");
        snprintf(tmp.region, sizeof(tmp.region), "eu-west");
        snprintf(tmp.currency, sizeof(tmp.currency), "EUR");
        expect("create site sdel", call("gp.admin.site.create", &msg_site_desc, &tmp, &msg_site_desc, &sout, d), GP_EOK, d);
        made = sout.rev;
        gp_msg_clear(&msg_site_desc, &sout);
        inv_wait(&site_seen, seen);
        seen = site_seen.n;
        snprintf(q.id, sizeof(q.id), "sdel");
        expect("delete site sdel", call("gp.admin.site.delete", &msg_id_request_desc, &q, &msg_deleted_desc, &del, d), GP_EOK, d);
        inv_wait(&site_seen, seen);
        T_OKM(strcmp(site_seen.change, "deleted") == 0 && strcmp(site_seen.id, "sdel") == 0 &&
              site_seen.rev > made, "SiteChange deleted sdel, at a revision past its create's "
              "(%llu > %llu)", (unsigned long long)site_seen.rev, (unsigned long long)made);
    }
}

static void
test_register(void)
{
    char                d[GP_ERRBUF_LEN] = "";
    msg_node_register   q = {0};
    msg_node_registered r = {0};
    msg_gpu             g[2] = {{0}};
    msg_attempt_ref     a = {.attempt = 3};

    snprintf(q.site, sizeof(q.site), "s1");
    snprintf(q.node, sizeof(q.node), "n1");
    snprintf(q.agent_version, sizeof(q.agent_version), "test");
    for (int i = 0; i < 2; i++) {
        g[i].index = i;
        snprintf(g[i].uuid, sizeof(g[i].uuid), "GPU-%d-\"quoted\"", i);
        snprintf(g[i].model, sizeof(g[i].model), "L4");
        g[i].vram_mb = 24576;
    }
    q.gpus.v = g;
    q.gpus.n = 2;
    snprintf(a.job_id, sizeof(a.job_id), "job1");
    q.attempts.v = &a;
    q.attempts.n = 1;
    expect("register n1", call("gp.node.s1.n1.register", &msg_node_register_desc, &q, &msg_node_registered_desc, &r, d), GP_EOK, d);
    T_EQ_INT(r.heartbeat_ms, HB_MS);
    T_OK(r.keep.n == 1 && ((msg_attempt_ref *)r.keep.v)[0].attempt == 3);
    gp_msg_clear(&msg_node_registered_desc, &r);
    inv_wait(&node_seen, 0);
    T_OKM(node_seen.n == 1 && strcmp(node_seen.change, "created") == 0 &&
          strcmp(node_seen.id, "n1") == 0 && node_seen.gpus == 2 &&
          strcmp(node_seen.region, "eu-west") == 0 && node_seen.rev > site_seen.rev,
          "NodeChange created n1 with its 2 GPUs and its site's region (%d seen, %s, rev %llu)",
          node_seen.n, node_seen.change, (unsigned long long)node_seen.rev);
    {
        uint64_t first = node_seen.rev;

        expect("register again (idempotent)", call("gp.node.s1.n1.register", &msg_node_register_desc, &q, &msg_node_registered_desc, &r, d), GP_EOK, d);
        gp_msg_clear(&msg_node_registered_desc, &r);
        inv_wait(&node_seen, 1);
        T_OKM(node_seen.n == 2 && strcmp(node_seen.change, "updated") == 0 && node_seen.rev > first,
              "registered again: NodeChange updated at a later revision (%llu > %llu)",
              (unsigned long long)node_seen.rev, (unsigned long long)first);
    }
    expect("body for another node", call("gp.node.s1.n2.register", &msg_node_register_desc, &q, &msg_node_registered_desc, &r, d), GP_EDENIED, d);
    snprintf(q.site, sizeof(q.site), "nowhere");
    expect("register on an unknown site", call("gp.node.nowhere.n1.register", &msg_node_register_desc, &q, &msg_node_registered_desc, &r, d), GP_ENOTFOUND, d);
}

static msg_node
get_node(gp_err *rc)
{
    char           d[GP_ERRBUF_LEN];
    msg_id_request id = {0};
    msg_node       n = {0};

    snprintf(id.id, sizeof(id.id), "n1");
    *rc = call("gp.admin.node.get", &msg_id_request_desc, &id, &msg_node_desc, &n, d);
    return n;
}

static void
bad_heartbeats(void)
{
    static const char junk[] = "\xc1 not msgpack";
    msgpack_sbuffer   sb;
    msgpack_packer    pk;
    char             *body = NULL;

    gp_bus_pub(bus, "gp.node.s1.n1.hb", NULL, junk, sizeof(junk) - 1);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    msgpack_pack_str_with_body(&pk, "site", 4);
    msgpack_pack_str_with_body(&pk, "s1", 2);
    msgpack_pack_str_with_body(&pk, "node", 4);
    msgpack_pack_str_with_body(&pk, "n1", 2);
    msgpack_pack_str_with_body(&pk, "seq", 3);
    msgpack_pack_str_with_body(&pk, "many", 4);      /* wrong type */
    msgpack_pack_str_with_body(&pk, "gpus", 4);
    msgpack_pack_array(&pk, 0);
    gp_bus_pub(bus, "gp.node.s1.n1.hb", NULL, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    wait_s(0.5);
    T_OK(tl_http_get(http_port, "/metrics", &body) > 0);
    T_EQ_INT(tl_metric(body, "gp_request_errors_total{route=\"gp.node.*.*.hb\",code=\"DECODE\"}"), 1);
    T_EQ_INT(tl_metric(body, "gp_request_errors_total{route=\"gp.node.*.*.hb\",code=\"TYPE\"}"), 1);
    free(body);
}


static void
test_live(void)
{
    gp_err   rc;
    msg_node n;
    uint64_t seen;
    redisContext *rc2;
    redisReply   *rep;

    beating = 1;
    wait_s(HB_MS * 2.5 / 1000);
    n = get_node(&rc);
    T_OKM(rc == GP_EOK && n.state == MSG_NODE_STATE_STATE_HEALTHY, "node healthy while beating");
    T_OKM(GP_HAS(&n, MSG_NODE__TELEMETRY) && n.telemetry.gpus.n == 2, "describe has the latest telemetry");
    T_OK(n.gpus.n == 2 && strcmp(((msg_gpu *)n.gpus.v)[0].uuid, "GPU-0-\"quoted\"") == 0);
    T_OKM(n.last_seen_ms + 2000 > (uint64_t)time(NULL) * 1000, "last_seen is recent");
    gp_msg_clear(&msg_node_desc, &n);

    bad_heartbeats();
    n = get_node(&rc);
    T_OKM(rc == GP_EOK, "registry still serving after bad heartbeats");
    gp_msg_clear(&msg_node_desc, &n);

    beating = 0;
    wait_s(HB_MS * 3 / 1000.0 + 1.0);
    /* the sweep runs on the loop of a registry that may share a loaded
     * machine: a few seconds' grace before it must have seen it */
    n = get_node(&rc);
    for (int i = 0; i < 40 && n.state != MSG_NODE_STATE_STATE_LOST; i++) {
        gp_msg_clear(&msg_node_desc, &n);
        wait_s(0.1);
        n = get_node(&rc);
    }
    T_OKM(n.state == MSG_NODE_STATE_STATE_LOST, "lost after 3 missed beats (suspect, then lost) (state %d)", n.state);
    T_OKM(stale_events == 1, "one stale event published (%d)", stale_events);
    gp_msg_clear(&msg_node_desc, &n);
    beating = 1;
    wait_s(HB_MS * 1.5 / 1000);
    n = get_node(&rc);
    T_OKM(n.state == MSG_NODE_STATE_STATE_HEALTHY, "healthy again when beats resume");
    T_OKM(healthy_events >= 2, "healthy events published (%d)", healthy_events);
    gp_msg_clear(&msg_node_desc, &n);

    rc2 = redisConnect(tl_env("GP_REDIS_HOST"), atoi(tl_env("GP_REDIS_PORT")));
    rep = redisCommand(rc2, "FLUSHALL");
    freeReplyObject(rep);
    redisFree(rc2);
    seen = (uint64_t)time(NULL) * 1000;
    wait_s(HB_MS * 2 / 1000.0);
    n = get_node(&rc);
    T_OKM(rc == GP_EOK && n.last_seen_ms >= seen - 1000 && GP_HAS(&n, MSG_NODE__TELEMETRY),
          "after FLUSHALL the node is back in the live view within two beats");
    gp_msg_clear(&msg_node_desc, &n);

    /* Flushed while silent: only the re-seed from PostgreSQL can find it stale. */
    beating = 0;
    wait_s(HB_MS / 1000.0);
    rc2 = redisConnect(tl_env("GP_REDIS_HOST"), atoi(tl_env("GP_REDIS_PORT")));
    rep = redisCommand(rc2, "FLUSHALL");
    freeReplyObject(rep);
    redisFree(rc2);
    wait_s(HB_MS * 3 / 1000.0 + 1.5);
    n = get_node(&rc);
    T_OKM(n.state == MSG_NODE_STATE_STATE_LOST,
          "a node silent when Redis was flushed is still found lost (re-seeded from PostgreSQL)");
    gp_msg_clear(&msg_node_desc, &n);
    beating = 1;
    wait_s(HB_MS * 1.5 / 1000);
    n = get_node(&rc);
    T_OKM(n.state == MSG_NODE_STATE_STATE_HEALTHY, "and healthy again when it beats");
    gp_msg_clear(&msg_node_desc, &n);
}

/* pg_value and redis are below */
static void pg_value(const char *sql, char *out, size_t len);
static bool pg_exec(const char *sql);
static redisReply *redis(const char *fmt, ...);

/* An operator's mode through gp.admin.node.<verb>: the reply's states. */
static gp_err
node_mode(const char *verb, const char *node, msg_node_state *st, char *d)
{
    char           subj[64];
    msg_id_request id = {0};

    snprintf(subj, sizeof(subj), "gp.admin.node.%s", verb);
    snprintf(id.id, sizeof(id.id), "%s", node);
    memset(st, 0, sizeof(*st));
    return call(subj, &msg_id_request_desc, &id, &msg_node_state_desc, st, d);
}

static void
live_state(const char *node, char *out, size_t len)
{
    redisReply *rep = redis("HGET %s state", NODE_KEY(node));

    snprintf(out, len, "%s", rep != NULL && rep->type == REDIS_REPLY_STRING ? rep->str : "");
    freeReplyObject(rep);
}

/* Every transition is in node_transitions with its reason; cordon, drain,
 * uncordon and release set and end modes that beats do not undo, refuse
 * what would hide a quarantine, and are idempotent. */
static void
test_modes_and_history(void)
{
    char           d[GP_ERRBUF_LEN] = "", v[512];
    msg_node_state st;
    gp_err         rc;

    beating = 1;
    wait_s(HB_MS * 2.0 / 1000);
    pg_value("SELECT string_agg(prev || '>' || state, ',' ORDER BY id) FROM node_transitions"
             " WHERE node = 'n1'", v, sizeof(v));
    T_OKM(strstr(v, "healthy>suspect,suspect>lost,lost>healthy") != NULL,
          "n1's history is recorded: %s", v);
    pg_value("SELECT reason FROM node_transitions WHERE node = 'n1' AND state = 'lost'"
             " ORDER BY id LIMIT 1", v, sizeof(v));
    T_OKM(strncmp(v, "no contact for ", 15) == 0, "and says why it was lost: %s", v);

    rc = node_mode("cordon", "n1", &st, d);
    T_OKM(rc == GP_EOK && st.prev == MSG_NODE_STATE_STATE_HEALTHY &&
          st.state == MSG_NODE_STATE_STATE_CORDONED && strcmp(st.reason, "operator: cordon") == 0,
          "cordon: healthy -> cordoned (%s: %s %d -> %d)", gp_err_name(rc), d, st.prev, st.state);
    wait_s(HB_MS * 2.0 / 1000);
    live_state("n1", v, sizeof(v));
    T_OKM(strcmp(v, "cordoned") == 0, "beats do not undo a cordon (live state %s)", v);
    rc = node_mode("cordon", "n1", &st, d);
    T_OKM(rc == GP_EOK && st.state == MSG_NODE_STATE_STATE_CORDONED, "cordon again: idempotent");
    rc = node_mode("drain", "n1", &st, d);
    T_OKM(rc == GP_EOK && st.state == MSG_NODE_STATE_STATE_DRAINING, "drain: -> draining (%s)",
          gp_err_name(rc));
    rc = node_mode("uncordon", "n1", &st, d);
    T_OKM(rc == GP_EOK && st.prev == MSG_NODE_STATE_STATE_DRAINING &&
          st.state == MSG_NODE_STATE_STATE_HEALTHY, "uncordon: draining -> healthy");
    T_OK(pg_exec("UPDATE nodes SET adm = 'quarantined' WHERE id = 'n1'"));
    rc = node_mode("uncordon", "n1", &st, d);
    T_OKM(rc == GP_ECONFLICT && strstr(d, "release") != NULL,
          "uncordon does not end a quarantine (%s: %s)", gp_err_name(rc), d);
    rc = node_mode("cordon", "n1", &st, d);
    T_OKM(rc == GP_ECONFLICT, "nor does cordon hide one (%s)", gp_err_name(rc));
    rc = node_mode("release", "n1", &st, d);
    T_OKM(rc == GP_EOK && st.state == MSG_NODE_STATE_STATE_HEALTHY, "release ends it (%s: %s)",
          gp_err_name(rc), d);
    pg_value("SELECT adm || '/' || state FROM nodes WHERE id = 'n1'", v, sizeof(v));
    T_OKM(strcmp(v, "/healthy") == 0, "PostgreSQL has no mode and healthy (%s)", v);
    rc = node_mode("cordon", "nope", &st, d);
    T_OKM(rc == GP_ENOTFOUND, "cordon of an unknown node: NOTFOUND (%s)", gp_err_name(rc));
    pg_value("SELECT count(*) FROM node_transitions WHERE node = 'n1' AND reason LIKE 'operator: %'",
             v, sizeof(v));
    T_OKM(atoi(v) == 3, "the operator's transitions are recorded too (%s: cordon, drain, "
          "uncordon; a cordon again or a release of what Redis had healthy changed nothing)", v);
    T_OK(pg_exec("INSERT INTO node_transitions (node, site, prev, state, reason, at) VALUES "
                 "('old1', 's1', 'healthy', 'lost', 'x', now() - interval '91 days'), "
                 "('old2', 's1', 'healthy', 'lost', 'x', now() - interval '89 days')"));
    wait_s(1.0);
    pg_value("SELECT string_agg(node, ',' ORDER BY node) FROM node_transitions WHERE node LIKE "
             "'old%'", v, sizeof(v));
    T_OKM(strcmp(v, "old2") == 0, "history older than history-days (90) is deleted, the rest "
          "kept (%s)", v);
}

/* A lease renewal is contact: a node whose beats stop while its renewals
 * still come is neither suspect nor lost (its beats are what got lost);
 * once the renewals stop too, lost. */
static void
test_contact(void)
{
    msg_lease_renew q = {0};
    gp_buf          b;
    char            v[64];
    int             other = 0;

    gp_buf_init(&b, 0);
    T_OK(gp_msg_encode(&msg_lease_renew_desc, &q, &b) == GP_EOK);
    beating = 1;
    wait_s(HB_MS * 2.0 / 1000);
    beating = 0;
    for (int i = 0; i < 12; i++) {                /* 3.6 s: three lost deadlines */
        gp_bus_pub(bus, "gp.node.s1.n1.lease", NULL, b.p, b.n);
        wait_s(0.3);
        live_state("n1", v, sizeof(v));
        other += strcmp(v, "healthy") != 0;
    }
    T_OKM(other == 0, "renewals without beats for three lost deadlines: healthy throughout (%d "
          "samples not)", other);
    wait_s(2.0);
    live_state("n1", v, sizeof(v));
    T_OKM(strcmp(v, "lost") == 0, "renewals stopped too: lost (%s)", v);
    gp_buf_fini(&b);
    beating = 1;
    wait_s(HB_MS * 2.0 / 1000);
}

/* Registers node on s1 (two L4 GPUs, no attempts). */
static void
reg_node(const char *node)
{
    char                d[GP_ERRBUF_LEN] = "", subj[64];
    msg_node_register   q = {0};
    msg_node_registered r = {0};
    msg_gpu             g[2] = {{0}};

    snprintf(q.site, sizeof(q.site), "s1");
    snprintf(q.node, sizeof(q.node), "%s", node);
    snprintf(q.agent_version, sizeof(q.agent_version), "test");
    for (int i = 0; i < 2; i++) {
        g[i].index = i;
        snprintf(g[i].uuid, sizeof(g[i].uuid), "GPU-%s-%d", node, i);
        snprintf(g[i].model, sizeof(g[i].model), "L4");
        g[i].vram_mb = 24576;
    }
    q.gpus.v = g;
    q.gpus.n = 2;
    snprintf(subj, sizeof(subj), "gp.node.s1.%s.register", node);
    expect(node, call(subj, &msg_node_register_desc, &q, &msg_node_registered_desc, &r, d), GP_EOK, d);
    gp_msg_clear(&msg_node_registered_desc, &r);
}

/* Waits up to s seconds for node's live state to be want; its reason in
 * node_transitions (newest) into why. */
static bool
wait_state(const char *node, const char *want, double s, char *why, size_t len)
{
    char   v[64], sql[256];
    double t0 = tl_now();

    do {
        live_state(node, v, sizeof(v));
        if (strcmp(v, want) == 0)
            break;
        wait_s(0.1);
    } while (tl_now() - t0 < s);
    wait_s(0.3);                                   /* the transition's batch */
    snprintf(sql, sizeof(sql), "SELECT reason FROM node_transitions WHERE node = '%s'"
             " ORDER BY id DESC LIMIT 1", node);
    pg_value(sql, why, len);
    return strcmp(v, want) == 0;
}

/* The quarantine rules: a GPU fallen off the bus at once; a burst of
 * bad-GPU XIDs; a new uncorrectable ECC error; a node flapping between
 * lost and back.  An application XID alone does nothing.  Release ends
 * it. */
static void
test_quarantine(void)
{
    char           why[256] = "", d[GP_ERRBUF_LEN];
    msg_node_state st;

    reg_node("x1");
    sick_node = "x1";
    beating_q = "x1";
    sick_xid = 13;                                 /* application fault: not the GPU */
    wait_s(HB_MS * 4.0 / 1000);
    T_OKM(wait_state("x1", "healthy", 0.1, why, sizeof(why)), "XID 13 (application) beats: healthy");
    sick_xid = 79;
    T_OKM(wait_state("x1", "quarantined", 5, why, sizeof(why)) &&
          strstr(why, "fell off the bus (XID 79)") != NULL, "XID 79: quarantined (%s)", why);
    sick_xid = 0;
    wait_s(HB_MS * 3.0 / 1000);
    T_OKM(wait_state("x1", "quarantined", 0.1, why, sizeof(why)), "beats do not undo it");
    T_OK(node_mode("release", "x1", &st, d) == GP_EOK && st.state == MSG_NODE_STATE_STATE_HEALTHY);
    sick_xid = 48;                                 /* DBE XID: 3 beats make 3 within the window */
    T_OKM(wait_state("x1", "quarantined", 5, why, sizeof(why)) &&
          strstr(why, "3 bad-GPU XIDs") != NULL && strstr(why, "XID 48 GPU_ECC_DBE on GPU 1") != NULL,
          "three XID 48 within the window: quarantined (%s)", why);
    sick_xid = 0;
    wait_s(HB_MS * 2.0 / 1000);
    T_OK(node_mode("release", "x1", &st, d) == GP_EOK);
    sick_dbe = 1;
    T_OKM(wait_state("x1", "quarantined", 5, why, sizeof(why)) &&
          strstr(why, "uncorrectable ECC") != NULL, "a new uncorrectable ECC error: quarantined (%s)",
          why);
    T_OK(node_mode("release", "x1", &st, d) == GP_EOK);
    sick_lost = 1;
    T_OKM(wait_state("x1", "quarantined", 5, why, sizeof(why)) && strstr(why, "GPU 1 lost") != NULL,
          "a GPU lost: quarantined (%s)", why);
    sick_lost = 0;
    T_OK(node_mode("release", "x1", &st, d) == GP_EOK);
    sick_node = NULL;
    for (int k = 0; k < 3; k++) {                  /* lost and back, three times */
        beating_q = NULL;
        wait_state("x1", "lost", 5, why, sizeof(why));
        beating_q = "x1";
        wait_s(HB_MS * 2.0 / 1000);
    }
    T_OKM(wait_state("x1", "quarantined", 3, why, sizeof(why)) && strstr(why, "flapping") != NULL,
          "back from lost three times: quarantined as flapping (%s)", why);
    pg_value("SELECT adm FROM nodes WHERE id = 'x1'", why, sizeof(why));
    T_OKM(strcmp(why, "quarantined") == 0, "PostgreSQL holds the quarantine (%s)", why);
    beating_q = NULL;
    {                                              /* the later tests count s1's nodes */
        msg_id_request id = {0};
        msg_deleted    del = {0};

        snprintf(id.id, sizeof(id.id), "x1");
        T_OK(call("gp.admin.node.delete", &msg_id_request_desc, &id, &msg_deleted_desc, &del, d) ==
             GP_EOK);
        gp_msg_clear(&msg_deleted_desc, &del);
    }
}

static char last_detail[GP_ERRBUF_LEN];

static void
register_at(const char *site, const char *node, gp_err want)
{
    char               *d = last_detail, subj[128];
    msg_node_register   q = {0};
    msg_node_registered r = {0};
    gp_err              rc;

    snprintf(q.site, sizeof(q.site), "%s", site);
    snprintf(q.node, sizeof(q.node), "%s", node);
    snprintf(q.agent_version, sizeof(q.agent_version), "test");
    snprintf(subj, sizeof(subj), "gp.node.%s.%s.register", site, node);
    rc = call(subj, &msg_node_register_desc, &q, &msg_node_registered_desc, &r, d);
    expect(subj, rc, want, d);
    gp_msg_clear(&msg_node_registered_desc, &r);
}

static void
register_node(const char *node, gp_err want)
{
    register_at("s1", node, want);
}

static redisReply *
redis(const char *fmt, ...)
{
    redisContext *c = redisConnect(tl_env("GP_REDIS_HOST"), atoi(tl_env("GP_REDIS_PORT")));
    redisReply   *rep;
    va_list       ap;

    va_start(ap, fmt);
    rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return rep;
}

static long long
redis_int(const char *fmt, const char *arg)
{
    redisReply *rep = redis(fmt, arg);
    long long   v = rep != NULL && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;

    freeReplyObject(rep);
    return v;
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

static long long
reg_mark(const char *node)
{
    return redis_int("HEXISTS %s reg", NODE_KEY(node));
}

/* Polls until node's 'reg' mark is there (1) or not (0), up to s seconds. */
static bool
wait_reg_mark(const char *node, long long want, double s)
{
    double t0 = tl_now();

    while (reg_mark(node) != want && tl_now() - t0 < s)
        wait_s(0.1);
    return reg_mark(node) == want;
}

/* A reseed whose script calls fail (ACL refuses the registry's user HSETNX, which only the
 * reseed script uses) leaves the epoch unset, and is tried again until it
 * succeeds: the node's 'reg' mark comes back and its beats count again.
 * (Before: the epoch was set first and failed chunks were never retried,
 * so n1 stayed a ghost forever.) */
static void
test_reseed_retry(void)
{
    redisReply *rep;
    double      fails;

    beating = 1;
    wait_s(HB_MS * 1.5 / 1000);
    T_OKM(reg_mark("n1") == 1, "n1 is in the live view before the flush");
    rep = redis("ACL SETUSER gridpool_registry -hsetnx");
    T_OKM(rep != NULL && rep->type == REDIS_REPLY_STATUS, "ACL refuses HSETNX");
    freeReplyObject(rep);
    freeReplyObject(redis("FLUSHALL"));
    wait_s(1.5);
    T_OKM(reg_mark("n1") == 0, "while every reseed fails n1 has no 'reg' mark");
    T_OKM(redis_int("EXISTS %s", "gp:epoch:v3") == 0, "a failed reseed leaves no epoch");
    fails = metric("gp_registry_redis_reseed_failures_total");
    T_OKM(fails >= 2, "the failed reseed was tried again (%.0f failures)", fails);
    freeReplyObject(redis("ACL SETUSER gridpool_registry +hsetnx"));
    T_OKM(wait_reg_mark("n1", 1, 10), "once Redis takes the reseed, n1's 'reg' mark is back");
    T_OKM(redis_int("EXISTS %s", "gp:epoch:v3") == 1, "and the epoch is written");
    T_OKM(redis_int("EXISTS %s", "gp:reseed:lock:v3") == 0, "and the reseed lock released");
    wait_s(HB_MS * 1.5 / 1000);
    T_OKM(redis_int("HEXISTS %s hb", NODE_KEY("n1")) == 1, "n1's beats are taken again");
}

/* A reseeder that died after taking the lock: nobody reseeds while its
 * lock holds, and once it expires another instance (here: the one
 * registry) reseeds; the epoch was never written, so nothing is skipped. */
static void
test_reseed_lock_expiry(void)
{
    redisContext *c = redisConnect(tl_env("GP_REDIS_HOST"), atoi(tl_env("GP_REDIS_PORT")));
    redisReply   *rep;

    beating = 1;
    T_OKM(c != NULL && c->err == 0, "redis connection");
    freeReplyObject(redisCommand(c, "MULTI"));
    freeReplyObject(redisCommand(c, "FLUSHALL"));
    freeReplyObject(redisCommand(c, "SET gp:reseed:lock:v3 dead-instance PX 2500"));
    rep = redisCommand(c, "EXEC");
    T_OKM(rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2,
          "flushed, with a dead reseeder's lock in place");
    freeReplyObject(rep);
    redisFree(c);
    wait_s(1.2);
    T_OKM(reg_mark("n1") == 0 && redis_int("EXISTS %s", "gp:epoch:v3") == 0,
          "no reseed while the dead reseeder's lock holds");
    T_OKM(wait_reg_mark("n1", 1, 6), "once its lock expired, another instance reseeded");
    T_OKM(redis_int("EXISTS %s", "gp:epoch:v3") == 1, "and wrote the epoch");
}

/* A node the inventory does not have: its beats are dropped and counted
 * (nothing appears in Redis), so the scheduler's lease, which reads the
 * 'reg' mark, answers it NOTFOUND. */
static void
test_ghost(void)
{
    send_beat("g1");
    send_beat("g1");
    wait_s(0.5);
    T_OKM(redis_int("EXISTS %s", NODE_KEY("g1")) == 0, "a never-registered node's beat creates no live hash");
    T_OKM(metric("gp_registry_heartbeats_unknown_node_total") >= 2, "its beats are counted");
    T_OKM(reg_mark("g1") == 0 && reg_mark("n1") == 1, "only the registered node has its 'reg' mark");
}

/* The live view stores the heartbeat as decoded and re-encoded, not the
 * body: a beat carrying a large unknown key stores a small hb field. */
static void
test_hb_reencoded(void)
{
    msgpack_sbuffer sb;
    msgpack_packer  pk;
    size_t          big = 600 * 1024;
    char           *junk = malloc(big);
    redisReply     *rep;
    long long       n = -1;

    beating = 0;
    memset(junk, 'x', big);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 6);
    msgpack_pack_str_with_body(&pk, "sent_ms", 7);
    msgpack_pack_uint64(&pk, (uint64_t)time(NULL) * 1000);
    msgpack_pack_str_with_body(&pk, "site", 4);
    msgpack_pack_str_with_body(&pk, "s1", 2);
    msgpack_pack_str_with_body(&pk, "node", 4);
    msgpack_pack_str_with_body(&pk, "n1", 2);
    msgpack_pack_str_with_body(&pk, "seq", 3);
    msgpack_pack_uint64(&pk, ++hb_seq);
    msgpack_pack_str_with_body(&pk, "gpus", 4);
    msgpack_pack_array(&pk, 0);
    msgpack_pack_str_with_body(&pk, "x-unknown", 9);
    msgpack_pack_str_with_body(&pk, junk, big);
    gp_bus_pub(bus, "gp.node.s1.n1.hb", NULL, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    free(junk);
    wait_s(0.7);
    rep = redis("HSTRLEN %s hb", NODE_KEY("n1"));
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
        n = rep->integer;
    freeReplyObject(rep);
    T_OKM(n > 0 && n < 4096, "a beat with a 600 KB unknown key stores a small hb (%lld bytes)", n);
    beating = 1;
    wait_s(HB_MS * 1.5 / 1000);
}

static void
test_capacity_and_delete(void)
{
    char             d[GP_ERRBUF_LEN] = "";
    msg_list_request l = {0};
    msg_pool_list    pl = {0};
    msg_node_list    nl = {0};
    msg_id_request   id = {0};
    msg_deleted      del = {0};

    expect("list pools", call("gp.admin.pool.list", &msg_list_request_desc, &l, &msg_pool_list_desc, &pl, d), GP_EOK, d);
    T_OK(pl.items.n == 1 && ((msg_pool *)pl.items.v)[0].gpus_total == 2 &&
         ((msg_pool *)pl.items.v)[0].gpus_healthy == 2);
    gp_msg_clear(&msg_pool_list_desc, &pl);
    snprintf(l.model, sizeof(l.model), "L4");
    expect("list nodes by model", call("gp.admin.node.list", &msg_list_request_desc, &l, &msg_node_list_desc, &nl, d), GP_EOK, d);
    T_OK(nl.items.n == 1 && nl.total == 1 && ((msg_node *)nl.items.v)[0].last_seen_ms > 0);
    gp_msg_clear(&msg_node_list_desc, &nl);
    snprintf(l.model, sizeof(l.model), "H100");
    expect("list nodes by another model", call("gp.admin.node.list", &msg_list_request_desc, &l, &msg_node_list_desc, &nl, d), GP_EOK, d);
    T_EQ_INT(nl.items.n, 0);
    gp_msg_clear(&msg_node_list_desc, &nl);

    snprintf(id.id, sizeof(id.id), "s1");
    {
        msg_site site = {0};

        expect("get site", call("gp.admin.site.get", &msg_id_request_desc, &id, &msg_site_desc, &site, d), GP_EOK, d);
        T_OKM(site.uplink_rtt_ms > 12.4 && site.uplink_rtt_ms < 12.6 && site.nodes == 1 && site.gpus == 2,
              "site shows its measured uplink RTT (%.2f ms) and its nodes and GPUs", site.uplink_rtt_ms);
        gp_msg_clear(&msg_site_desc, &site);
    }
    expect("delete a site with nodes", call("gp.admin.site.delete", &msg_id_request_desc, &id, &msg_deleted_desc, &del, d), GP_ECONFLICT, d);
    beating = 0;
    snprintf(id.id, sizeof(id.id), "n1");
    {
        uint64_t before = node_seen.rev;
        int      seen = node_seen.n;

        expect("delete node", call("gp.admin.node.delete", &msg_id_request_desc, &id, &msg_deleted_desc, &del, d), GP_EOK, d);
        inv_wait(&node_seen, seen);
        T_OKM(strcmp(node_seen.change, "deleted") == 0 && strcmp(node_seen.id, "n1") == 0 &&
              node_seen.rev > before, "NodeChange deleted n1 at a later revision (%llu > %llu)",
              (unsigned long long)node_seen.rev, (unsigned long long)before);
    }
    expect("delete it again", call("gp.admin.node.delete", &msg_id_request_desc, &id, &msg_deleted_desc, &del, d), GP_ENOTFOUND, d);

    /* deleted by an operator: beats dropped, 'reg' mark gone, registration DENIED */
    send_beat("n1");
    wait_s(0.5);
    T_OKM(redis_int("EXISTS %s", NODE_KEY("n1")) == 0, "a beat of a deleted node recreates nothing in Redis");
    register_node("n1", GP_EDENIED);
    T_OKM(strstr(last_detail, "deleted by an operator at 20") != NULL, "DENIED says when: %s", last_detail);
    {
        msg_id_request ra = {0};

        snprintf(ra.id, sizeof(ra.id), "n1");
        expect("readmit", call("gp.admin.node.readmit", &msg_id_request_desc, &id, &msg_id_request_desc, &ra, d), GP_EOK, d);
        expect("readmit again", call("gp.admin.node.readmit", &msg_id_request_desc, &id, &msg_id_request_desc, &ra, d), GP_ENOTFOUND, d);
        snprintf(id.id, sizeof(id.id), "never");
        expect("readmit a node never deleted", call("gp.admin.node.readmit", &msg_id_request_desc, &id, &msg_id_request_desc, &ra, d), GP_ENOTFOUND, d);
    }
    register_node("n1", GP_EOK);
    send_beat("n1");
    wait_s(0.5);
    T_OKM(redis_int("EXISTS %s", NODE_KEY("n1")) == 1, "re-admitted and registered, its beats count again");
    T_OKM(reg_mark("n1") == 1, "re-admitted, it has its 'reg' mark again");
}

/* "stale,stale,..." for p1..p4 from nodes.state, or "" without PostgreSQL. */
static void
pg_states(char *out, size_t len)
{
    PGconn   *c = PQconnectdb(tl_env("GP_PG_CONNINFO"));
    PGresult *res;

    out[0] = '\0';
    if (PQstatus(c) == CONNECTION_OK) {
        res = PQexec(c, "SELECT string_agg(state, ',' ORDER BY id) FROM nodes WHERE id LIKE 'p_'");
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
            snprintf(out, len, "%s", PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    PQfinish(c);
}

/* PostgreSQL stopped while nodes change state: every transition reaches
 * nodes.state once it is back (the failed batch is retried). */
static void
test_pg_outage(void)
{
    char      states[256];
    char     *body = NULL;
    long long retries = 0;
    double    t0;

    for (int i = 1; i <= 4; i++) {
        char node[16];

        snprintf(node, sizeof(node), "p%d", i);
        register_node(node, GP_EOK);
    }
    beating_p = 0xf;
    wait_s(HB_MS * 2.5 / 1000);
    pg_states(states, sizeof(states));
    T_OKM(strcmp(states, "healthy,healthy,healthy,healthy") == 0, "p1..p4 healthy (%s)", states);
    /* a beat each now: stopping PostgreSQL blocks this loop (no beats), and
     * the detector's 1.2 s must run from here, not from a beat up to one
     * interval earlier, or the nodes go lost before PostgreSQL is down */
    for (int i = 1; i <= 4; i++) {
        char node[16];

        snprintf(node, sizeof(node), "p%d", i);
        send_beat(node);
    }
    tl_stack("stop-pg");
    beating_p = 0;
    wait_s(HB_MS * 3 / 1000.0 + 1.5);           /* all four found stale, PostgreSQL down */
    wait_s(6.0);                                /* past the 5 s query deadline */
    tl_stack("start-pg");
    t0 = tl_now();
    do {
        wait_s(0.5);
        pg_states(states, sizeof(states));
    } while (strcmp(states, "lost,lost,lost,lost") != 0 && tl_now() - t0 < 30);
    T_OKM(strcmp(states, "lost,lost,lost,lost") == 0,
          "every transition made while PostgreSQL was down is in nodes.state (%s)", states);
    if (tl_http_get(http_port, "/metrics", &body) > 0)
        retries = tl_metric(body, "gp_registry_state_write_retries_total");
    free(body);
    T_OKM(retries >= 1, "the failed batch was retried (%lld)", retries);
    beating_p = 0;
}

static bool
pg_exec(const char *sql)
{
    PGconn   *c = PQconnectdb(tl_env("GP_PG_CONNINFO"));
    PGresult *res = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
    bool      ok = res != NULL && (PQresultStatus(res) == PGRES_COMMAND_OK ||
                                   PQresultStatus(res) == PGRES_TUPLES_OK);

    if (!ok)
        printf("# pg_exec: %s\n", c != NULL ? PQerrorMessage(c) : "no connection");
    PQclear(res);
    PQfinish(c);
    return ok;
}

/* The first column of the first row of sql, or "" */
static void
pg_value(const char *sql, char *out, size_t len)
{
    PGconn   *c = PQconnectdb(tl_env("GP_PG_CONNINFO"));
    PGresult *res = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;

    out[0] = '\0';
    if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) >= 1)
        snprintf(out, len, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    PQfinish(c);
}

static double
metric_at(int port, const char *series)
{
    char  *body = NULL;
    double v = -1;

    if (tl_http_get(port, "/metrics", &body) > 0)
        v = tl_metric(body, series);
    free(body);
    return v;
}

/* Fails every write of q1 as stale (the batch is refused, as when
 * PostgreSQL is unavailable) while it exists. */
static const char no_stale_sql[] =
    "CREATE FUNCTION test_no_stale() RETURNS trigger LANGUAGE plpgsql AS $$"
    " BEGIN IF NEW.id LIKE 'q_' AND NEW.state IN ('suspect', 'lost') THEN"
    " RAISE EXCEPTION 'test: stale write of % refused', NEW.id; END IF; RETURN NEW; END $$;"
    " CREATE TRIGGER test_no_stale BEFORE UPDATE ON nodes FOR EACH ROW"
    " EXECUTE FUNCTION test_no_stale()";
static const char no_stale_drop_sql[] =
    "DROP TRIGGER test_no_stale ON nodes; DROP FUNCTION test_no_stale()";

static pid_t start_faked_registry(const char *offset, int port);

/* A registry whose wall clock is an hour ahead writes q3's transition to
 * stale (the normal one is SIGSTOPped meanwhile); then the normal one
 * writes q3's next transition (healthy), which must still apply: the
 * transitions' times are Redis's clock, not the hosts'.  (With host wall
 * times, the row's state_since would be an hour ahead and refuse every
 * write of q3 for an hour.) */
static void
test_skewed_writer(pid_t a)
{
    int    port = tl_free_port();
    pid_t  f;
    double t0;
    char   st[64] = "";

    register_node("q3", GP_EOK);
    beating_q = "q3";
    wait_s(HB_MS * 2.5 / 1000);
    kill(a, SIGSTOP);
    f = start_faked_registry("+1h", port);
    t0 = tl_now();
    while (metric_at(port, "gp_registry_heartbeats_total") < 1 && tl_now() - t0 < 15)
        wait_s(0.2);
    wait_s(0.5);
    beating_q = NULL;
    t0 = tl_now();
    do {
        wait_s(0.2);
        pg_value("SELECT state FROM nodes WHERE id = 'q3'", st, sizeof(st));
    } while (strcmp(st, "lost") != 0 && tl_now() - t0 < 10);
    T_OKM(strcmp(st, "lost") == 0, "the registry at +1h found q3 stale and wrote it (%s)", st);
    kill(f, SIGTERM);
    T_EQ_INT(tl_wait_exit(f, 10), 0);
    kill(a, SIGCONT);
    beating_q = "q3";
    t0 = tl_now();
    do {
        wait_s(0.2);
        pg_value("SELECT state FROM nodes WHERE id = 'q3'", st, sizeof(st));
    } while (strcmp(st, "healthy") != 0 && tl_now() - t0 < 6);
    T_OKM(strcmp(st, "healthy") == 0,
          "q3 beats again: the normal registry's write applies after the one at +1h (%s)", st);
    beating_q = NULL;
}

#define RACE_PAIRS 40

static int race_done, race_reg[RACE_PAIRS], race_del[RACE_PAIRS];

static void
race_reg_cb(void *arg, gp_err err, const void *reply, const char *detail)
{
    (void)reply;
    (void)detail;
    race_reg[(intptr_t)arg] = err;
    race_done++;
}

static void
race_del_cb(void *arg, gp_err err, const void *reply, const char *detail)
{
    (void)reply;
    (void)detail;
    race_del[(intptr_t)arg] = err;
    race_done++;
}

/* Registration racing an operator's delete: for each of RACE_PAIRS nodes
 * (registered before), a registration and a delete are sent back to back,
 * all pairs at once.  However they interleave, no node ends both in nodes
 * and in retired_nodes, and the replies agree with the rows: the delete
 * is OK (the node existed) and then the node is retired and not in the
 * inventory; a registration after it is DENIED. */
static void
test_register_delete_race(void)
{
    char   both[32] = "", live[32] = "", retired[32] = "";
    int    reg_ok = 0, reg_denied = 0, del_ok = 0, odd = 0;

    for (int i = 0; i < RACE_PAIRS; i++) {
        char node[16];

        snprintf(node, sizeof(node), "race%d", i);
        register_node(node, GP_EOK);
    }
    race_done = 0;
    for (intptr_t i = 0; i < RACE_PAIRS; i++) {
        msg_node_register q = {0};
        msg_id_request    id = {0};
        char              subj[128];

        snprintf(q.site, sizeof(q.site), "s1");
        snprintf(q.node, sizeof(q.node), "race%d", (int)i);
        snprintf(q.agent_version, sizeof(q.agent_version), "test");
        snprintf(subj, sizeof(subj), "gp.node.s1.%s.register", q.node);
        snprintf(id.id, sizeof(id.id), "%s", q.node);
        T_OK(gp_call(bus, subj, &msg_node_register_desc, &q, &msg_node_registered_desc, 10000,
                     race_reg_cb, (void *)i) == GP_EOK);
        T_OK(gp_call(bus, "gp.admin.node.delete", &msg_id_request_desc, &id, &msg_deleted_desc,
                     10000, race_del_cb, (void *)i) == GP_EOK);
    }
    {
        double t0 = tl_now();

        while (race_done < 2 * RACE_PAIRS && tl_now() - t0 < 15)
            wait_s(0.05);
    }
    T_OKM(race_done == 2 * RACE_PAIRS, "every registration and delete answered (%d)", race_done);
    for (int i = 0; i < RACE_PAIRS; i++) {
        reg_ok += race_reg[i] == GP_EOK;
        reg_denied += race_reg[i] == GP_EDENIED;
        del_ok += race_del[i] == GP_EOK;
        odd += (race_reg[i] != GP_EOK && race_reg[i] != GP_EDENIED) || race_del[i] != GP_EOK;
    }
    pg_value("SELECT count(*) FROM nodes n JOIN retired_nodes r USING (id) WHERE n.id LIKE 'race%'",
             both, sizeof(both));
    pg_value("SELECT count(*) FROM nodes WHERE id LIKE 'race%'", live, sizeof(live));
    pg_value("SELECT count(*) FROM retired_nodes WHERE id LIKE 'race%'", retired, sizeof(retired));
    printf("# race: registrations OK %d DENIED %d, deletes OK %d, other %d; nodes %s, retired %s, "
           "both %s\n", reg_ok, reg_denied, del_ok, odd, live, retired, both);
    T_OKM(strcmp(both, "0") == 0, "no node is both in the inventory and retired (%s of %d)", both,
          RACE_PAIRS);
    T_OKM(odd == 0 && strcmp(live, "0") == 0 && atoi(retired) == RACE_PAIRS,
          "every delete OK and in effect: %s nodes left, %s retired, %d odd replies", live, retired,
          odd);
}

/* Two instances write transitions of one node out of order: instance A
 * finds q1 stale, its write fails and waits for a retry; meanwhile q1
 * beats again and instance B writes it healthy; then A's retry arrives
 * with the older transition.  The row keeps the newer state (healthy).
 * A is stopped (SIGSTOP) while B takes the beats, so B is the one that
 * sees q1 come back; its stale write is refused by a test trigger until B
 * has written. */
static void
test_out_of_order(pid_t a)
{
    char   st[64] = "", since_b[64] = "", since_end[64] = "";
    int    b_port = tl_free_port();
    pid_t  b;
    double t0, retries0, pending = -1;

    register_node("q1", GP_EOK);
    beating_q = "q1";
    wait_s(HB_MS * 2.5 / 1000);
    pg_value("SELECT state FROM nodes WHERE id = 'q1'", st, sizeof(st));
    T_OKM(strcmp(st, "healthy") == 0, "q1 registered and beating: healthy (%s)", st);
    T_OK(pg_exec(no_stale_sql));
    retries0 = metric("gp_registry_state_write_retries_total");
    q1_stale = 0;
    beating_q = NULL;
    t0 = tl_now();
    while ((q1_stale == 0 || metric("gp_registry_state_write_retries_total") <= retries0) &&
           tl_now() - t0 < 10)
        wait_s(0.1);
    pending = metric("gp_registry_state_changes_pending");
    T_OKM(q1_stale > 0 && pending >= 1,
          "A found q1 stale, its write failed and waits for a retry (%d events, %.0f pending)",
          q1_stale, pending);
    kill(a, SIGSTOP);
    b = start_registry_at(b_port);
    beating_q = "q1";
    t0 = tl_now();
    while (metric_at(b_port, "gp_registry_node_transitions_total") < 1 && tl_now() - t0 < 20)
        wait_s(0.2);
    t0 = tl_now();
    while (metric_at(b_port, "gp_registry_state_changes_pending") != 0 && tl_now() - t0 < 5)
        wait_s(0.1);
    T_OKM(metric_at(b_port, "gp_registry_node_transitions_total") >= 1 &&
          metric_at(b_port, "gp_registry_state_changes_pending") == 0,
          "instance B took q1's beat and wrote it healthy");
    pg_value("SELECT state || ' ' || state_since FROM nodes WHERE id = 'q1'", since_b,
             sizeof(since_b));
    T_OK(pg_exec(no_stale_drop_sql));
    kill(a, SIGCONT);
    /* A's retry (within the 5 s backoff cap, jittered) writes its batch */
    t0 = tl_now();
    do {
        wait_s(0.25);
        pending = metric("gp_registry_state_changes_pending");
    } while (pending != 0 && tl_now() - t0 < 10);
    T_OKM(pending == 0, "A's retry was written: nothing pending (%.0f)", pending);
    pg_value("SELECT state || ' ' || state_since FROM nodes WHERE id = 'q1'", since_end,
             sizeof(since_end));
    T_OKM(strncmp(since_end, "healthy ", 8) == 0 && strcmp(since_end, since_b) == 0,
          "A's older transition (stale) did not overwrite B's newer one (after B: %s; now: %s)",
          since_b, since_end);
    beating_q = NULL;
    kill(b, SIGTERM);
    T_EQ_INT(tl_wait_exit(b, 10), 0);
}

/* A graceful stop writes the queued state changes at once: q2's stale
 * write keeps failing (test trigger) until the retry backoff is past 2.4 s
 * (6 failures: 100, 200, ... 3200 ms +-25%); then the trigger is dropped
 * and SIGTERM comes well before the next retry, while the test holds q2's
 * row for 1 s: the process waits for its write (it is alive after 1 s)
 * and the row is stale when it has exited. */
static void
test_stop_flush(pid_t a)
{
    char      st[64] = "";
    double    t0, t_seen, retries0, retries = 0, lag;
    int       status, alive;
    PGconn   *lock;
    PGresult *res;

    register_node("q2", GP_EOK);
    beating_q = "q2";
    wait_s(HB_MS * 2.5 / 1000);
    T_OK(pg_exec(no_stale_sql));
    retries0 = metric("gp_registry_state_write_retries_total");
    beating_q = NULL;
    t0 = tl_now();
    do {
        wait_s(0.05);
        retries = metric("gp_registry_state_write_retries_total") - retries0;
    } while (retries < 6 && tl_now() - t0 < 20);
    t_seen = tl_now();
    pg_value("SELECT state FROM nodes WHERE id = 'q2'", st, sizeof(st));
    T_OKM(retries >= 6 && strcmp(st, "healthy") == 0,
          "q2's stale write failed %.0f times, the row is still healthy (%s)", retries, st);
    T_OK(pg_exec(no_stale_drop_sql));
    /* the test holds q2's row for 1 s after SIGTERM: the write at stop
     * waits for it, and the drain (5 s) for the write */
    lock = PQconnectdb(tl_env("GP_PG_CONNINFO"));
    PQclear(PQexec(lock, "BEGIN"));
    res = PQexec(lock, "SELECT 1 FROM nodes WHERE id = 'q2' FOR UPDATE");
    T_OKM(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1, "q2's row locked");
    PQclear(res);
    lag = tl_now() - t_seen;
    kill(a, SIGTERM);
    usleep(1000000);
    alive = tl_alive(a);
    PQclear(PQexec(lock, "COMMIT"));
    PQfinish(lock);
    status = tl_wait_exit(a, 10);
    T_OKM(lag < 2.0, "SIGTERM %.2f s after the 6th failure: before the next retry (>= 2.4 s)",
          lag);
    T_OKM(alive, "1 s after SIGTERM the registry still waits for its write (drain held)");
    T_EQ_INT(status, 0);
    pg_value("SELECT state FROM nodes WHERE id = 'q2'", st, sizeof(st));
    T_OKM(strcmp(st, "lost") == 0, "the queued change was written before exit (q2: %s)", st);
}

/* A node that registers at another site leaves nothing in its old site's
 * shard: no hash the sweep would later call stale, no index entry. */
static void
test_site_move(void)
{
    char        d[GP_ERRBUF_LEN] = "", old_seen[REGISTRY_KEY_LEN], new_key[REGISTRY_KEY_LEN];
    msg_site    st = {0}, sout = {0};
    redisReply *rep;
    int         in_old_index;

    snprintf(st.id, sizeof(st.id), "s7");
    snprintf(st.tenant, sizeof(st.tenant), "op");
    snprintf(st.region, sizeof(st.region), "eu-west");
    expect("create site s7", call("gp.admin.site.create", &msg_site_desc, &st, &msg_site_desc, &sout, d), GP_EOK, d);
    gp_msg_clear(&msg_site_desc, &sout);
    T_OKM(registry_shard("s1") != registry_shard("s7"), "s1 and s7 are in different shards");
    register_node("mv1", GP_EOK);
    send_beat("mv1");
    wait_s(0.3);
    T_OKM(redis_int("EXISTS %s", NODE_KEY("mv1")) == 1, "mv1 live at s1");
    register_at("s7", "mv1", GP_EOK);
    wait_s(0.3);
    registry_seen_key(old_seen, registry_shard("s1"));
    registry_node_key(new_key, registry_shard("s7"), "mv1");
    rep = redis("ZSCORE %s mv1", old_seen);
    in_old_index = rep != NULL && rep->type == REDIS_REPLY_STRING;
    freeReplyObject(rep);
    T_OKM(redis_int("EXISTS %s", NODE_KEY("mv1")) == 0 && !in_old_index,
          "moved to s7: nothing left in s1's shard (hash %lld, in index %d)",
          redis_int("EXISTS %s", NODE_KEY("mv1")), in_old_index);
    T_OKM(redis_int("EXISTS %s", new_key) == 1, "mv1 live at s7");
}

/* Registration ends only when Redis took its write: a write that fails
 * (here: the node's key is of the wrong type, so the script errors) is
 * UNAVAIL, and a successful one has set the 'reg' mark by the time the
 * reply arrives.  (Before: OK whatever became of the write.) */
static void
test_register_live_write(void)
{
    char key[REGISTRY_KEY_LEN];

    registry_node_key(key, registry_shard("s7"), "w1");
    freeReplyObject(redis("SET %s not-a-hash", key));
    register_at("s7", "w1", GP_EUNAVAIL);
    T_OKM(strstr(last_detail, "register again") != NULL, "UNAVAIL says to register again: %s",
          last_detail);
    freeReplyObject(redis("DEL %s", key));
    register_at("s7", "w1", GP_EOK);
    T_OKM(redis_int("HEXISTS %s reg", key) == 1, "the 'reg' mark is set when the reply comes");
}

/* Removing a node from a shard (delete; the old shard after a site move)
 * that Redis refuses (ACL: no DEL) is retried until it lands: the deleted
 * node's 'reg' mark and the moved node's old hash are gone once Redis
 * takes DEL again.  (Before: sent unchecked, they stayed for good.) */
static void
test_forget_retry(void)
{
    char           d[GP_ERRBUF_LEN] = "", kd[REGISTRY_KEY_LEN], km[REGISTRY_KEY_LEN];
    msg_id_request id = {0};
    msg_deleted    del = {0};
    redisReply    *rep;
    double         t0;

    registry_node_key(kd, registry_shard("s7"), "d1");
    registry_node_key(km, registry_shard("s7"), "m2");
    register_at("s7", "d1", GP_EOK);
    register_at("s7", "m2", GP_EOK);
    rep = redis("ACL SETUSER gridpool_registry -del");
    T_OKM(rep != NULL && rep->type == REDIS_REPLY_STATUS, "ACL refuses DEL");
    freeReplyObject(rep);
    snprintf(id.id, sizeof(id.id), "d1");
    expect("delete d1", call("gp.admin.node.delete", &msg_id_request_desc, &id, &msg_deleted_desc,
                             &del, d), GP_EOK, d);
    register_at("s1", "m2", GP_EOK);              /* moves: s7's shard must lose it */
    wait_s(0.6);
    T_OKM(redis_int("EXISTS %s", kd) == 1 && redis_int("EXISTS %s", km) == 1,
          "while DEL is refused the removals fail (d1 %lld, m2 at s7 %lld)",
          redis_int("EXISTS %s", kd), redis_int("EXISTS %s", km));
    T_OKM(metric("gp_registry_live_cleanup_failures_total") >= 2, "failed removals are counted");
    T_OKM(metric("gp_registry_live_cleanup_pending") == 2, "two removals pending (%.0f)",
          metric("gp_registry_live_cleanup_pending"));
    freeReplyObject(redis("ACL SETUSER gridpool_registry +del"));
    t0 = tl_now();
    while ((redis_int("EXISTS %s", kd) != 0 || redis_int("EXISTS %s", km) != 0) &&
           tl_now() - t0 < 10)
        wait_s(0.1);
    T_OKM(redis_int("EXISTS %s", kd) == 0, "the deleted node's hash and 'reg' mark are gone");
    T_OKM(redis_int("EXISTS %s", km) == 0, "the moved node's old hash is gone");
    T_OKM(redis_int("EXISTS %s", NODE_KEY("m2")) == 1, "the moved node is live at s1");
    wait_s(0.3);
    T_OKM(metric("gp_registry_live_cleanup_pending") == 0, "nothing left pending");
}

/* A second registry whose wall clock is off by offset ("+1h", "-1h";
 * libfaketime, wall clock only), in the same queue group. */
static pid_t
start_faked_registry(const char *offset, int port)
{
    static const char FAKETIME_LIB[] = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    char        ports[16], hb[16], bin[512];
    const char *argv[] = {bin, "--http-port", ports, "--heartbeat-ms", hb, "--detect-floor-ms", "1200", "--lost-ms", "1200",
                          "--sweep-ms", "100", NULL};
    pid_t       pid;

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-registry", tl_env("GP_BUILD"));
    snprintf(ports, sizeof(ports), "%d", port);
    snprintf(hb, sizeof(hb), "%d", HB_MS);
    pid = fork();
    if (pid == 0) {
        const char *asan = getenv("ASAN_OPTIONS");
        char        opts[1024];

        snprintf(opts, sizeof(opts), "%s%sverify_asan_link_order=0", asan ? asan : "",
                 asan && asan[0] ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        setenv("LD_PRELOAD", FAKETIME_LIB, 1);
        setenv("FAKETIME", offset, 1);
        setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Beat stamps and the stale cutoff come from Redis's clock: a registry
 * whose wall clock is an hour ahead (as after a forward step) or behind
 * shares the work with a normal one, and nodes that keep beating are never
 * found stale; nodes that stop are, once each.  (Before: the instance an
 * hour ahead found every node stale at once, the one behind stamped beats
 * an hour old, so the other found them stale.) */
static void
test_clock_skew(void)
{
    static const char *const offsets[] = {"+1h", "-1h"};

    beating_p = 0xf;
    wait_s(HB_MS * 2.5 / 1000);
    for (int k = 0; k < 2; k++) {
        int    port = tl_free_port(), s0;
        pid_t  b = start_faked_registry(offsets[k], port);
        double t0 = tl_now(), hb0;

        while (metric_at(port, "gp_registry_heartbeats_total") < 0 && tl_now() - t0 < 15)
            wait_s(0.2);
        hb0 = metric_at(port, "gp_registry_heartbeats_total");
        T_OKM(hb0 >= 0, "a registry with its wall clock at %s is up", offsets[k]);
        s0 = stale_p_events;
        wait_s(HB_MS * 3 * 3 / 1000.0);         /* three stale windows */
        T_OKM(metric_at(port, "gp_registry_heartbeats_total") > hb0 + 4,
              "it took part of the beats (%.0f)", metric_at(port, "gp_registry_heartbeats_total"));
        T_OKM(stale_p_events == s0, "with a registry at %s, beating nodes are never stale (%d "
              "stale events)", offsets[k], stale_p_events - s0);
        if (k == 1) {                           /* and stopped nodes still are, once each */
            beating_p = 0;
            wait_s(HB_MS * 3 / 1000.0 + 1.5);
            T_OKM(stale_p_events - s0 == 4, "p1..p4 stopped beating: 4 stale events (%d)",
                  stale_p_events - s0);
        }
        kill(b, SIGTERM);
        T_EQ_INT(tl_wait_exit(b, 10), 0);
    }
}

int
main(void)
{
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "registry-test"};
    gp_bus_sub *sub = NULL, *isub = NULL;
    ev_timer    hb;
    pid_t       pid;
    double      t0 = tl_now();
    msg_health_request hq = {0};
    msg_health  h = {0};
    char        d[GP_ERRBUF_LEN];
    int         up = 0;

    loop = ev_default_loop(0);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    T_OK(gp_bus_sub_new(bus, "gp.int.node.state.>", NULL, on_state, NULL, &sub) == GP_EOK);
    T_OK(gp_bus_sub_new(bus, "gp.int.inventory.>", NULL, on_inventory, NULL, &isub) == GP_EOK);
    http_port = tl_free_port();
    pid = start_registry();
    while (!up && tl_now() - t0 < 20) {
        up = tl_call(loop, bus, "gp.int.health.registry", &msg_health_request_desc, &hq,
                     &msg_health_desc, &h, 1000, d, sizeof(d)) == GP_EOK && h.pg == MSG_HEALTH_PG_UP &&
             h.redis == MSG_HEALTH_REDIS_UP;
        gp_msg_clear(&msg_health_desc, &h);
        if (!up)
            usleep(100000);
    }
    T_OKM(up, "registry healthy with NATS, Redis and PostgreSQL up");
    ev_timer_init(&hb, beat, 0, HB_MS / 1000.0);
    ev_timer_start(loop, &hb);
    test_admin();
    test_register();
    test_ghost();
    test_live();
    test_modes_and_history();
    test_contact();
    test_quarantine();
    test_reseed_retry();
    test_reseed_lock_expiry();
    test_hb_reencoded();
    test_capacity_and_delete();
    test_pg_outage();
    test_site_move();
    test_register_live_write();
    test_forget_retry();
    test_clock_skew();
    test_register_delete_race();
    test_out_of_order(pid);
    test_skewed_writer(pid);
    test_stop_flush(pid);                     /* stops the registry */
    ev_timer_stop(loop, &hb);
    gp_bus_sub_free(sub);
    gp_bus_sub_free(isub);
    gp_bus_free(bus);
    gp_lib_close();
    return T_DONE();
}
