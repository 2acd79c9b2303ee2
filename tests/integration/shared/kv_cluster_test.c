/* kv_cluster_test.c -- gp_kv in cluster mode against a real 3-master Redis
 * Cluster (tests/harness/redis_cluster.sh, started inside the stack folder
 * of tests/harness/with-stack.sh, so the stack's teardown stops it too).
 *
 *   - discovery from one seed; keys in every slot written and read back;
 *   - cross-slot commands refused (INVAL, counter) without a callback;
 *     hash-tagged keys in one slot accepted;
 *   - SCRIPT LOAD reaches every master; EVALSHA with hash-tagged keys;
 *   - one slot holding keys is moved by hand (IMPORTING/MIGRATING, MIGRATE
 *     in small batches, SETSLOT NODE) while commands keep flowing: every
 *     command answered correctly, ASK and MOVED followed, values right;
 *   - one master stopped: only its commands fail UNAVAIL, the others go on;
 *     restarted: everything answers again. */
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gp/kv.h"
#include "gp/log.h"
#include "test.h"

#define T_ERR(expr, want) do {                                                 \
        gp_err e_ = (expr);                                                    \
        T_OKM(e_ == (want), "%s -> %s", #expr, gp_err_name(e_));               \
    } while (0)

static struct ev_loop *L;
static char            cdir[512];         /* the cluster's folder */
static int             ports[3];

/* ---- loop driving ------------------------------------------------------- */

typedef bool pred_fn(void *ctx);
static pred_fn *g_pred;
static void    *g_ctx;

static void
check_cb(struct ev_loop *l, ev_prepare *w, int rev)
{
    (void)w;
    (void)rev;
    if (g_pred != NULL && g_pred(g_ctx))
        ev_break(l, EVBREAK_ONE);
}

static void
guard_cb(struct ev_loop *l, ev_timer *w, int rev)
{
    (void)w;
    (void)rev;
    ev_break(l, EVBREAK_ONE);
}

static bool
run_until(pred_fn *p, void *ctx, double timeout)
{
    ev_prepare c;
    ev_timer   g, tick;

    if (p != NULL && p(ctx))
        return true;
    g_pred = p;
    g_ctx = ctx;
    ev_prepare_init(&c, check_cb);
    ev_prepare_start(L, &c);
    ev_timer_init(&g, guard_cb, timeout, 0.);
    ev_timer_start(L, &g);
    ev_timer_init(&tick, guard_cb, 0.01, 0.01);  /* predicates on outside state */
    ev_run(L, 0);
    while (p != NULL && !p(ctx) && ev_is_active(&g)) {
        ev_timer_start(L, &tick);
        ev_run(L, EVRUN_ONCE);
        ev_timer_stop(L, &tick);
    }
    ev_prepare_stop(L, &c);
    ev_timer_stop(L, &g);
    g_pred = NULL;
    return p == NULL || p(ctx);
}

/* ---- helpers ------------------------------------------------------------ */

typedef struct conn_st {
    int  up, down;
    bool connected;
} conn_st;

static void
conn_cb(void *arg, bool connected)
{
    conn_st *s = arg;

    if (connected)
        s->up++;
    else
        s->down++;
    s->connected = connected;
}

static bool
p_up(void *ctx)
{
    return ((conn_st *)ctx)->connected;
}

typedef struct res {
    int       calls;
    gp_err    err;
    int       type;
    long long integer;
    char      str[256];
} res;

static void
res_cb(void *arg, const redisReply *r, gp_err err)
{
    res *x = arg;

    x->calls++;
    x->err = err;
    x->type = r != NULL ? r->type : 0;
    x->integer = r != NULL ? r->integer : 0;
    x->str[0] = '\0';
    if (r != NULL && r->str != NULL)
        snprintf(x->str, sizeof(x->str), "%.*s", (int)r->len, r->str);
}

static bool
p_called(void *ctx)
{
    return ((res *)ctx)->calls > 0;
}

/* Many commands, each checked against what it should answer. */
typedef struct tally {
    int calls, ok, bad, unavail;
    char first_bad[200];
} tally;

typedef struct check {
    tally     *t;
    int        type;                       /* expected reply type */
    long long  integer;                    /* INTEGER: exact value; -1 = any >= 1 */
    char       str[48];                    /* STRING */
} check;

static void
check_cb2(void *arg, const redisReply *r, gp_err err)
{
    check *c = arg;
    tally *t = c->t;
    bool   good;

    t->calls++;
    if (err == GP_EUNAVAIL)
        t->unavail++;
    good = err == GP_EOK && r != NULL && r->type == c->type;
    if (good && c->type == REDIS_REPLY_INTEGER)
        good = c->integer < 0 ? r->integer >= 1 : r->integer == c->integer;
    if (good && c->type == REDIS_REPLY_STRING)
        good = strlen(c->str) == r->len && memcmp(c->str, r->str, r->len) == 0;
    if (good && c->type == REDIS_REPLY_STATUS)
        good = strcmp(c->str, r->str) == 0;
    if (good) {
        t->ok++;
    } else {
        if (t->bad++ == 0)
            snprintf(t->first_bad, sizeof(t->first_bad), "err=%s type=%d str=%.*s",
                     gp_err_name(err), r != NULL ? r->type : -1,
                     r != NULL && r->str != NULL ? (int)r->len : 0,
                     r != NULL && r->str != NULL ? r->str : "");
    }
    free(c);
}

static check *
mk(tally *t, int type, long long integer, const char *str)
{
    check *c = calloc(1, sizeof(*c));

    c->t = t;
    c->type = type;
    c->integer = integer;
    if (str != NULL)
        snprintf(c->str, sizeof(c->str), "%s", str);
    return c;
}

typedef struct want {
    tally *t;
    int    n;
} want;

static bool
p_tally(void *ctx)
{
    want *w = ctx;
    return w->t->calls >= w->n;
}

static int
sh(const char *fmt, ...)
{
    char    cmd[2048];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

static long long
cli_int(int port, const char *args)
{
    char  cmd[512], out[128] = "";
    FILE *f;

    snprintf(cmd, sizeof(cmd), "redis-cli -p %d %s", port, args);
    f = popen(cmd, "r");
    if (f == NULL)
        return -1;
    if (fgets(out, sizeof(out), f) == NULL)
        out[0] = '\0';
    pclose(f);
    return out[0] ? atoll(out) : -1;
}

/* ---- tests -------------------------------------------------------------- */

#define NKEYS 3000

static void
test_all_slots(gp_kv *kv)
{
    tally       t = {0};
    want        w = {&t, 0};
    gp_kv_stats st;
    char        val[32];
    long long   sum = 0;

    for (int i = 0; i < NKEYS; i++) {
        snprintf(val, sizeof(val), "v%d", i * 7);
        if (gp_kv_cmdf(kv, check_cb2, mk(&t, REDIS_REPLY_STATUS, 0, "OK"), "SET k:%d %s", i,
                       val) == GP_EOK)
            w.n++;
    }
    T_EQ_INT(w.n, NKEYS);
    T_OK(run_until(p_tally, &w, 20));
    T_OKM(t.ok == NKEYS && t.bad == 0, "%d SETs ok, %d bad (%s)", t.ok, t.bad, t.first_bad);
    memset(&t, 0, sizeof(t));
    w.n = 0;
    for (int i = 0; i < NKEYS; i++) {
        snprintf(val, sizeof(val), "v%d", i * 7);
        if (gp_kv_cmdf(kv, check_cb2, mk(&t, REDIS_REPLY_STRING, 0, val), "GET k:%d", i) ==
            GP_EOK)
            w.n++;
    }
    T_OK(run_until(p_tally, &w, 20));
    T_OKM(t.ok == NKEYS && t.bad == 0, "%d GETs read back, %d bad (%s)", t.ok, t.bad,
          t.first_bad);
    /* they really are spread over the three masters */
    for (int i = 0; i < 3; i++) {
        long long n = cli_int(ports[i], "dbsize");

        T_OKM(n > NKEYS / 5, "master %d holds %lld keys", ports[i], n);
        sum += n;
    }
    T_EQ_INT(sum, NKEYS);
    gp_kv_get_stats(kv, &st);
    T_EQ_INT(st.masters, 3);
    T_EQ_INT(st.moved, 0);                 /* the map was right from the start */
}

static void
test_crossslot(gp_kv *kv)
{
    res         r = {0};
    gp_kv_stats st0, st;
    const char *argv[] = {"DEL", "a", "b"};

    gp_kv_get_stats(kv, &st0);
    /* "a" and "b" are in different slots (15495, 3300) */
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "MGET a b"), GP_EINVAL);
    T_ERR(gp_kv_cmd(kv, res_cb, &r, 3, argv, NULL), GP_EINVAL);
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "EVAL %s 2 a b", "return 1"), GP_EINVAL);
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "MSET {t}a 1 b 2"), GP_EINVAL);
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "EVAL %s 5 a b", "return 1"), GP_EINVAL); /* numkeys > keys */
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "MULTI"), GP_EINVAL);
    gp_kv_get_stats(kv, &st);
    T_EQ_INT(st.crossslot - st0.crossslot, 4);
    run_until(NULL, NULL, 0.1);
    T_EQ_INT(r.calls, 0);                  /* refused: no callback */
    /* same hash tag: one slot, accepted */
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "MSET {t}a 1 {t}b 2"), GP_EOK);
    T_OK(run_until(p_called, &r, 5));
    T_OKM(r.err == GP_EOK && r.type == REDIS_REPLY_STATUS, "MSET {t}a {t}b -> %s %s",
          gp_err_name(r.err), r.str);
    memset(&r, 0, sizeof(r));
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "MGET {t}a {t}b"), GP_EOK);
    T_OK(run_until(p_called, &r, 5));
    T_OKM(r.err == GP_EOK && r.type == REDIS_REPLY_ARRAY, "MGET {t}a {t}b -> array");
    {   /* our slots are the server's (CLUSTER KEYSLOT is keyless: any master) */
        tally t = {0};
        want  w = {&t, 0};
        char  key[64];

        for (int i = 0; i < 500; i++) {
            snprintf(key, sizeof(key), i % 3 == 0 ? "k:%d" : i % 3 == 1 ? "gp:{%d}:x" : "{}%d{", i);
            w.n += gp_kv_cmdf(kv, check_cb2,
                              mk(&t, REDIS_REPLY_INTEGER, gp_kv_key_slot(key, strlen(key)), NULL),
                              "CLUSTER KEYSLOT %s", key) == GP_EOK;
        }
        T_OK(run_until(p_tally, &w, 10));
        T_OKM(t.ok == 500, "gp_kv_key_slot == CLUSTER KEYSLOT for %d of 500 keys (%s)", t.ok,
              t.first_bad);
    }
    memset(&r, 0, sizeof(r));
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "PING"), GP_EOK);      /* keyless: any master */
    T_OK(run_until(p_called, &r, 5));
    T_OKM(r.err == GP_EOK && strcmp(r.str, "PONG") == 0, "PING -> %s", r.str);
}

static const char script[] =
    "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('INCRBY', KEYS[2], ARGV[2])";

static void
test_script(gp_kv *kv)
{
    res  r = {0};
    char sha[64], q[96];

    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "SCRIPT LOAD %s", script), GP_EOK);
    T_OK(run_until(p_called, &r, 5));
    T_OKM(r.err == GP_EOK && r.type == REDIS_REPLY_STRING && strlen(r.str) == 40,
          "SCRIPT LOAD -> %s", r.str);
    snprintf(sha, sizeof(sha), "%.40s", r.str);
    snprintf(q, sizeof(q), "script exists %s", sha);
    for (int i = 0; i < 3; i++)
        T_OKM(cli_int(ports[i], q) == 1, "the script is loaded on master %d", ports[i]);
    for (int k = 0; k < 20; k++) {         /* tags in many slots */
        memset(&r, 0, sizeof(r));
        T_ERR(gp_kv_cmdf(kv, res_cb, &r, "EVALSHA %s 2 gp:{n%d}:a gp:{n%d}:b x%d 5", sha, k, k, k),
              GP_EOK);
        T_OK(run_until(p_called, &r, 5));
        T_OKM(r.err == GP_EOK && r.type == REDIS_REPLY_INTEGER && r.integer == 5,
              "EVALSHA gp:{n%d}:a gp:{n%d}:b -> %lld %s", k, k, r.integer, r.str);
    }
    memset(&r, 0, sizeof(r));
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "GET gp:{n7}:a"), GP_EOK);
    T_OK(run_until(p_called, &r, 5));
    T_OKM(strcmp(r.str, "x7") == 0, "the script's SET is there: %s", r.str);
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "EVALSHA %s 2 gp:{n1}:a gp:{n2}:b x 1", sha), GP_EINVAL);
}

/* A slot left MIGRATING with one of two keys missing: a two-key command
 * gets TRYAGAIN every time, so it retries with backoff until its deadline
 * and then gets TIMEOUT once, near the deadline. */
static void
test_deadline(gp_kv *kv)
{
    res         r = {0};
    gp_kv_stats st0, st;
    int         slot, src = -1, dst = -1;
    char        q[128], id[64] = "";
    double      t0, took;
    FILE       *f;

    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "SET {dl}a 1"), GP_EOK);
    T_OK(run_until(p_called, &r, 5));
    slot = gp_kv_key_slot("dl", 2);
    snprintf(q, sizeof(q), "cluster countkeysinslot %d", slot);
    for (int i = 0; i < 3; i++) {
        if (cli_int(ports[i], q) > 0)
            src = ports[i];
        else if (dst < 0)
            dst = ports[i];
    }
    T_OK(src > 0 && dst > 0);
    snprintf(q, sizeof(q), "redis-cli -p %d cluster myid", dst);
    f = popen(q, "r");
    if (f != NULL) {
        if (fgets(id, sizeof(id), f) == NULL)
            id[0] = '\0';
        id[strcspn(id, "\n")] = '\0';
        pclose(f);
    }
    T_EQ_INT(sh("redis-cli -p %d cluster setslot %d migrating %s >/dev/null", src, slot, id), 0);
    gp_kv_get_stats(kv, &st0);
    memset(&r, 0, sizeof(r));
    ev_now_update(L);                      /* the loop's clock after system() */
    t0 = ev_time();
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "MGET {dl}a {dl}b"), GP_EOK);
    T_OK(run_until(p_called, &r, 10));
    took = ev_time() - t0;
    run_until(NULL, NULL, 0.3);
    gp_kv_get_stats(kv, &st);
    T_EQ_INT(r.calls, 1);
    T_OKM(r.err == GP_ETIMEOUT, "MGET on an unstable slot -> %s", gp_err_name(r.err));
    T_OKM(took >= 0.9 && took <= 2.5, "after its 1 s deadline, not before: %.2f s", took);
    T_OKM(st.tryagain - st0.tryagain >= 3, "TRYAGAIN retried %llu times within it",
          (unsigned long long)(st.tryagain - st0.tryagain));
    T_EQ_INT(sh("redis-cli -p %d cluster setslot %d stable >/dev/null", src, slot), 0);
    memset(&r, 0, sizeof(r));
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "MGET {dl}a {dl}b"), GP_EOK);
    T_OK(run_until(p_called, &r, 5));
    T_OKM(r.err == GP_EOK && r.type == REDIS_REPLY_ARRAY, "stable again: MGET answered");
}

/* ---- a slot moved while commands flow ---------------------------------- */

#define MIG_VALS  150
#define MIG_CTRS  100
#define PUMP_OUT  48

typedef struct pump {
    gp_kv    *kv;
    tally     t;
    bool      on;
    int       out;
    long long incrs[MIG_CTRS];             /* INCRs acknowledged per counter */
    long long sent;
    int       lost;                        /* refused at once */
    unsigned  rng;
} pump;

typedef struct pcheck {
    pump *p;
    int   ctr;                             /* -1: a GET */
    char  want[32];
} pcheck;

static void pump_one(pump *p);

static void
pump_cb(void *arg, const redisReply *r, gp_err err)
{
    pcheck *c = arg;
    pump   *p = c->p;
    bool    good;

    p->out--;
    p->t.calls++;
    if (c->ctr >= 0)
        good = err == GP_EOK && r->type == REDIS_REPLY_INTEGER;
    else
        good = err == GP_EOK && r->type == REDIS_REPLY_STRING && r->len == strlen(c->want) &&
               memcmp(r->str, c->want, r->len) == 0;
    if (good) {
        p->t.ok++;
        if (c->ctr >= 0)
            p->incrs[c->ctr]++;
    } else if (p->t.bad++ == 0) {
        snprintf(p->t.first_bad, sizeof(p->t.first_bad), "err=%s type=%d str=%.*s",
                 gp_err_name(err), r != NULL ? r->type : -1,
                 r != NULL && r->str != NULL ? (int)r->len : 0,
                 r != NULL && r->str != NULL ? r->str : "");
    }
    free(c);
    while (p->on && p->out < PUMP_OUT)
        pump_one(p);
}

static void
pump_one(pump *p)
{
    pcheck *c = calloc(1, sizeof(*c));
    gp_err  e;
    int     i;

    c->p = p;
    p->rng = p->rng * 1103515245u + 12345u;
    i = (int)((p->rng >> 8) % (MIG_VALS + MIG_CTRS));
    if (i < MIG_VALS) {
        c->ctr = -1;
        snprintf(c->want, sizeof(c->want), "val-%d", i);
        e = gp_kv_cmdf(p->kv, pump_cb, c, "GET mig:{mv}:v%d", i);
    } else {
        c->ctr = i - MIG_VALS;
        e = gp_kv_cmdf(p->kv, pump_cb, c, "INCR mig:{mv}:c%d", c->ctr);
    }
    p->sent++;
    if (e != GP_EOK) {
        p->lost++;
        free(c);
        p->on = false;                     /* stop rather than spin */
        return;
    }
    p->out++;
}

/* MGETs of two keys of the moving slot, on a second client with a long
 * deadline: while the slot is half moved they get TRYAGAIN (keys split
 * between the two masters), retried with backoff until both are on one. */
#define MGET_OUT 8

typedef struct mpump {
    gp_kv    *kv;
    tally     t;
    bool      on;
    int       out;
    unsigned  rng;
} mpump;

typedef struct mcheck {
    mpump *p;
    int    a, b;
} mcheck;

static void mget_one(mpump *p);

static void
mget_cb(void *arg, const redisReply *r, gp_err err)
{
    mcheck *c = arg;
    mpump  *p = c->p;
    char    wa[32], wb[32];
    bool    good;

    snprintf(wa, sizeof(wa), "val-%d", c->a);
    snprintf(wb, sizeof(wb), "val-%d", c->b);
    p->out--;
    p->t.calls++;
    good = err == GP_EOK && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
           r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, wa) == 0 &&
           r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, wb) == 0;
    if (good)
        p->t.ok++;
    else if (p->t.bad++ == 0)
        snprintf(p->t.first_bad, sizeof(p->t.first_bad), "err=%s type=%d str=%.*s",
                 gp_err_name(err), r != NULL ? r->type : -1,
                 r != NULL && r->str != NULL ? (int)r->len : 0,
                 r != NULL && r->str != NULL ? r->str : "");
    free(c);
    while (p->on && p->out < MGET_OUT)
        mget_one(p);
}

static void
mget_one(mpump *p)
{
    mcheck *c = calloc(1, sizeof(*c));

    c->p = p;
    p->rng = p->rng * 1103515245u + 12345u;
    c->a = (int)((p->rng >> 8) % MIG_VALS);
    c->b = (c->a + 1 + (int)((p->rng >> 20) % (MIG_VALS - 1))) % MIG_VALS;
    if (gp_kv_cmdf(p->kv, mget_cb, c, "MGET mig:{mv}:v%d mig:{mv}:v%d", c->a, c->b) != GP_EOK) {
        free(c);
        p->t.bad++;
        p->on = false;
        return;
    }
    p->out++;
}

static bool
p_mdrained(void *ctx)
{
    return ((mpump *)ctx)->out == 0;
}

static pid_t mover;
static int   mover_status = -1;

static bool
p_mover_done(void *ctx)
{
    (void)ctx;
    if (mover > 0 && waitpid(mover, &mover_status, WNOHANG) == mover)
        mover = 0;
    return mover == 0;
}

static bool
p_drained(void *ctx)
{
    return ((pump *)ctx)->out == 0;
}

static void
test_migrate(gp_kv *kv, gp_kv *kv2)
{
    mpump       mp = {.kv = kv2, .rng = 777};
    gp_kv_stats mst;
    tally       t = {0};
    want        w = {&t, 0};
    pump        p = {.kv = kv, .rng = 12345};
    gp_kv_stats st0, st;
    int         slot;
    long long   before, after;
    char        out[600];
    long long   total = 0;

    for (int i = 0; i < MIG_VALS; i++) {
        char v[32];

        snprintf(v, sizeof(v), "val-%d", i);
        w.n += gp_kv_cmdf(kv, check_cb2, mk(&t, REDIS_REPLY_STATUS, 0, "OK"),
                          "SET mig:{mv}:v%d %s", i, v) == GP_EOK;
    }
    for (int i = 0; i < MIG_CTRS; i++)
        w.n += gp_kv_cmdf(kv, check_cb2, mk(&t, REDIS_REPLY_STATUS, 0, "OK"),
                          "SET mig:{mv}:c%d 0", i) == GP_EOK;
    T_EQ_INT(w.n, MIG_VALS + MIG_CTRS);
    T_OK(run_until(p_tally, &w, 10));
    T_OKM(t.bad == 0, "slot keys written (%s)", t.first_bad);
    slot = (int)cli_int(ports[0], "cluster keyslot {mv}");
    before = 0;
    snprintf(out, sizeof(out), "cluster countkeysinslot %d", slot);
    for (int i = 0; i < 3; i++)
        before += cli_int(ports[i], out) > 0;
    T_EQ_INT(before, 1);                   /* one master holds the slot */

    gp_kv_get_stats(kv, &st0);
    p.on = true;
    while (p.out < PUMP_OUT && p.on)
        pump_one(&p);
    mp.on = true;
    while (mp.out < MGET_OUT && mp.on)
        mget_one(&mp);
    run_until(NULL, NULL, 0.3);            /* flowing before the move */
    mover = fork();
    if (mover == 0) {
        char s[16], logf[600];
        int  fd;

        snprintf(s, sizeof(s), "%d", slot);
        snprintf(logf, sizeof(logf), "%s/move-slot.log", cdir);
        fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        snprintf(out, sizeof(out), "%s/redis_cluster.sh", getenv("GP_HARNESS"));
        /* 3 keys per MIGRATE, 20 ms apart: a window of ~2 s with the slot
         * half moved (ASK), then SETSLOT NODE (MOVED) */
        execl("/bin/bash", "bash", out, "move-slot", cdir, s, "3", "0.02", (char *)NULL);
        _exit(127);
    }
    T_OK(mover > 0);
    T_OK(run_until(p_mover_done, NULL, 60));
    T_OKM(WIFEXITED(mover_status) && WEXITSTATUS(mover_status) == 0, "move-slot exited 0");
    run_until(NULL, NULL, 0.5);            /* and on after it */
    p.on = false;
    mp.on = false;
    T_OK(run_until(p_drained, &p, 10));
    T_OK(run_until(p_mdrained, &mp, 40));
    gp_kv_get_stats(kv, &st);
    gp_kv_get_stats(kv2, &mst);
    T_OKM(mp.t.calls > 0 && mp.t.bad == 0 && mp.t.ok == mp.t.calls,
          "MGETs of the moving slot: %d answered, %d right (%s)", mp.t.calls, mp.t.ok,
          mp.t.first_bad);
    T_OKM(mst.tryagain > 0, "TRYAGAIN retried %llu times (ASK %llu, MOVED %llu)",
          (unsigned long long)mst.tryagain, (unsigned long long)mst.ask,
          (unsigned long long)mst.moved);
    T_OKM(p.sent > 500, "%lld commands sent during the move", p.sent);
    T_OKM(p.lost == 0 && p.t.bad == 0 && p.t.ok == p.t.calls && p.t.calls == p.sent,
          "zero lost: sent %lld, answered %d, right %d, refused %d, wrong %d (%s)", p.sent,
          p.t.calls, p.t.ok, p.lost, p.t.bad, p.t.first_bad);
    T_OKM(st.ask > st0.ask, "ASK followed %llu times", (unsigned long long)(st.ask - st0.ask));
    T_OKM(st.moved > st0.moved, "MOVED followed %llu times",
          (unsigned long long)(st.moved - st0.moved));
    T_OKM(st.refreshes > st0.refreshes, "the map was refreshed (%llu)",
          (unsigned long long)(st.refreshes - st0.refreshes));
    after = 0;
    for (int i = 0; i < 3; i++)
        after += cli_int(ports[i], out) > 0;
    T_EQ_INT(after, 1);
    /* values right afterwards: every counter = its acknowledged INCRs */
    memset(&t, 0, sizeof(t));
    w.n = 0;
    for (int i = 0; i < MIG_CTRS; i++) {
        char v[32];

        snprintf(v, sizeof(v), "%lld", p.incrs[i]);
        total += p.incrs[i];
        w.n += gp_kv_cmdf(kv, check_cb2, mk(&t, REDIS_REPLY_STRING, 0, v), "GET mig:{mv}:c%d",
                          i) == GP_EOK;
    }
    for (int i = 0; i < MIG_VALS; i++) {
        char v[32];

        snprintf(v, sizeof(v), "val-%d", i);
        w.n += gp_kv_cmdf(kv, check_cb2, mk(&t, REDIS_REPLY_STRING, 0, v), "GET mig:{mv}:v%d",
                          i) == GP_EOK;
    }
    T_EQ_INT(w.n, MIG_VALS + MIG_CTRS);
    T_OK(run_until(p_tally, &w, 10));
    T_OKM(t.ok == w.n && t.bad == 0, "after the move: %d of %d values right, %lld INCRs (%s)",
          t.ok, w.n, total, t.first_bad);
    gp_kv_get_stats(kv, &st0);
    memset(&t, 0, sizeof(t));
    w.n = 0;
    w.n += gp_kv_cmdf(kv, check_cb2, mk(&t, REDIS_REPLY_STRING, 0, "val-3"),
                      "GET mig:{mv}:v3") == GP_EOK;
    T_OK(run_until(p_tally, &w, 5));
    gp_kv_get_stats(kv, &st);
    T_OKM(t.ok == 1 && st.moved == st0.moved && st.ask == st0.ask,
          "the refreshed map sends straight to the new owner");
}

/* ---- one master down ---------------------------------------------------- */

static void
test_master_down(gp_kv *kv, conn_st *cs)
{
    tally     t = {0};
    want      w = {&t, 0};
    int       sync_unavail = 0, sent = 0;
    long long on2;
    gp_kv_stats st0, st;

    {   /* the k:* keys master 2 holds (it may hold the moved slot's too) */
        char  q[128], out[32] = "";
        FILE *f;

        snprintf(q, sizeof(q), "redis-cli -p %d --scan --pattern 'k:*' | wc -l", ports[1]);
        f = popen(q, "r");
        if (f != NULL) {
            if (fgets(out, sizeof(out), f) == NULL)
                out[0] = '\0';
            pclose(f);
        }
        on2 = atoll(out);
    }
    T_OKM(on2 > NKEYS / 5, "master 2 holds %lld of the k:* keys", on2);
    gp_kv_get_stats(kv, &st0);
    T_EQ_INT(sh("\"%s/redis_cluster.sh\" stop-node \"%s\" 2", getenv("GP_HARNESS"), cdir), 0);
    run_until(NULL, NULL, 0.3);
    for (int i = 0; i < NKEYS; i++) {
        check *c = mk(&t, REDIS_REPLY_INTEGER, 1, NULL);
        gp_err e = gp_kv_cmdf(kv, check_cb2, c, "EXISTS k:%d", i);

        if (e == GP_EOK)
            sent++;
        else
            free(c);                       /* refused: no callback */
        if (e == GP_EUNAVAIL)
            sync_unavail++;
    }
    w.n = sent;
    T_OK(run_until(p_tally, &w, 10));
    T_OKM(sync_unavail + t.unavail > 0 && t.ok > 0 && t.ok + t.unavail == sent,
          "master 2 down: %d UNAVAIL at once, %d in callbacks, %d answered by the others",
          sync_unavail, t.unavail, t.ok);
    T_OKM(sync_unavail + t.unavail == on2,
          "exactly master 2's keys failed (%d failed, it held %lld)", sync_unavail + t.unavail,
          on2);
    T_OK(!gp_kv_is_connected(kv));
    T_OK(cs->down >= 1);
    gp_kv_get_stats(kv, &st);
    T_OKM(st.refreshes > st0.refreshes, "the map was refreshed after the loss (%llu)",
          (unsigned long long)(st.refreshes - st0.refreshes));
    T_EQ_INT(sh("\"%s/redis_cluster.sh\" start-node \"%s\" 2", getenv("GP_HARNESS"), cdir), 0);
    T_OKM(run_until(p_up, cs, 20), "connected again after the master came back");
    memset(&t, 0, sizeof(t));
    w.n = 0;
    for (int i = 0; i < NKEYS; i++)
        w.n += gp_kv_cmdf(kv, check_cb2, mk(&t, REDIS_REPLY_STATUS, 0, "OK"), "SET k:%d again",
                          i) == GP_EOK;
    T_EQ_INT(w.n, NKEYS);
    T_OK(run_until(p_tally, &w, 20));
    T_OKM(t.ok == NKEYS, "every key writable again: %d (%s)", t.ok, t.first_bad);
}

int
main(void)
{
    const char *stack = getenv("GP_STACK_DIR"), *h = getenv("GP_HARNESS");
    char        seed[64], line[512], path[600];
    FILE       *f;
    conn_st     cs = {0};
    gp_kv      *kv = NULL;
    gp_kv_opts  o = {.command_timeout_ms = 3000};
    res         r = {0};

    signal(SIGPIPE, SIG_IGN);
    gp_log_setup("kv_cluster_test", getenv("GP_LOG_LEVEL"), 2);
    if (stack == NULL || h == NULL) {
        printf("not ok - run under tests/harness/with-stack.sh\n");
        return 1;
    }
    snprintf(cdir, sizeof(cdir), "%s", stack);
    T_EQ_INT(sh("\"%s/redis_cluster.sh\" start \"%s\" >/dev/null", h, cdir), 0);
    snprintf(path, sizeof(path), "%s/cluster.env", cdir);
    f = fopen(path, "r");
    T_OK(f != NULL);
    if (f == NULL)
        return T_DONE();
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "GP_CLUSTER_PORTS=", 17) == 0)
            sscanf(line + 17, "\"%d %d %d\"", &ports[0], &ports[1], &ports[2]);
    fclose(f);
    T_OK(ports[0] > 0 && ports[1] > 0 && ports[2] > 0);
    L = ev_default_loop(0);

    /* one seed is enough: the map names every master */
    snprintf(seed, sizeof(seed), "127.0.0.1:%d", ports[2]);
    o.cluster = true;
    o.seeds = seed;
    T_ERR(gp_kv_new(L, &o, conn_cb, &cs, &kv), GP_EOK);
    T_OK(run_until(p_up, &cs, 10));
    T_OK(gp_kv_is_connected(kv));

    test_all_slots(kv);
    test_crossslot(kv);
    test_script(kv);
    {
        gp_kv  *kv1 = NULL;
        conn_st cs1 = {0};

        o.command_timeout_ms = 1000;
        T_ERR(gp_kv_new(L, &o, conn_cb, &cs1, &kv1), GP_EOK);
        T_OK(run_until(p_up, &cs1, 10));
        test_deadline(kv1);
        gp_kv_free(kv1);
    }
    {
        gp_kv  *kv2 = NULL;
        conn_st cs2 = {0};

        o.command_timeout_ms = 30000;
        T_ERR(gp_kv_new(L, &o, conn_cb, &cs2, &kv2), GP_EOK);
        T_OK(run_until(p_up, &cs2, 10));
        test_migrate(kv, kv2);
        gp_kv_free(kv2);
    }
    test_master_down(kv, &cs);

    /* free with a command in flight: its callback runs once, UNAVAIL */
    T_ERR(gp_kv_cmdf(kv, res_cb, &r, "GET k:1"), GP_EOK);
    gp_kv_free(kv);
    T_EQ_INT(r.calls, 1);
    T_OK(r.err == GP_EUNAVAIL);
    run_until(NULL, NULL, 0.1);
    T_EQ_INT(r.calls, 1);
    ev_loop_destroy(L);
    sh("\"%s/redis_cluster.sh\" stop \"%s\"", h, cdir);
    return T_DONE();
}
