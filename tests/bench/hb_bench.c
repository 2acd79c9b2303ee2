/* hb_bench.c -- one gridpool-registry absorbing the heartbeats of 100,000
 * simulated nodes (8 GPUs of full telemetry each), next to redis-benchmark
 * running the same per-heartbeat command (EVALSHA of the registry's hb
 * script) against the same redis-server in the same run.
 *
 *   - the registry runs as a child (--http-port fixed, --heartbeat-ms 5000);
 *   - a publisher thread with its own raw cnats connection sends one
 *     pre-encoded heartbeat (gp_msg_encode) per node on
 *     gp.node.<site>.<node>.hb (sites of 3 nodes), round after round,
 *     never more than BACKLOG ahead of what the registry has accounted for
 *     (gp_registry_heartbeats_total + gp_bus_dropped_total +
 *     gp_request_rejected_total + failures of the hb route, polled from
 *     its /metrics by the main thread);
 *   - round 1 makes every node live (each is new: a state transition,
 *     published and queued for PostgreSQL, per node) and is reported on
 *     its own; the steady figure is over the next 3 rounds (300,000
 *     beats) or 60 s, whichever comes first;
 *   - VmRSS of the registry before the first beat and once all 100,000
 *     nodes are live gives bytes per node (an upper bound: the registry
 *     keeps nothing per node in memory, and the growth follows the backlog,
 *     ~90 bytes/node with a 4,000-beat backlog against ~450 with 20,000);
 *   - the reference: redis-benchmark -n 200000 -c 8 -P 16 -r 100000
 *     EVALSHA <sha of the hb script> with a payload-sized blob, run after
 *     the registry has stopped so they do not share the CPUs.
 *
 * Stranded beats: sent, delivered by NATS, but never handed to the
 * registry's handler (sent - handled - shed - dropped - failed).  A bus bug
 * once left thousands of them in the inbox after a burst (fixed in bus.c,
 * covered by bus_test); a non-zero figure here means the count was read
 * while beats were still in flight, or the bug is back.
 *
 * The Lua text is the registry's own (services/registry/scripts.h); as a
 * check, the bench asks Redis with SCRIPT EXISTS whether the registry
 * loaded a script with the same SHA1 (hb_script_match=1).
 *
 * Output: key=value lines (see bench.h). */
#include <hiredis/hiredis.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>

#include "bench.h"
#include "gp/buf.h"
#include "gp/limits.h"
#include "../../services/registry/scripts.h"

#define NODES          100000
#define PER_SITE       3
#define BACKLOG        20000
#define STEADY_ROUNDS  3
#define ROUND1_MAX_S   45.0       /* cap on round 1 */
#define STEADY_MAX_S   60.0       /* cap on the steady rounds */
#define POLL_S         0.02
#define DRAIN_IDLE_S   3.0        /* give up waiting after this long without progress */

static char          *payloads;           /* NODES payloads, back to back */
static size_t         poff[NODES + 1];
static char         (*subjects)[64];
static natsConnection *pubnc;

static _Atomic long long sent;            /* by the publisher */
static _Atomic long long accounted;       /* by the poller */
static atomic_bool       stop_pub;
static const long long   target = (long long)NODES * (1 + STEADY_ROUNDS);
static _Atomic int       pub_errors;

static void *
publisher(void *arg)
{
    long long i = 0;

    (void)arg;
    while (!atomic_load(&stop_pub)) {
        long long s = atomic_load(&sent);

        if (s >= target || s - atomic_load(&accounted) >= BACKLOG) {
            usleep(200);
            continue;
        }
        if (natsConnection_Publish(pubnc, subjects[i], payloads + poff[i],
                                   (int)(poff[i + 1] - poff[i])) != NATS_OK)
            atomic_fetch_add(&pub_errors, 1);
        atomic_fetch_add(&sent, 1);
        if (++i == NODES)
            i = 0;
    }
    return NULL;
}

typedef struct regm {
    double hb, dropped, rejected, failed, bad, shed;
    double done;                  /* EVALSHAs Redis has run since the start (the beats, and
                                   * the registry's sweep: one a second) */
} regm;

static redisContext *rpoll;       /* the poller's own Redis connection */
static double        evalsha0;

/* "field:value" of INFO section, as a number, or -1. */
static double
redis_info(redisContext *c, const char *section, const char *field)
{
    redisReply *r = redisCommand(c, "INFO %s", section);
    double      v = -1;

    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, field);

        if (p != NULL)
            v = atof(p + strlen(field));
    }
    freeReplyObject(r);
    return v;
}

static double
evalsha_calls(void)
{
    double v = redis_info(rpoll, "commandstats", "cmdstat_evalsha:calls=");

    return v < 0 ? 0 : v;
}


static bool
poll_metrics(int port, regm *m)
{
    char *body = NULL;
    bool  ok = b_http_get(port, "/metrics", &body) == 200;

    if (ok) {
        m->hb = b_metric(body, "gp_registry_heartbeats_total");
        m->dropped = b_metric(body, "gp_bus_dropped_total");
        m->rejected = b_metric(body, "gp_request_rejected_total");
        m->failed = b_metric(body, "gp_request_failures_total{route=\"gp.node.*.*.hb\"}");
        m->bad = b_metric(body, "gp_registry_heartbeat_write_failures_total");
        m->shed = b_metric(body, "gp_registry_heartbeats_shed_total");
        if (m->shed < 0)
            m->shed = 0;
        if (m->failed < 0)
            m->failed = 0;
        if (m->rejected < 0)
            m->rejected = 0;
        if (m->dropped < 0)
            m->dropped = 0;
        if (m->bad < 0)
            m->bad = 0;
        m->done = evalsha_calls() - evalsha0;
    }
    free(body);
    return ok && m->hb >= 0;
}

/* Beats whose fate is known: run by Redis, or dropped, refused, failed. */
static long long
acc_of(const regm *m)
{
    return (long long)(m->done + m->dropped + m->rejected + m->failed + m->bad);
}

/* Polls until Redis has run goal beats, the deadline passes, or nothing
 * moved for DRAIN_IDLE_S (the registry counted nothing new and Redis ran no
 * more than the sweep's one EVALSHA a second); returns the time it stopped. */
static double
wait_done(int port, double goal, double deadline, regm *m)
{
    double t_move = b_now(), last_note = t_move, done_note = -1;
    double last_hb = -1, last_done = -1;

    for (;;) {
        double t = b_now();

        if (poll_metrics(port, m)) {
            atomic_store(&accounted, acc_of(m));
            if (done_note < 0)
                done_note = m->done;
            if (t - last_note >= 5) {          /* progress, for the curious */
                b_note("hb: %.0f recorded, %.0f/s over the last %.1f s (sent %lld, "
                       "registry counted %.0f)", m->done,
                       (m->done - done_note) / (t - last_note), t - last_note,
                       atomic_load(&sent), m->hb);
                last_note = t;
                done_note = m->done;
            }
            if (m->done >= goal)
                return t;
            if (m->hb != last_hb || m->done - last_done >= 5) {
                last_hb = m->hb;
                last_done = m->done;
                t_move = t;
            }
        }
        if (t >= deadline || t - t_move > DRAIN_IDLE_S)
            return t;
        usleep((useconds_t)(POLL_S * 1e6));
    }
}

static long long
redis_int(redisContext *c, const char *fmt, const char *arg)
{
    redisReply *r = redisCommand(c, fmt, arg);
    long long   v = -1;

    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    freeReplyObject(r);
    return v;
}

/* redis-benchmark with the registry's command; requests per second or -1. */
static double
redis_reference(const char *host, const char *port, const char *sha, size_t blob_n)
{
    size_t cap = blob_n + 1024, n;
    char  *cmd = malloc(cap), *blob = malloc(blob_n + 1);
    double rps = -1;
    FILE  *f;

    memset(blob, 'x', blob_n);
    blob[blob_n] = '\0';
    n = (size_t)snprintf(cmd, cap,
                         "redis-benchmark -h %s -p %s -n 200000 -c 8 -P 16 -q -r 100000 "
                         "EVALSHA %s 4 gp:{0}:bench:node:__rand_int__ gp:{0}:bench:seen "
                         "gp:{0}:bench:rtt gp:{0}:bench:seeded %s s1 n__rand_int__ 1.0 '5000 11000 30000 4 10500' 0 0 600000 600000 2>&1",
                         host, port, sha, blob);
    free(blob);
    if (n >= cap || (f = popen(cmd, "r")) == NULL) {
        free(cmd);
        return -1;
    }
    /* -q prints progress updates ending in \r (each repeating the command
     * with its blob) and then "<cmd>: N requests per second, ...": read it
     * all, take the last figure. */
    {
        size_t bcap = 1 << 20, bn = 0, k;
        char  *all = malloc(bcap), *p, *hit = NULL;

        while (all != NULL && (k = fread(all + bn, 1, bcap - bn - 1, f)) > 0) {
            bn += k;
            if (bn + 1 >= bcap && bcap < ((size_t)64 << 20)) {
                char *nb = realloc(all, bcap *= 2);

                if (nb == NULL)
                    break;
                all = nb;
            } else if (bn + 1 >= bcap) {
                bn = 0;                        /* keep only the tail */
            }
        }
        if (all != NULL) {
            all[bn] = '\0';
            for (p = all; (p = strstr(p, " requests per second")) != NULL; p++)
                hit = p;
            if (hit != NULL) {
                char *q = hit;

                while (q > all && (q[-1] == '.' || (q[-1] >= '0' && q[-1] <= '9')))
                    q--;
                rps = atof(q);
            } else {
                b_note("redis-benchmark: no figure in: %.300s", bn > 300 ? all + bn - 300 : all);
            }
        }
        free(all);
    }
    pclose(f);
    free(cmd);
    return rps;
}

/* CPU seconds (user + system) of the processes on the heartbeat path. */
#define CPU_NPROC 4
static const char *const cpu_names[CPU_NPROC] = {"registry", "redis", "nats", "publisher"};

typedef struct cpu_snap {
    double s[CPU_NPROC];
} cpu_snap;

static void
cpu_take(cpu_snap *c, pid_t reg, const char *stack)
{
    c->s[0] = b_cpu_of(reg);
    c->s[1] = b_cpu_of(b_pid_file(stack, "redis.pid"));
    c->s[2] = b_cpu_of(b_pid_file(stack, "nats.pid"));
    c->s[3] = b_cpu_of(getpid());        /* the publisher, the poller and cnats */
}

/* GP_BENCH_PERF=FILE: perf record of the registry during the steady rounds. */
static void
perf_start(pid_t reg)
{
    const char *out = getenv("GP_BENCH_PERF");
    char        pid[16];
    const char *argv[16];
    int         n = 0;

    if (out == NULL || *out == '\0')
        return;
    snprintf(pid, sizeof(pid), "%d", (int)reg);
    argv[n++] = "perf";
    argv[n++] = "record";
    argv[n++] = "-q";
    argv[n++] = "-F";
    argv[n++] = "999";
    argv[n++] = "-g";
    argv[n++] = "-p";
    argv[n++] = pid;
    argv[n++] = "-o";
    argv[n++] = out;
    argv[n++] = "--";
    argv[n++] = "sleep";
    argv[n++] = "8";
    argv[n] = NULL;
    b_spawn((char *const *)argv, "/dev/null");
    b_note("hb: perf record of the registry (8 s) into %s", out);
}

int
main(void)
{
    const char   *build = b_env("GP_BUILD"), *stack = b_env("GP_STACK_DIR");
    const char   *url = b_env("GP_NATS_URL"), *rhost = b_env("GP_REDIS_HOST");
    const char   *rport = b_env("GP_REDIS_PORT");
    redisContext *rc = NULL;
    redisReply   *rep = NULL;
    pthread_t     th;
    bool          th_started = false, match = false;
    gp_buf        b;
    char          sha[41] = "", bin[512], port[16], logp[512];
    const char   *argv[12];
    int           http_port = b_free_port(), exit_code = 1;
    pid_t         reg = -1;
    regm          m1 = {0}, m2 = {0};
    long long     rss0, rss1, rss2, hb_bytes, live;
    double        mem0, mem1, t0, t1, t2, deadline, redis_rps, steady, round1;
    cpu_snap      c1, c2;

    /* ---- payloads: one per node, encoded by the codec ---- */
    subjects = calloc(NODES, sizeof(*subjects));
    gp_buf_init(&b, (size_t)NODES * 4096);
    for (int i = 0; i < NODES; i++) {
        msg_heartbeat hb;
        char          site[24], node[24];

        snprintf(site, sizeof(site), "s%d", i / PER_SITE);
        snprintf(node, sizeof(node), "n%d", i);
        snprintf(subjects[i], sizeof(subjects[i]), "gp.node.%s.%s.hb", site, node);
        b_heartbeat(&hb, site, node, (uint64_t)i);
        poff[i] = b.n;
        if (gp_msg_encode(&msg_heartbeat_desc, &hb, &b) != GP_EOK) {
            b_note("hb: encode failed");
            return 1;
        }
        gp_msg_clear(&msg_heartbeat_desc, &hb);
    }
    poff[NODES] = b.n;
    payloads = b.p;
    hb_bytes = (long long)(b.n / NODES);
    b_note("hb: %d payloads, %lld bytes each on average", NODES, hb_bytes);

    /* ---- redis: the script's SHA1 and the starting figures ---- */
    rc = redisConnect(rhost, atoi(rport));
    if (rc == NULL || rc->err) {
        b_note("hb: redis not reachable");
        goto out;
    }
    /* SHA1 of our copy, computed by Redis without loading it */
    rep = redisCommand(rc, "EVAL %s 0 %s", "return redis.sha1hex(ARGV[1])", registry_hb_lua);
    if (rep != NULL && rep->type == REDIS_REPLY_STRING && rep->len == 40)
        memcpy(sha, rep->str, 41);
    freeReplyObject(rep);
    freeReplyObject(redisCommand(rc, "SCRIPT FLUSH"));    /* a private, fresh Redis */
    mem0 = redis_info(rc, "memory", "used_memory:");

    /* ---- the registry ---- */
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-registry", build);
    snprintf(port, sizeof(port), "%d", http_port);
    snprintf(logp, sizeof(logp), "%s/registry.log", stack);
    argv[0] = bin;
    argv[1] = "--http-port";
    argv[2] = port;
    argv[3] = "--heartbeat-ms";
    argv[4] = "5000";
    argv[5] = NULL;
    reg = b_spawn((char *const *)argv, logp);
    if (!b_wait_healthy(reg, http_port, 30)) {
        b_note("hb: registry not healthy within 30 s (log: %s)", logp);
        goto out;
    }
    /* The registry loads its scripts from its cron (every sweep-ms): once it
     * has, a script with the SHA1 of our copy exists only if the texts match. */
    for (t0 = b_now(); b_now() - t0 < 10; usleep(100000)) {
        rep = redisCommand(rc, "SCRIPT EXISTS %s", sha);
        match = rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
                rep->element[0]->integer == 1;
        freeReplyObject(rep);
        if (match)
            break;
    }
    if (!match)
        b_note("hb: the registry's hb script is not the copy in hb_bench.c: update the copy");
    rep = redisCommand(rc, "SCRIPT LOAD %s", registry_hb_lua);   /* for redis-benchmark */
    freeReplyObject(rep);
    /* The registry takes beats only of nodes in its inventory (the 'reg'
     * mark that registration sets): mark the bench's nodes, and the keys
     * redis-benchmark's -r 100000 names, so both run the full script. */
    for (int i = 0; i < NODES; i++) {
        char site[32], node[32], key[REGISTRY_KEY_LEN];

        snprintf(site, sizeof(site), "s%d", i / PER_SITE);
        snprintf(node, sizeof(node), "n%d", i);
        registry_node_key(key, registry_shard(site), node);
        redisAppendCommand(rc, "HSET %s reg 1", key);
        redisAppendCommand(rc, "HSET gp:{0}:bench:node:%012d reg 1", i);
    }
    for (int i = 0; i < 2 * NODES; i++) {
        if (redisGetReply(rc, (void **)&rep) == REDIS_OK)
            freeReplyObject(rep);
    }
    rpoll = redisConnect(rhost, atoi(rport));
    if (rpoll == NULL || rpoll->err)
        goto out;
    evalsha0 = evalsha_calls();
    sleep(2);                                  /* > sweep-ms: the registry's cron has run */
    rss0 = b_rss(reg);

    if (natsConnection_ConnectTo(&pubnc, url) != NATS_OK) {
        b_note("hb: publisher could not connect");
        goto out;
    }
    if (pthread_create(&th, NULL, publisher, NULL) != 0)
        goto out;
    th_started = true;

    /* ---- round 1: every node new ---- */
    t0 = b_now();
    t1 = wait_done(http_port, NODES, t0 + ROUND1_MAX_S, &m1);
    round1 = m1.done / (t1 - t0);
    rss1 = b_rss(reg);
    b_note("hb: round 1 (new nodes): %.0f beats in %.2f s = %.0f/s", m1.done, t1 - t0, round1);
    cpu_take(&c1, reg, stack);
    perf_start(reg);

    /* ---- steady rounds (the publisher never paused) ---- */
    deadline = t1 + STEADY_MAX_S;
    t2 = wait_done(http_port, (double)target, deadline, &m2);
    cpu_take(&c2, reg, stack);
    atomic_store(&stop_pub, true);
    pthread_join(th, NULL);
    th_started = false;
    steady = (m2.done - m1.done) / (t2 - t1);
    b_note("hb: steady: %.0f beats in %.2f s = %.0f/s", m2.done - m1.done, t2 - t1, steady);
    /* whatever is still queued: let it land before counting Redis */
    wait_done(http_port, (double)atomic_load(&sent), b_now() + 10, &m2);
    rss2 = b_rss(reg);
    sleep(1);                                  /* the last EVALSHAs answered */
    live = 0;
    for (unsigned sh = 0; sh < REGISTRY_SHARDS; sh++) {
        char key[REGISTRY_KEY_LEN];

        registry_seen_key(key, sh);
        live += redis_int(rc, "ZCARD %s", key);
    }
    mem1 = redis_info(rc, "memory", "used_memory:");

    b_kv("hb_nodes", NODES);
    b_kv("hb_script_match", match);
    b_kv("hb_payload_bytes", (double)hb_bytes);
    b_kv("hb_sent", (double)atomic_load(&sent));
    b_kv("hb_recorded", m2.done);
    b_kv("hb_registry_counted", m2.hb);
    b_kv("hb_round1_per_s", (double)(long long)round1);
    b_kv("hb_steady_per_s", (double)(long long)steady);
    b_kv("hb_steady_seconds", t2 - t1);
    b_kv("hb_dropped", m2.dropped + m2.rejected);
    b_kv("hb_failed", m2.failed);
    b_kv("hb_write_failures", m2.bad);
    /* sent, delivered by NATS, but never handed to the registry's handler
     * once the publisher stopped: see "stranded" in the header comment */
    b_kv("hb_shed", m2.shed);
    b_kv("hb_stranded", (double)(atomic_load(&sent) -
                                 (long long)(m2.hb + m2.shed + m2.dropped + m2.rejected + m2.failed)));
    /* (Redis's EVALSHA count also holds the sweep's, about one a second) */
    b_kv("hb_lost", (double)(atomic_load(&sent) > acc_of(&m2) ? atomic_load(&sent) - acc_of(&m2) : 0));
    b_kv("hb_publish_errors", atomic_load(&pub_errors));
    for (int k = 0; k < CPU_NPROC; k++) {
        char   key[64];
        double beats = m2.done - m1.done;

        snprintf(key, sizeof(key), "hb_cpu_us_per_beat_%s", cpu_names[k]);
        b_kv(key, beats > 0 ? (double)(long long)((c2.s[k] - c1.s[k]) * 1e7 / beats) / 10 : -1);
    }
    b_kv("hb_live_nodes", (double)live);
    b_kv("hb_rss_before_bytes", (double)rss0);
    b_kv("hb_rss_live_bytes", (double)rss1);
    b_kv("hb_rss_end_bytes", (double)rss2);
    b_kv("hb_rss_bytes_per_node", (double)((rss1 - rss0) / NODES));
    b_kv("hb_rss_end_bytes_per_node", (double)((rss2 - rss0) / NODES));
    b_kv("hb_redis_bytes_per_node", (double)(long long)((mem1 - mem0) / NODES));

    b_stop(reg, 15);
    reg = -1;

    /* ---- the reference: the same command, straight into Redis ---- */
    redis_rps = redis_reference(rhost, rport, sha, (size_t)hb_bytes);
    if (redis_rps > 0) {
        b_kv("hb_redis_ref_per_s", (double)(long long)redis_rps);
        b_kv("hb_ratio", steady / redis_rps);
    } else {
        b_note("hb: redis-benchmark gave no figure");
    }
    exit_code = 0;
out:
    if (th_started) {
        atomic_store(&stop_pub, true);
        pthread_join(th, NULL);
    }
    if (reg > 0)
        b_stop(reg, 15);
    natsConnection_Destroy(pubnc);
    nats_Close();
    if (rc != NULL)
        redisFree(rc);
    if (rpoll != NULL)
        redisFree(rpoll);
    gp_buf_fini(&b);
    free(subjects);
    return exit_code;
}
