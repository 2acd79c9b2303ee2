/* reserve_test.c -- the scheduler's GPU reservations
 * (services/scheduler/reserve.h) against a real redis-server, or against a
 * 3-master Redis Cluster when GP_REDIS_CLUSTER=true (reserve_cluster_test.sh):
 * every command of the test itself also goes through gp_kv, so it runs
 * unchanged in both modes.
 *
 *   - all or nothing: a 3-node booking refused for one taken GPU books nothing;
 *   - idempotent: booking again what the same (job, attempt) holds is OK,
 *     the first booking's time kept;
 *   - a stale, draining, unregistered or unknown node is refused, and
 *     nothing else of that call is booked;
 *   - release fencing: attempt 1 cannot free attempt 2's GPUs; idempotent;
 *   - two connections racing thousands of random bookings on the same
 *     nodes: no GPU granted twice, every granted GPU holds its grant;
 *   - reconcile: an old orphan removed, a fresh one kept within the grace,
 *     a backed one kept, a stale holder replaced by the truth's;
 *   - the grace counts back from the truth's read: a booking made after
 *     the read is kept however long the pass takes, one booked a grace
 *     before it goes;
 *   - after FLUSHALL reconcile rebuilds the truth, never overwriting a
 *     different holder (a conflict);
 *   - a shard without its epoch (Redis lost its data, not rebuilt yet)
 *     books nothing: ERROR (UNAVAIL), the stale callback names the shard.
 * The test writes every shard's epoch itself after each FLUSHALL
 * (flush()), as the scheduler's rebuild would (epoch.c). */
#include <hiredis/hiredis.h>
#include <stdarg.h>

#include "../../../services/scheduler/reserve.h"
#include "../../../services/scheduler/reserve_scripts.h"
#include "gp/kv.h"
#include "gp/kvscript.h"
#include "gp/metrics.h"
#include "gp/shard.h"
#include "test_stack.h"

static struct ev_loop *loop;
static gp_kv          *kv1, *kv2;
static sched_reserve  *r1, *r2;
static gp_metrics     *metrics;

/* ---- synchronous helpers over gp_kv (cluster routing included) ---------------------- */

typedef struct sreply {
    int       done;
    gp_err    err;
    int       type;
    long long integer;
    char      str[256];
    size_t    n;
    char      el[128][128];
} sreply;

static sreply SR;

static void
sr_cb(void *arg, const redisReply *rep, gp_err err)
{
    sreply *s = arg;

    s->err = err;
    s->done = 1;
    if (err != GP_EOK)
        return;
    s->type = rep->type;
    s->integer = rep->integer;
    if (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_ERROR ||
        rep->type == REDIS_REPLY_STATUS)
        snprintf(s->str, sizeof(s->str), "%s", rep->str);
    for (size_t i = 0; rep->type == REDIS_REPLY_ARRAY && i < rep->elements && i < 128; i++) {
        if (rep->element[i]->type == REDIS_REPLY_STRING)
            snprintf(s->el[i], sizeof(s->el[i]), "%s", rep->element[i]->str);
        else
            snprintf(s->el[i], sizeof(s->el[i]), "%lld", rep->element[i]->integer);
        s->n = i + 1;
    }
}

/* One command, words separated by spaces (no value here has one). */
static sreply *
kvs(const char *fmt, ...)
{
    char        buf[1024], *save = NULL;
    const char *argv[32];
    int         argc = 0;
    va_list     ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    for (char *w = strtok_r(buf, " ", &save); w != NULL && argc < 32; w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    memset(&SR, 0, sizeof(SR));
    if (gp_kv_cmd(kv1, sr_cb, &SR, argc, argv, NULL) != GP_EOK)
        SR.err = GP_EUNAVAIL;
    else
        tl_run_until(loop, &SR.done, 10);
    return &SR;
}

/* FLUSHALL, then every shard's epoch written: a whole, empty Redis. */
static void
flush(void)
{
    char key[SCHED_RES_KEY_LEN];

    kvs("FLUSHALL");
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        sched_epoch_key(key, sh);
        kvs("SET %s test", key);
    }
}

static uint64_t
redis_ms(void)
{
    sreply *s = kvs("TIME");

    return s->n == 2 ? strtoull(s->el[0], NULL, 10) * 1000 + strtoull(s->el[1], NULL, 10) / 1000 : 0;
}

/* The registry's live hash of a node, written by hand: state, and the reg
 * mark unless reg is false. */
static void
live_node(const char *site, const char *node, const char *state, bool reg)
{
    char key[SCHED_RES_KEY_LEN];

    sched_res_live_key(key, gp_shard_of(site), node);
    kvs("DEL %s", key);
    if (state != NULL)
        kvs("HSET %s state %s site %s", key, state, site);
    if (reg)
        kvs("HSET %s reg 1", key);
}

/* The stored value of one GPU ("" when free). */
static const char *
field(const char *site, const char *node, int gpu)
{
    char key[SCHED_RES_KEY_LEN];

    sched_res_key(key, gp_shard_of(site), node);
    return kvs("HGET %s %d", key, gpu)->str;
}

static long long
hlen(const char *site, const char *node)
{
    char key[SCHED_RES_KEY_LEN];

    sched_res_key(key, gp_shard_of(site), node);
    return kvs("HLEN %s", key)->integer;
}

static bool
indexed(const char *site, const char *node)
{
    char key[SCHED_RES_KEY_LEN];

    sched_res_index_key(key, gp_shard_of(site));
    return kvs("SISMEMBER %s %s", key, node)->integer == 1;
}

typedef struct res_wait {
    int              done;
    sched_res_result res;
} res_wait;

static void
res_cb(void *arg, const sched_res_result *res)
{
    res_wait *w = arg;

    w->res = *res;
    w->done = 1;
}

static sched_res_result
book(sched_reserve *r, const char *site, const char *job, uint32_t att, const sched_res_node *n,
     size_t nn)
{
    res_wait w = {0};

    w.res.status = SCHED_RES_ERROR;
    w.res.err = sched_reserve_book(r, site, job, att, n, nn, res_cb, &w);
    if (w.res.err == GP_EOK)
        tl_run_until(loop, &w.done, 10);
    return w.res;
}

static sched_res_result
release(const char *site, const char *job, uint32_t att, const sched_res_node *n, size_t nn)
{
    res_wait w = {0};

    w.res.status = SCHED_RES_ERROR;
    w.res.err = sched_reserve_release(r1, site, job, att, n, nn, res_cb, &w);
    if (w.res.err == GP_EOK)
        tl_run_until(loop, &w.done, 10);
    return w.res;
}

typedef struct read_wait {
    int             done;
    gp_err          err;
    size_t          n;
    sched_res_entry e[256];
} read_wait;

static void
read_cb(void *arg, gp_err err, const sched_res_entry *e, size_t n)
{
    read_wait *w = arg;

    w->err = err;
    w->n = n < 256 ? n : 256;
    memcpy(w->e, e, w->n * sizeof(*e));
    w->done = 1;
}

typedef struct recon_wait {
    int                  done;
    sched_res_reconciled res;
} recon_wait;

static void
recon_cb(void *arg, const sched_res_reconciled *res)
{
    recon_wait *w = arg;

    w->res = *res;
    w->done = 1;
}

/* The truth read at truth_ms on Redis's clock. */
static sched_res_reconciled
reconcile_at(const sched_res_live *live, size_t n, uint64_t truth_ms, uint64_t grace_ms)
{
    recon_wait w = {0};
    gp_err     e = sched_reserve_reconcile(r1, live, n, truth_ms, grace_ms, recon_cb, &w);

    w.res.err = e;
    if (e == GP_EOK)
        tl_run_until(loop, &w.done, 30);
    T_OKM(e == GP_EOK && w.done, "reconcile answered (%s)", gp_err_name(e));
    return w.res;
}

/* The truth read just now. */
static sched_res_reconciled
reconcile(const sched_res_live *live, size_t n, uint64_t grace_ms)
{
    return reconcile_at(live, n, redis_ms(), grace_ms);
}

#define M(...) mask_of((int[]){__VA_ARGS__, -1})
static uint64_t
mask_of(const int *g)
{
    uint64_t m = 0;

    for (; *g >= 0; g++)
        m |= UINT64_C(1) << *g;
    return m;
}

/* ---- the cases ----------------------------------------------------------------------- */

static void
test_all_or_nothing(void)
{
    const char      *s = "aon-site";
    sched_res_node   one[1] = {{"aon-n2", M(2)}};
    sched_res_node   three[3] = {{"aon-n1", M(0, 1)}, {"aon-n2", M(1, 2)}, {"aon-n3", M(0)}};
    sched_res_result r;

    live_node(s, "aon-n1", "healthy", true);
    live_node(s, "aon-n2", "healthy", true);
    live_node(s, "aon-n3", "healthy", true);
    r = book(r1, s, "jobA", 1, one, 1);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 1, "jobA:1 books aon-n2 GPU 2");
    r = book(r2, s, "jobB", 1, three, 3);
    T_OKM(r.status == SCHED_RES_BUSY && strcmp(r.node, "aon-n2") == 0 && r.gpu == 2 &&
              strcmp(r.holder_job, "jobA") == 0 && r.holder_attempt == 1 && r.holder_ms > 0,
          "a 3-node booking with one taken GPU is refused BUSY, naming node, GPU and holder "
          "(%d %s gpu %d held by %s:%u)", r.status, r.node, r.gpu, r.holder_job, r.holder_attempt);
    T_OKM(hlen(s, "aon-n1") == 0 && hlen(s, "aon-n3") == 0 && hlen(s, "aon-n2") == 1 &&
              strncmp(field(s, "aon-n2", 2), "jobA:1:", 7) == 0 && field(s, "aon-n2", 1)[0] == '\0',
          "nothing of the refused booking was written");
    T_OKM(!indexed(s, "aon-n1") && indexed(s, "aon-n2") && !indexed(s, "aon-n3"),
          "only the booked node is in the shard's index");
    {
        read_wait w = {0};

        T_OK(sched_reserve_read(r2, s, "aon-n2", read_cb, &w) == GP_EOK);
        tl_run_until(loop, &w.done, 10);
        T_OKM(w.err == GP_EOK && w.n == 1 && w.e[0].gpu == 2 && strcmp(w.e[0].job, "jobA") == 0 &&
                  w.e[0].attempt == 1,
              "read gives the holder of the node's GPU (to refresh the free mask)");
    }
    three[1].gpus = M(1);
    r = book(r2, s, "jobB", 1, three, 3);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 4, "without the taken GPU it books all 4 (%u)",
          r.gpus);
}

static void
test_idempotent(void)
{
    const char      *s = "idem-site";
    sched_res_node   n[2] = {{"idem-n1", M(0, 5)}, {"idem-n2", M(7)}};
    sched_res_result r;
    char             before[128];

    live_node(s, "idem-n1", "healthy", true);
    live_node(s, "idem-n2", "healthy", true);
    r = book(r1, s, "jobI", 4, n, 2);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 3, "booked 3 GPUs");
    snprintf(before, sizeof(before), "%s", field(s, "idem-n1", 5));
    usleep(5000);
    r = book(r2, s, "jobI", 4, n, 2);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 0, "the same booking again: OK, nothing new");
    T_OKM(strcmp(field(s, "idem-n1", 5), before) == 0, "the first booking's time is kept (%s)",
          before);
    r = book(r2, s, "jobI", 5, n, 2);
    T_OKM(r.status == SCHED_RES_BUSY && r.holder_attempt == 4,
          "the next attempt of the same job is another holder: BUSY");
}

static void
test_unhealthy(void)
{
    const char *s = "sick-site";
    const struct {
        const char *node, *state;
        bool        reg;
        const char *want;
    } cases[] = {
        {"sick-stale", "stale", true, "stale"},
        {"sick-drain", "draining", true, "draining"},
        {"sick-noreg", "healthy", false, "unregistered"},
        {"sick-none", NULL, false, "unregistered"},
    };

    live_node(s, "sick-ok", "healthy", true);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sched_res_node   n[2] = {{"sick-ok", M(0)}, {cases[i].node, M(1)}};
        sched_res_result r;

        live_node(s, cases[i].node, cases[i].state, cases[i].reg);
        r = book(r1, s, "jobU", 1, n, 2);
        T_OKM(r.status == SCHED_RES_UNHEALTHY && strcmp(r.node, cases[i].node) == 0 &&
                  strcmp(r.state, cases[i].want) == 0,
              "%s refused UNHEALTHY (%s)", cases[i].node, r.state);
        T_OKM(hlen(s, "sick-ok") == 0 && hlen(s, cases[i].node) == 0,
              "... and the healthy node of the same call was not booked");
    }
    {
        sched_res_node twice[2] = {{"sick-ok", M(0)}, {"sick-ok", M(1)}};
        sched_res_node bad[1] = {{"bad id", M(0)}};
        sched_res_node none[1] = {{"sick-ok", 0}};

        T_EQ_INT(sched_reserve_book(r1, s, "j", 1, twice, 2, res_cb, NULL), GP_EINVAL);
        T_EQ_INT(sched_reserve_book(r1, s, "j", 1, bad, 1, res_cb, NULL), GP_EINVAL);
        T_EQ_INT(sched_reserve_book(r1, s, "j", 1, none, 1, res_cb, NULL), GP_EINVAL);
        T_EQ_INT(sched_reserve_book(r1, "a:b", "j", 1, twice, 1, res_cb, NULL), GP_EINVAL);
    }
}

static void
test_release_fencing(void)
{
    const char      *s = "fence-site";
    sched_res_node   n[1] = {{"fence-n1", M(0, 1)}};
    sched_res_node   all[1] = {{"fence-n1", 0}};
    sched_res_result r;

    live_node(s, "fence-n1", "healthy", true);
    r = book(r1, s, "jobF", 2, n, 1);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 2, "attempt 2 holds GPUs 0 and 1");
    r = release(s, "jobF", 1, n, 1);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 0, "attempt 1's release frees nothing");
    r = release(s, "jobF", 1, all, 1);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 0, "... nor does its release of everything");
    T_OKM(hlen(s, "fence-n1") == 2, "attempt 2's GPUs are still booked");
    r = release(s, "jobF", 2, n, 1);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 2, "attempt 2 frees its 2 GPUs");
    T_OKM(hlen(s, "fence-n1") == 0 && !indexed(s, "fence-n1"), "the node left the index");
    r = release(s, "jobF", 2, n, 1);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 0, "releasing again is OK (idempotent)");
}

/* A preempted attempt's GPUs handed over to its preemptor: held for it
 * alone, taken by its booking (which frees the node's rest of the hold),
 * free to anyone once the hold is SCHED_RES_HOLD_MS old; a rebuild from
 * the truth overrides a hold.  Through r2 (no metrics: test_metrics
 * counts r1's calls). */
static sched_res_result
handover(const char *site, const char *job, uint32_t att, const sched_res_node *n, size_t nn,
         const char *heir)
{
    res_wait w = {0};

    w.res.status = SCHED_RES_ERROR;
    w.res.err = sched_reserve_handover(r2, site, job, att, n, nn, heir, res_cb, &w);
    if (w.res.err == GP_EOK)
        tl_run_until(loop, &w.done, 10);
    return w.res;
}

static void
test_handover(void)
{
    const char      *s = "hold-site";
    sched_res_node   v[1] = {{"hold-n1", M(0, 1, 2)}}, all[1] = {{"hold-n1", 0}};
    sched_res_node   g0[1] = {{"hold-n1", M(0)}}, g2[1] = {{"hold-n1", M(2)}};
    sched_res_result r;
    char             key[SCHED_RES_KEY_LEN];

    live_node(s, "hold-n1", "healthy", true);
    r = book(r2, s, "victim", 4, v, 1);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 3, "the victim holds GPUs 0-2");
    T_EQ_INT(sched_reserve_handover(r2, s, "victim", 4, all, 1, "bad id!", res_cb, NULL),
             GP_EINVAL);
    r = handover(s, "victim", 4, all, 1, "pre");
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 3, "3 GPUs handed over (%u)", r.gpus);
    T_OKM(strncmp(field(s, "hold-n1", 1), "pre:0:", 6) == 0, "GPU 1 held for pre: %s",
          field(s, "hold-n1", 1));
    T_OKM(indexed(s, "hold-n1"), "a held node stays in the index");
    r = book(r2, s, "victim", 5, g0, 1);
    T_OKM(r.status == SCHED_RES_BUSY && strcmp(r.holder_job, "pre") == 0 &&
              r.holder_attempt == 0, "the requeued victim cannot take a held GPU");
    r = book(r2, s, "pre", 1, g0, 1);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 1, "the preemptor takes GPU 0");
    T_OKM(hlen(s, "hold-n1") == 1, "its booking freed the rest of the hold (%lld fields)",
          hlen(s, "hold-n1"));
    r = book(r2, s, "victim", 5, g2, 1);
    T_OKM(r.status == SCHED_RES_OK, "so the victim gets GPU 2");
    /* an old hold: free to anyone */
    sched_res_key(key, gp_shard_of(s), "hold-n1");
    kvs("HSET %s 3 other:0:%llu", key, (unsigned long long)(redis_ms() - SCHED_RES_HOLD_MS - 1));
    r = book(r2, s, "late", 1, (sched_res_node[]){{"hold-n1", M(3)}}, 1);
    T_OKM(r.status == SCHED_RES_OK, "a hold past SCHED_RES_HOLD_MS is free");
    kvs("HSET %s 4 other:0:%llu", key, (unsigned long long)redis_ms());
    r = book(r2, s, "late", 1, (sched_res_node[]){{"hold-n1", M(4)}}, 1);
    T_OKM(r.status == SCHED_RES_BUSY, "a fresh hold of another job is not");
    kvs("DEL %s", key);
}

/* ---- the race ---- */

#define RACE_NODES  4
#define RACE_GPUS   8
#define RACE_ROUNDS 80
#define RACE_PER    50

typedef struct race_req {
    int              done;
    sched_res_result res;
    char             job[16];
    sched_res_node   n[2];
    size_t           nn;
} race_req;

static const char *race_node[RACE_NODES] = {"race-n0", "race-n1", "race-n2", "race-n3"};
static int         race_answered;

static void
race_cb(void *arg, const sched_res_result *res)
{
    race_req *q = arg;

    q->res = *res;
    q->done = 1;
    race_answered++;
}

static void
race_pick(race_req *q, int round, int i)
{
    int a = rand() % RACE_NODES;

    snprintf(q->job, sizeof(q->job), "r%d_%d", round % 1000, i % 1000);   /* bounded: fits job[] */
    q->nn = 1 + (size_t)(rand() % 2);
    for (size_t k = 0; k < q->nn; k++) {
        q->n[k].node = race_node[(a + (int)k) % RACE_NODES];
        q->n[k].gpus = 0;
        for (int g = 1 + rand() % 3; g > 0; g--)
            q->n[k].gpus |= UINT64_C(1) << (rand() % RACE_GPUS);
    }
}

/* Checks one round's outcome; returns the number of violations. */
static int
race_check(race_req *q, int nq, int *ok, int *busy)
{
    long long granted = 0, stored = 0;
    int  owner[RACE_NODES][RACE_GPUS];
    int  bad = 0;
    char want[32];

    memset(owner, -1, sizeof(owner));
    for (int i = 0; i < nq; i++) {
        if (q[i].res.status == SCHED_RES_BUSY)
            (*busy)++;
        if (q[i].res.status != SCHED_RES_OK)
            continue;
        (*ok)++;
        granted += q[i].res.gpus;
        snprintf(want, sizeof(want), "%s:1:", q[i].job);
        for (size_t k = 0; k < q[i].nn; k++) {
            int ni = (int)(q[i].n[k].node[6] - '0');

            for (int g = 0; g < RACE_GPUS; g++) {
                if (!(q[i].n[k].gpus & (UINT64_C(1) << g)))
                    continue;
                if (owner[ni][g] >= 0 && owner[ni][g] != i) {
                    printf("# double booking: %s gpu %d to %s and %s\n", q[i].n[k].node, g,
                           q[owner[ni][g]].job, q[i].job);
                    bad++;
                }
                owner[ni][g] = i;
                if (strncmp(field("race-site", q[i].n[k].node, g), want, strlen(want)) != 0) {
                    printf("# %s gpu %d holds '%s', not %s's\n", q[i].n[k].node, g, SR.str,
                           q[i].job);
                    bad++;
                }
            }
        }
    }
    for (int ni = 0; ni < RACE_NODES; ni++)
        stored += hlen("race-site", race_node[ni]);
    if (stored != granted) {
        printf("# %lld GPUs stored, %lld granted\n", stored, granted);
        bad++;
    }
    return bad;
}

static void
race_clear(void)
{
    char key[SCHED_RES_KEY_LEN];

    for (int i = 0; i < RACE_NODES; i++) {
        sched_res_key(key, gp_shard_of("race-site"), race_node[i]);
        kvs("DEL %s", key);
    }
}

static void
test_race(void)
{
    static race_req q[RACE_PER];
    int             bad = 0, ok = 0, busy = 0, other = 0, total = 0;
    unsigned        seed = (unsigned)time(NULL);

    srand(seed);
    for (int i = 0; i < RACE_NODES; i++)
        live_node("race-site", race_node[i], "healthy", true);
    race_clear();
    for (int round = 0; round < RACE_ROUNDS; round++) {
        race_answered = 0;
        memset(q, 0, sizeof(q));
        /* every booking of a round is sent before the loop runs: the two
         * connections' writes interleave at the server */
        for (int i = 0; i < RACE_PER; i++) {
            race_pick(&q[i], round, i);
            if (sched_reserve_book(i % 2 ? r2 : r1, "race-site", q[i].job, 1, q[i].n, q[i].nn,
                                   race_cb, &q[i]) != GP_EOK)
                other++;
        }
        for (double t0 = tl_now(); race_answered < RACE_PER && tl_now() - t0 < 20;)
            ev_run(loop, EVRUN_ONCE);
        total += race_answered;
        for (int i = 0; i < RACE_PER; i++)
            other += q[i].res.status == SCHED_RES_ERROR;
        bad += race_check(q, RACE_PER, &ok, &busy);
        race_clear();
    }
    T_OKM(total == RACE_ROUNDS * RACE_PER && other == 0, "%d racing bookings on 2 connections all "
          "answered (%d errors), seed %u", total, other, seed);
    T_OKM(bad == 0 && ok > RACE_ROUNDS && busy > RACE_ROUNDS,
          "no GPU granted twice, every grant holds its value (%d granted, %d busy, %d violations)",
          ok, busy, bad);
}

/* ---- reconcile ---- */

static void
test_reconcile_grace(void)
{
    const char          *s = "rc-site";
    char                 key[SCHED_RES_KEY_LEN], ikey[SCHED_RES_KEY_LEN];
    sched_res_node       fresh[1] = {{"rc-n1", M(1)}};
    sched_res_live       truth[2] = {{"backed", 1, s, "rc-n1", M(2)}, {"newholder", 2, s, "rc-n1", M(3)}};
    sched_res_reconciled rc;
    uint64_t             old;

    flush();
    live_node(s, "rc-n1", "healthy", true);
    old = redis_ms() - 600000;
    sched_res_key(key, gp_shard_of(s), "rc-n1");
    sched_res_index_key(ikey, gp_shard_of(s));
    kvs("HSET %s 0 orphan:1:%llu", key, (unsigned long long)old);
    kvs("HSET %s 2 backed:1:%llu", key, (unsigned long long)old);
    kvs("HSET %s 3 oldholder:1:%llu", key, (unsigned long long)old);
    kvs("SADD %s rc-n1", ikey);
    sched_res_key(key, gp_shard_of(s), "rc-n2");           /* not ours: no time, no GPU */
    kvs("HSET %s junk x 5 nonsense", key);
    kvs("SADD %s rc-n2", ikey);
    T_OK(book(r1, s, "fresh", 1, fresh, 1).status == SCHED_RES_OK);

    rc = reconcile(truth, 2, 60000);
    T_OKM(hlen(s, "rc-n2") == 0 && !indexed(s, "rc-n2"),
          "malformed fields and values are removed, whatever the grace");
    T_OKM(rc.err == GP_EOK && rc.removed == 4 && rc.kept_fresh == 1 && rc.rebuilt == 1 &&
              rc.conflicts == 0,
          "grace 60 s: the old orphan and the old wrong holder removed, the fresh one kept, the "
          "truth's holder rebuilt (removed %u kept %u rebuilt %u conflicts %u)",
          rc.removed, rc.kept_fresh, rc.rebuilt, rc.conflicts);
    T_OKM(field(s, "rc-n1", 0)[0] == '\0', "the old orphan is gone");
    T_OKM(strncmp(field(s, "rc-n1", 1), "fresh:1:", 8) == 0, "the fresh one is kept");
    T_OKM(strncmp(field(s, "rc-n1", 2), "backed:1:", 9) == 0, "the backed one is kept");
    T_OKM(strncmp(field(s, "rc-n1", 3), "newholder:2:", 12) == 0,
          "GPU 3 now holds the truth's attempt");

    rc = reconcile(truth, 2, 0);
    T_OKM(rc.err == GP_EOK && rc.removed == 1 && rc.kept_fresh == 0 && rc.rebuilt == 0,
          "grace 0: the unbacked one goes too (removed %u)", rc.removed);
    T_OKM(hlen(s, "rc-n1") == 2 && indexed(s, "rc-n1"), "the backed ones stay, indexed");
    rc = reconcile(NULL, 0, 0);
    T_OKM(rc.removed == 2 && hlen(s, "rc-n1") == 0 && !indexed(s, "rc-n1"),
          "an empty truth with grace 0 empties the node and its index entry");
}

/* The orphan script acts only on the value the reconcile read: a GPU
 * booked again between the read and the script (here: by hand) stays. */
static void
test_orphan_recheck(void)
{
    const char *s = "rk-site";
    char        key[SCHED_RES_KEY_LEN], ikey[SCHED_RES_KEY_LEN], now[32];
    const char *keys[2] = {ikey, key};
    const char *args[4] = {now, "rk-n1", "0", "gone:1:1000"};    /* cutoff: now */
    gp_kvscript sc;

    sched_res_key(key, gp_shard_of(s), "rk-n1");
    sched_res_index_key(ikey, gp_shard_of(s));
    snprintf(now, sizeof(now), "%llu", (unsigned long long)redis_ms());
    kvs("HSET %s 0 newer:1:%s", key, now);
    kvs("SADD %s rk-n1", ikey);
    gp_kvscript_init(&sc, sched_res_orphans_lua);
    memset(&SR, 0, sizeof(SR));
    T_OK(gp_kvscript_call(&sc, kv1, sr_cb, &SR, 2, keys, 4, args, NULL) == GP_EOK);
    tl_run_until(loop, &SR.done, 10);
    T_OKM(SR.err == GP_EOK && SR.n == 2 && strcmp(SR.el[0], "0") == 0,
          "the orphan script leaves a GPU whose value changed since the read (removed %s)",
          SR.el[0]);
    T_OKM(strncmp(field(s, "rk-n1", 0), "newer:1:", 8) == 0 && indexed(s, "rk-n1"),
          "... its new booking intact");
}

/* The truth is read, then a booking is made (by a placement whose attempt
 * row commits after the read), then the pass reaches the booking's shard
 * later than the grace: it is not an orphan.  One booked a grace before
 * the read and still unbacked is. */
static void
test_reconcile_after_truth(void)
{
    const char          *s = "ta-site";
    char                 key[SCHED_RES_KEY_LEN], ikey[SCHED_RES_KEY_LEN];
    sched_res_node       late[1] = {{"ta-n1", M(1)}};
    sched_res_reconciled rc;
    uint64_t             truth_ms;

    flush();
    live_node(s, "ta-n1", "healthy", true);
    sched_res_key(key, gp_shard_of(s), "ta-n1");
    sched_res_index_key(ikey, gp_shard_of(s));
    truth_ms = redis_ms();                          /* the truth (empty) is read */
    kvs("HSET %s 0 early:1:%llu", key, (unsigned long long)(truth_ms - 301));
    kvs("SADD %s ta-n1", ikey);
    T_OK(book(r1, s, "late", 1, late, 1).status == SCHED_RES_OK);
    usleep(400000);                                 /* a pass longer than the grace */
    rc = reconcile_at(NULL, 0, truth_ms, 300);
    T_OKM(strncmp(field(s, "ta-n1", 1), "late:1:", 7) == 0 && rc.kept_fresh == 1,
          "a booking made after the truth was read is kept, 400 ms later with a grace of 300 ms "
          "(kept %u, GPU 1 '%s')", rc.kept_fresh, field(s, "ta-n1", 1));
    T_OKM(field(s, "ta-n1", 0)[0] == '\0' && rc.removed == 1,
          "one booked 301 ms before the read, unbacked, is removed (removed %u)", rc.removed);
}

static void
test_reconcile_flush(void)
{
    sched_res_node       a[2] = {{"fl-a1", M(0, 1)}, {"fl-a2", M(0)}};
    sched_res_node       b[1] = {{"fl-b1", M(4)}};
    sched_res_node       c[1] = {{"fl-c1", M(0, 1, 2, 3, 4, 5, 6, 7)}};
    sched_res_node       in[1] = {{"fl-c1", M(7)}};
    sched_res_live       truth[4] = {{"J1", 1, "fl-a", "fl-a1", M(0, 1)},
                                     {"J1", 1, "fl-a", "fl-a2", M(0)},
                                     {"J2", 3, "fl-b", "fl-b1", M(4)},
                                     {"J3", 1, "fl-c", "fl-c1", M(0, 1, 2, 3, 4, 5, 6, 7)}};
    sched_res_reconciled rc;
    read_wait            w = {0};

    flush();
    live_node("fl-a", "fl-a1", "healthy", true);
    live_node("fl-a", "fl-a2", "healthy", true);
    live_node("fl-b", "fl-b1", "healthy", true);
    live_node("fl-c", "fl-c1", "healthy", true);
    T_OK(book(r1, "fl-a", "J1", 1, a, 2).status == SCHED_RES_OK);
    T_OK(book(r1, "fl-b", "J2", 3, b, 1).status == SCHED_RES_OK);
    T_OK(book(r2, "fl-c", "J3", 1, c, 1).status == SCHED_RES_OK);
    rc = reconcile(truth, 4, 60000);
    T_OKM(rc.err == GP_EOK && rc.removed == 0 && rc.rebuilt == 0 && rc.conflicts == 0,
          "Redis and the truth agree: nothing to do");

    flush();
    T_OKM(hlen("fl-c", "fl-c1") == 0, "flushed");
    live_node("fl-c", "fl-c1", "healthy", true);
    T_OK(book(r2, "fl-c", "intruder", 1, in, 1).status == SCHED_RES_OK);
    rc = reconcile(truth, 4, 60000);
    T_OKM(rc.err == GP_EOK && rc.rebuilt == 11 && rc.conflicts == 1 && rc.kept_fresh == 1 &&
              rc.removed == 0,
          "after FLUSHALL: 11 GPUs rebuilt, the one a fresh booking took is a conflict "
          "(rebuilt %u conflicts %u kept %u removed %u)",
          rc.rebuilt, rc.conflicts, rc.kept_fresh, rc.removed);
    T_OKM(strcmp(rc.first_conflict.node, "fl-c1") == 0 && rc.first_conflict.gpu == 7 &&
              strcmp(rc.first_conflict.job, "intruder") == 0 &&
              strcmp(rc.conflict_job, "J3") == 0 && rc.conflict_attempt == 1,
          "the conflict names node, GPU, Redis's holder and the truth's attempt");
    T_OKM(strncmp(field("fl-c", "fl-c1", 7), "intruder:1:", 11) == 0,
          "a different holder is never overwritten");
    T_OKM(strncmp(field("fl-a", "fl-a1", 1), "J1:1:", 5) == 0 &&
              strncmp(field("fl-a", "fl-a2", 0), "J1:1:", 5) == 0 &&
              strncmp(field("fl-b", "fl-b1", 4), "J2:3:", 5) == 0 &&
              strncmp(field("fl-c", "fl-c1", 0), "J3:1:", 5) == 0,
          "every rebuilt GPU holds its attempt");
    T_OKM(indexed("fl-a", "fl-a1") && indexed("fl-b", "fl-b1") && indexed("fl-c", "fl-c1"),
          "rebuilt nodes are back in their shard's index");
    T_OK(sched_reserve_list(r1, gp_shard_of("fl-c"), read_cb, &w) == GP_EOK);
    tl_run_until(loop, &w.done, 10);
    {
        size_t want = 8 + (gp_shard_of("fl-a") == gp_shard_of("fl-c") ? 3 : 0) +
                      (gp_shard_of("fl-b") == gp_shard_of("fl-c") ? 1 : 0);

        T_OKM(w.err == GP_EOK && w.n == want, "list of fl-c's shard: %zu reservations (want %zu)",
              w.n, want);
    }
    rc = reconcile(truth, 4, 60000);
    T_OKM(rc.rebuilt == 0 && rc.conflicts == 1, "a second pass rebuilds nothing");
}

static unsigned stale_shard = GP_SHARDS, stale_calls;

static void
stale_cb(void *arg, unsigned shard)
{
    (void)arg;
    stale_shard = shard;
    stale_calls++;
}

/* Redis lost its data: the shard's epoch is gone with the bookings, so a
 * booking there is refused (a GPU Redis lost may still be in use) until
 * the rebuild writes the epoch again. */
static void
test_stale_epoch(void)
{
    const char      *s = "ep-site";
    char             key[SCHED_RES_KEY_LEN];
    sched_res_node   n[1] = {{"ep-n1", M(0, 1)}};
    sched_res_result r;

    kvs("FLUSHALL");
    live_node(s, "ep-n1", "healthy", true);
    r = book(r1, s, "jobE", 1, n, 1);
    T_OKM(r.status == SCHED_RES_ERROR && r.err == GP_EUNAVAIL,
          "no epoch: the booking is refused UNAVAIL (status %d %s)", r.status, gp_err_name(r.err));
    T_OKM(stale_calls == 1 && stale_shard == gp_shard_of(s),
          "... and the stale callback names the site's shard (%u calls, shard %u)", stale_calls,
          stale_shard);
    T_OKM(hlen(s, "ep-n1") == 0 && !indexed(s, "ep-n1"), "... nothing was written");
    sched_epoch_key(key, gp_shard_of(s));
    kvs("SET %s rebuilt", key);
    r = book(r1, s, "jobE", 1, n, 1);
    T_OKM(r.status == SCHED_RES_OK && r.gpus == 2 && stale_calls == 1,
          "the epoch back: the same booking takes its 2 GPUs");
    flush();
}

static void
test_metrics(void)
{
    gp_buf b;

    gp_buf_init(&b, 0);
    T_OK(gp_metrics_render(metrics, &b) == GP_EOK);
    T_OKM(strstr(b.p, "gp_scheduler_reservations_total{result=\"busy\"}") != NULL &&
              strstr(b.p, "gp_scheduler_reservations_total{result=\"unhealthy\"} 4") != NULL &&
              strstr(b.p, "gp_scheduler_reconcile_rebuilt_total 12") != NULL &&
              strstr(b.p, "gp_scheduler_reconcile_removed_total 7") != NULL &&
              strstr(b.p, "gp_scheduler_releases_total{result=\"ok\"} 4") != NULL &&
              strstr(b.p, "gp_scheduler_released_gpus_total 2") != NULL,
          "counters by reason");
    gp_buf_fini(&b);
}

static void
conn(void *arg, bool up)
{
    *(int *)arg = up;
}

/* Redis unreachable: calls are refused at once, no callback, nothing pending. */
static void
test_unreachable(void)
{
    gp_kv_opts     o = {.host = "127.0.0.1", .port = tl_free_port(), .connect_timeout_ms = 200};
    gp_kv         *kv = NULL;
    sched_reserve *r = NULL;
    sched_res_node n[1] = {{"un-n1", M(0)}};
    sched_res_live l[1] = {{"j", 1, "un-site", "un-n1", M(0)}};
    res_wait       w = {0};
    int            up = 0;

    T_OK(gp_kv_new(loop, &o, conn, &up, &kv) == GP_EOK && sched_reserve_new(kv, NULL, &r) == GP_EOK);
    T_EQ_INT(sched_reserve_book(r, "un-site", "j", 1, n, 1, res_cb, &w), GP_EUNAVAIL);
    T_EQ_INT(sched_reserve_release(r, "un-site", "j", 1, n, 1, res_cb, &w), GP_EUNAVAIL);
    T_EQ_INT(sched_reserve_reconcile(r, l, 1, 0, 0, recon_cb, &w), GP_EUNAVAIL);
    T_OKM(!w.done, "Redis unreachable: UNAVAIL at once, no callback");
    gp_kv_free(kv);
    sched_reserve_free(r);
}

int
main(void)
{
    const char *cl = getenv("GP_REDIS_CLUSTER");
    gp_kv_opts  o = {.host = tl_env("GP_REDIS_HOST"), .port = atoi(tl_env("GP_REDIS_PORT")),
                     .command_timeout_ms = 5000};
    int         up1 = 0, up2 = 0;

    signal(SIGPIPE, SIG_IGN);
    if (cl != NULL && strcmp(cl, "true") == 0) {
        o.cluster = true;
        o.seeds = tl_env("GP_REDIS_SEEDS");
        printf("# Redis Cluster: %s\n", o.seeds);
    }
    loop = ev_default_loop(0);
    metrics = gp_metrics_new();
    T_OK(gp_kv_new(loop, &o, conn, &up1, &kv1) == GP_EOK);
    T_OK(gp_kv_new(loop, &o, conn, &up2, &kv2) == GP_EOK);
    tl_run_until(loop, &up1, 10);
    tl_run_until(loop, &up2, 10);
    T_OKM(up1 && up2, "two connections");
    T_OK(sched_reserve_new(kv1, metrics, &r1) == GP_EOK);
    T_OK(sched_reserve_new(kv2, NULL, &r2) == GP_EOK);
    sched_reserve_load(r1);
    sched_reserve_on_stale(r1, stale_cb, NULL);
    flush();

    test_all_or_nothing();
    test_idempotent();
    test_unhealthy();
    test_release_fencing();
    test_handover();
    test_race();
    test_reconcile_grace();
    test_orphan_recheck();
    test_reconcile_flush();
    test_stale_epoch();
    test_metrics();
    test_reconcile_after_truth();
    test_unreachable();

    gp_kv_free(kv1);
    gp_kv_free(kv2);
    sched_reserve_free(r1);
    sched_reserve_free(r2);
    gp_metrics_free(metrics);
    return T_DONE();
}
