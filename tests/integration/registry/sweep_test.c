/* sweep_test.c -- the stale sweep keeps up with a large fleet:
 * 20,000 nodes whose last beat is long past, written to Redis directly in
 * the registry's key layout (all of one site: one shard, the worst case for
 * the per-shard batches), are all found stale within one sweep interval
 * of the registry's first tick after they appear (bound: two intervals). */
#include <hiredis/hiredis.h>

#include "msg_gen.h"
#include "test_stack.h"
#include "../../../services/registry/scripts.h"

#define NODES    20000
#define SWEEP_MS 2000

static struct ev_loop *loop;
static gp_bus         *bus;
static int             http_port;

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

static void
wait_s(double s)
{
    int never = 0;

    tl_run_until(loop, &never, s);
}

int
main(void)
{
    gp_bus_opts        bo = {.url = tl_env("GP_NATS_URL"), .name = "sweep-test"};
    char               port[16], sweep[16], bin[512], seen[REGISTRY_KEY_LEN], key[REGISTRY_KEY_LEN];
    const char        *argv[] = {bin, "--http-port", port, "--heartbeat-ms", "1000",
                                 "--sweep-ms", sweep, NULL};
    msg_health_request hq = {0};
    msg_health         h = {0};
    char               d[GP_ERRBUF_LEN];
    redisContext      *c;
    redisReply        *rep;
    unsigned           shard = registry_shard("s1");
    long long          old = (long long)time(NULL) * 1000 - 60000, card = -1;
    double             t0, t_seeded, t_done = -1, tr0, tr = 0;
    int                up = 0, stale = 0;
    pid_t              pid;

    loop = ev_default_loop(0);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    http_port = tl_free_port();
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-registry", tl_env("GP_BUILD"));
    snprintf(port, sizeof(port), "%d", http_port);
    snprintf(sweep, sizeof(sweep), "%d", SWEEP_MS);
    pid = tl_spawn((char *const *)argv);
    for (t0 = tl_now(); !up && tl_now() - t0 < 20;) {
        up = tl_call(loop, bus, "gp.int.health.registry", &msg_health_request_desc, &hq,
                     &msg_health_desc, &h, 1000, d, sizeof(d)) == GP_EOK && h.pg == MSG_HEALTH_PG_UP &&
             h.redis == MSG_HEALTH_REDIS_UP;
        gp_msg_clear(&msg_health_desc, &h);
        if (!up)
            usleep(100000);
    }
    T_OKM(up, "registry healthy");
    wait_s(SWEEP_MS * 1.5 / 1000);                 /* past its first reseed */

    c = redisConnect(tl_env("GP_REDIS_HOST"), atoi(tl_env("GP_REDIS_PORT")));
    T_OK(c != NULL && c->err == 0);
    registry_seen_key(seen, shard);
    /* Read before the seeding: a sweep that ticks while the pipeline is
     * still being written counts the first nodes before t_seeded. */
    tr0 = metric("gp_registry_node_transitions_total");
    for (int i = 0; i < NODES; i++) {
        char id[32];

        snprintf(id, sizeof(id), "sw%05d", i);
        registry_node_key(key, shard, id);
        redisAppendCommand(c, "HSET %s state healthy live healthy site s1 reg 1 seen %lld lb %lld lc %lld",
                           key, old, old, old);
        redisAppendCommand(c, "ZADD %s %lld %s", seen, old, id);
    }
    for (int i = 0; i < 2 * NODES; i++) {
        if (redisGetReply(c, (void **)&rep) == REDIS_OK)
            freeReplyObject(rep);
    }
    t_seeded = tl_now();
    /* The first tick after the seeding comes within one interval; all of
     * them must be found by it, so by two intervals at the latest. */
    while (tl_now() - t_seeded < 2.0 * SWEEP_MS / 1000 + 1.0) {
        wait_s(0.1);
        tr = metric("gp_registry_node_transitions_total") - tr0;
        if (tr >= 2 * NODES) {                     /* each: suspect, then lost */
            t_done = tl_now() - t_seeded;
            break;
        }
    }
    printf("# %d silent nodes found lost in %.2f s (sweep interval %.1f s; %.0f transitions)\n", NODES,
           t_done, SWEEP_MS / 1000.0, tr);
    T_OKM(t_done >= 0 && t_done <= 2.0 * SWEEP_MS / 1000 + 1.0,
          "all %d found suspect and lost within one sweep interval of the tick (%.2f s, %.0f found)", NODES, t_done, tr);
    rep = redisCommand(c, "ZCARD %s", seen);
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
        card = rep->integer;
    freeReplyObject(rep);
    T_OKM(card == 0, "the shard's index is empty (%lld left)", card);
    for (int i = 0; i < NODES; i += 997) {
        char id[32];

        snprintf(id, sizeof(id), "sw%05d", i);
        registry_node_key(key, shard, id);
        rep = redisCommand(c, "HGET %s state", key);
        stale += rep != NULL && rep->type == REDIS_REPLY_STRING && strcmp(rep->str, "lost") == 0;
        freeReplyObject(rep);
    }
    T_OKM(stale == (NODES + 996) / 997, "sampled nodes are lost in Redis (%d)", stale);
    redisFree(c);
    kill(pid, SIGTERM);
    T_EQ_INT(tl_wait_exit(pid, 15), 0);
    gp_bus_free(bus);
    gp_lib_close();
    return T_DONE();
}
