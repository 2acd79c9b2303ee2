/* kvscript_test.c -- gp/kvscript.h against a private redis-server: a call
 * before the SHA1 is known goes as EVAL, then by EVALSHA; after SCRIPT
 * FLUSH (a restarted or flushed Redis, or a cluster node that never saw the
 * script) the call still returns the script's reply, binary arguments
 * intact, and the calls after it go by EVALSHA again. */
#include <hiredis/hiredis.h>
#include <stdbool.h>

#include "gp/kv.h"
#include "gp/kvscript.h"
#include "test_stack.h"

static struct ev_loop *loop;
static int             replies;
static char            got[64];
static size_t          got_len;
static gp_err          got_err;

static const char lua[] = "redis.call('SET', KEYS[1], ARGV[1])\n"
                          "return {KEYS[1], redis.call('GET', KEYS[1])}\n";

static void
on_reply(void *arg, const redisReply *rep, gp_err err)
{
    (void)arg;
    replies++;
    got_err = err;
    got_len = 0;
    got[0] = '\0';
    if (err == GP_EOK && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
        rep->element[1]->len < sizeof(got)) {
        memcpy(got, rep->element[1]->str, rep->element[1]->len);
        got_len = rep->element[1]->len;
        got[got_len] = '\0';
    }
}

static void
conn(void *arg, bool up)
{
    *(int *)arg = up;
}

static long long
evalsha_calls(redisContext *c)
{
    redisReply *rep = redisCommand(c, "INFO commandstats");
    const char *p = rep != NULL && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, "cmdstat_evalsha:calls=") : NULL;
    long long   v = p != NULL ? atoll(p + strlen("cmdstat_evalsha:calls=")) : 0;

    freeReplyObject(rep);
    return v;
}

/* One call with a binary argument; true when its reply is that argument. */
static bool
one_call(gp_kvscript *s, gp_kv *kv, const char *tag)
{
    const char *keys[1] = {"ks:{1}:a"};
    char        val[32];
    const char *args[1] = {val};
    size_t      lens[1];
    int         want = replies + 1;
    int         done = 0;

    lens[0] = (size_t)snprintf(val, sizeof(val), "%s", tag) + 2;   /* with "\0x" */
    val[lens[0] - 2] = '\0';
    val[lens[0] - 1] = 'x';
    if (gp_kvscript_call(s, kv, on_reply, NULL, 1, keys, 1, args, lens) != GP_EOK)
        return false;
    for (double t0 = tl_now(); replies < want && tl_now() - t0 < 5;)
        tl_run_until(loop, &done, 0.01);
    return replies == want && got_err == GP_EOK && got_len == lens[0] &&
           memcmp(got, val, lens[0]) == 0;
}

int
main(void)
{
    gp_kv_opts    o = {.host = tl_env("GP_REDIS_HOST"), .port = atoi(tl_env("GP_REDIS_PORT"))};
    redisContext *c = redisConnect(o.host, o.port);
    gp_kv        *kv;
    gp_kvscript   s;
    int           up = 0;
    long long     e0, e1;

    loop = ev_default_loop(0);
    T_OK(c != NULL && c->err == 0);
    T_OK(gp_kv_new(loop, &o, conn, &up, &kv) == GP_EOK);
    tl_run_until(loop, &up, 5);
    T_OKM(up, "connected");
    gp_kvscript_init(&s, lua);

    T_OKM(one_call(&s, kv, "first"), "a call before the SHA1 is known works (EVAL)");
    T_EQ_INT(s.evals, 1);
    T_OKM(strlen(s.sha) == 40, "the SHA1 is known after the first call (%s)", s.sha);
    e0 = evalsha_calls(c);
    T_OKM(one_call(&s, kv, "second"), "a call by SHA1 works");
    T_EQ_INT(evalsha_calls(c), e0 + 1);

    freeReplyObject(redisCommand(c, "SCRIPT FLUSH"));
    T_OKM(one_call(&s, kv, "after-flush"), "after SCRIPT FLUSH the call still returns the script's reply");
    T_EQ_INT(s.noscript, 1);
    e1 = evalsha_calls(c);
    T_OKM(one_call(&s, kv, "again") && one_call(&s, kv, "and again"), "the calls after it work");
    T_OKM(s.noscript == 1 && evalsha_calls(c) == e1 + 2, "by SHA1 again (%lld EVALSHA)", evalsha_calls(c) - e1);

    /* flushed twice in a row, with calls in flight together */
    freeReplyObject(redisCommand(c, "SCRIPT FLUSH"));
    {
        const char *keys[1] = {"ks:{1}:b"}, *args[1] = {"x"};
        int         want = replies + 3, done = 0;

        for (int i = 0; i < 3; i++)
            T_OK(gp_kvscript_call(&s, kv, on_reply, NULL, 1, keys, 1, args, NULL) == GP_EOK);
        for (double t0 = tl_now(); replies < want && tl_now() - t0 < 5;)
            tl_run_until(loop, &done, 0.01);
        T_OKM(replies == want && got_err == GP_EOK && strcmp(got, "x") == 0,
              "three calls in flight across a flush all answered");
    }
    T_OKM(gp_kvscript_call(&s, kv, on_reply, NULL, GP_KVSCRIPT_MAX_ARGS, NULL, 1, NULL, NULL) == GP_EINVAL,
          "too many arguments: INVAL");

    gp_kv_free(kv);
    redisFree(c);
    return T_DONE();
}
