/* kvfan_test.c -- gp/kvfan.h against a private redis-server: every reply
 * lands in its own slot, also when a command in the middle gets an error
 * reply or is not sent at all (the client's in-flight cap), so later
 * replies are never shifted onto the wrong slot. */
#include <hiredis/hiredis.h>
#include <stdbool.h>

#include "gp/kv.h"
#include "gp/kvfan.h"
#include "test_stack.h"

#define N 1000

static struct ev_loop *loop;
static char            got[N][32];
static gp_err          slot_err[N];
static int             slot_calls[N];
static int             done;
static size_t          done_ok, done_pending;

static void
on_slot(void *arg, size_t i, const redisReply *rep, gp_err err)
{
    (void)arg;
    slot_calls[i]++;
    slot_err[i] = err;
    if (err == GP_EOK && rep->type == REDIS_REPLY_STRING)
        snprintf(got[i], sizeof(got[i]), "%s", rep->str);
}

static void
on_done(void *arg, const gp_kvfan *f)
{
    (void)arg;
    done++;
    done_ok = done_pending = 0;
    for (size_t i = 0; i < gp_kvfan_count(f); i++) {
        done_ok += gp_kvfan_err(f, i) == GP_EOK;
        done_pending += gp_kvfan_err(f, i) == GP_EPENDING;
    }
}

static void
conn(void *arg, bool up)
{
    *(int *)arg = up;
}

static void
reset(void)
{
    memset(got, 0, sizeof(got));
    memset(slot_err, 0, sizeof(slot_err));
    memset(slot_calls, 0, sizeof(slot_calls));
    done = 0;
}

int
main(void)
{
    gp_kv_opts    o = {.host = tl_env("GP_REDIS_HOST"), .port = atoi(tl_env("GP_REDIS_PORT"))};
    redisContext *c = redisConnect(o.host, o.port);
    redisReply   *rep;
    gp_kv        *kv;
    gp_kvfan     *f;
    int           up = 0, wrong = 0, sent = 0, toobig = 0, fill = 0;
    char          want[32];

    loop = ev_default_loop(0);
    T_OK(c != NULL && c->err == 0);
    for (int i = 0; i < N; i++)
        redisAppendCommand(c, "SET k:%d v:%d", i, i);
    for (int i = 0; i < N; i++) {
        redisGetReply(c, (void **)&rep);
        freeReplyObject(rep);
    }
    rep = redisCommand(c, "DEL k:500");                   /* a hash: GET fails WRONGTYPE */
    freeReplyObject(rep);
    rep = redisCommand(c, "HSET k:500 f v");
    freeReplyObject(rep);

    T_OK(gp_kv_new(loop, &o, conn, &up, &kv) == GP_EOK);
    tl_run_until(loop, &up, 5);
    T_OKM(up, "connected");

    /* 1: an error reply in the middle marks only its own slot. */
    reset();
    f = gp_kvfan_new(kv, N, on_slot, on_done, NULL);
    for (size_t i = 0; i < N; i++)
        sent += gp_kvfan_cmdf(f, i, "GET k:%lu", (unsigned long)i) == GP_EOK;
    T_EQ_INT(sent, N);
    sent = 0;
    T_OKM(gp_kvfan_cmdf(f, 3, "GET k:3") == GP_EINVAL, "a slot is issued once");
    gp_kvfan_end(f);
    tl_run_until(loop, &done, 5);
    T_EQ_INT(done, 1);
    for (int i = 0; i < N; i++) {
        snprintf(want, sizeof(want), "v:%d", i);
        if (slot_calls[i] != 1 || (i == 500 ? slot_err[i] != GP_EINTERNAL
                                            : slot_err[i] != GP_EOK || strcmp(got[i], want) != 0))
            wrong++;
    }
    T_OKM(wrong == 0, "every slot has its own reply, slot 500 its error (%d wrong)", wrong);
    T_EQ_INT(done_ok, N - 1);
    T_EQ_INT(done_pending, 0);

    /* 2: commands not sent (in-flight cap) in the middle of the fan-out
     * mark their own slots; the replies of those sent before them are not
     * shifted onto later slots. */
    reset();
    for (int i = 0; i < GP_KV_MAX_INFLIGHT - 100 && gp_kv_cmdf(kv, NULL, NULL, "PING") == GP_EOK; i++)
        fill++;
    T_EQ_INT(fill, GP_KV_MAX_INFLIGHT - 100);
    f = gp_kvfan_new(kv, N, on_slot, on_done, NULL);
    for (size_t i = 0; i < N; i++) {
        gp_err e = gp_kvfan_cmdf(f, i, "GET k:%lu", (unsigned long)i);

        sent += e == GP_EOK;
        toobig += e == GP_ETOOBIG;
    }
    T_OKM(sent == 100 && toobig == N - 100, "100 sent, the rest refused TOOBIG (%d, %d)", sent, toobig);
    T_OKM(slot_calls[100] == 1 && slot_err[100] == GP_ETOOBIG, "a refused slot is settled at once");
    gp_kvfan_end(f);
    tl_run_until(loop, &done, 10);
    T_EQ_INT(done, 1);
    wrong = 0;
    for (int i = 0; i < N; i++) {
        snprintf(want, sizeof(want), "v:%d", i);
        if (slot_calls[i] != 1 || (i < 100 ? slot_err[i] != GP_EOK || strcmp(got[i], want) != 0
                                           : slot_err[i] != GP_ETOOBIG || got[i][0] != '\0'))
            wrong++;
    }
    T_OKM(wrong == 0, "sent slots have their own replies, refused ones TOOBIG (%d wrong)", wrong);
    T_EQ_INT(done_ok, 100);

    /* 3: an empty fan-out ends at once. */
    reset();
    f = gp_kvfan_new(kv, 0, on_slot, on_done, NULL);
    gp_kvfan_end(f);
    T_EQ_INT(done, 1);

    gp_kv_free(kv);
    redisFree(c);
    return T_DONE();
}
