/* fence.c -- fencing without clock sync: when a lost node's attempts may
 * be replaced, and the grants that decide it (a store: Redis scripts;
 * replace.c is the route that asks it).
 *
 * An agent keeps an attempt only while its lease runs, counted on its own
 * monotonic clock from when it SENT the request that granted it (agent.c:
 * a renewal, a registration) or from when it started the attempt (a
 * RunAttempt).  Every grant is stamped in Redis on the node's shard, on
 * Redis's clock, no earlier than the agent's own start of that lease:
 *
 *   - a lease renewal that keeps anything: the lease script stamps "now"
 *     in the same atomic call that reads the reservations it keeps;
 *   - a RunAttempt: stamped before it is sent, "now + dispatch-timeout-ms"
 *     (the agent takes it at the latest when the call's deadline ends; a
 *     later start is refused by the next renewal's kill list);
 *   - a registration: the registry's hb script stamps 'regat' in the node's
 *     live hash (its reply keeps what the agent reports, until the first
 *     renewal).
 *
 *     gp:{N}:grant:<node>   the latest grant moment, ms on Redis's clock
 *                           (expires a day after: an idle node forgets it)
 *
 * The fence of a node opens at max(grant, regat) + lease + margin.  The
 * margin covers the rate difference of the two clocks over one lease and
 * the time from a reply to its use.  The replace script checks the fence
 * and removes the node's reservations of the attempts it replaces in one
 * call; it and the lease script are atomic with respect to each other (one
 * shard, one slot), so a renewal either came before (its stamp moves the
 * fence on: wait) or after (it finds no reservation: the attempt is in its
 * kill list).  Only then are the attempts ended in PostgreSQL (lost, their
 * jobs requeued from their last checkpoint), so a replacement can never
 * start while the old attempt may still run.  Redis's clock is one host's
 * wall clock: it must be slewed (NTP), not stepped forward by more than the
 * margin. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/kvscript.h"
#include "gp/log.h"
#include "gp/shard.h"
#include "reserve_scripts.h"
#include "scheduler.h"

#define GRANT_TTL_MS "86400000"

#define FENCE_LUA_NOW                                                                       \
    "local t = redis.call('TIME')\n"                                                        \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

/* KEYS grant; ARGV ms ahead of now.  Moves the stamp to now + ahead unless
 * it is later already. */
static const char stamp_lua[] =
    FENCE_LUA_NOW
    "local at = now + tonumber(ARGV[1])\n"
    "local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0\n"
    "if at > cur then redis.call('SET', KEYS[1], string.format('%.0f', at), 'PX', " GRANT_TTL_MS ") end\n"
    "return 1\n";

/* KEYS live hash (the registry's), reservations, grant, retired; ARGV the
 * reported attempts "<job>:<attempt>".  'notfound' without the registry's
 * 'reg' mark; else one 1 (keep) or 0 (kill) per reported attempt, and the
 * grant is stamped when anything is kept.  A retired attempt (below) is
 * killed though it still holds its GPUs. */
static const char lease_lua[] =
    "if not redis.call('HGET', KEYS[1], 'reg') then return 'notfound' end\n"
    "local held = {}\n"
    "for _, v in ipairs(redis.call('HVALS', KEYS[2])) do\n"
    "  local h = string.match(v, '^(.*):%d+$')\n"
    "  if h then held[h] = true end\n"
    "end\n"
    "local out, any = {}, false\n"
    "for i = 1, #ARGV do\n"
    "  if held[ARGV[i]] and redis.call('HEXISTS', KEYS[4], ARGV[i]) == 0 then\n"
    "    out[i] = 1; any = true\n"
    "  else out[i] = 0 end\n"
    "end\n"
    "if any then\n"
    FENCE_LUA_NOW
    "  local cur = tonumber(redis.call('GET', KEYS[3]) or '0') or 0\n"
    "  if now > cur then redis.call('SET', KEYS[3], string.format('%.0f', now), 'PX', " GRANT_TTL_MS ") end\n"
    "end\n"
    "return out\n";

/* KEYS live hash, reservations, grant, the shard's reservation index; ARGV
 * window (lease + margin), node id, then the attempts "<job>:<attempt>".
 * {0, ms to wait} while the fence holds; else the attempts' reservations
 * on the node are removed and {1, GPUs removed}. */
static const char replace_lua[] =
    FENCE_LUA_NOW
    "local base = tonumber(redis.call('GET', KEYS[3]) or '0') or 0\n"
    "local r = tonumber(redis.call('HGET', KEYS[1], 'regat') or '0') or 0\n"
    "if r > base then base = r end\n"
    "local open = base + tonumber(ARGV[1])\n"
    "if now < open then return {0, open - now} end\n"
    "local want = {}\n"
    "for i = 3, #ARGV do want[ARGV[i]] = true end\n"
    "local h = redis.call('HGETALL', KEYS[2])\n"
    "local n = 0\n"
    "for i = 1, #h, 2 do\n"
    "  local who = string.match(h[i + 1], '^(.*):%d+$')\n"
    "  if who and want[who] then redis.call('HDEL', KEYS[2], h[i]); n = n + 1 end\n"
    "end\n"
    "if redis.call('HLEN', KEYS[2]) == 0 then redis.call('SREM', KEYS[4], ARGV[2]) end\n"
    "return {1, n}\n";

/* KEYS retired, reservations, grant, the shard's reservation index; ARGV
 * window, node id, "<job>:<attempt>".  The first call retires the attempt
 * on the node at max(now, the node's grant): no renewal keeps it from
 * then on (lease_lua), so it surely stopped there a window later.  Until
 * then {0, ms to wait}; after, its reservations on the node are removed
 * with its mark and {1, GPUs removed}. */
static const char retire_lua[] =
    FENCE_LUA_NOW
    "local at = tonumber(redis.call('HGET', KEYS[1], ARGV[3]) or '')\n"
    "if not at then\n"
    "  at = tonumber(redis.call('GET', KEYS[3]) or '0') or 0\n"
    "  if now > at then at = now end\n"
    "  redis.call('HSET', KEYS[1], ARGV[3], string.format('%.0f', at))\n"
    "  redis.call('PEXPIRE', KEYS[1], " GRANT_TTL_MS ")\n"
    "end\n"
    "local open = at + tonumber(ARGV[1])\n"
    "if now < open then return {0, open - now} end\n"
    "local h = redis.call('HGETALL', KEYS[2])\n"
    "local n = 0\n"
    "for i = 1, #h, 2 do\n"
    "  if string.match(h[i + 1], '^(.*):%d+$') == ARGV[3] then\n"
    "    redis.call('HDEL', KEYS[2], h[i]); n = n + 1\n"
    "  end\n"
    "end\n"
    "if redis.call('HLEN', KEYS[2]) == 0 then redis.call('SREM', KEYS[4], ARGV[2]) end\n"
    "redis.call('HDEL', KEYS[1], ARGV[3])\n"
    "return {1, n}\n";

static struct {
    gp_kvscript stamp, lease, replace, retire;
    bool        init;
} fs;

static void
fence_init(void)
{
    if (fs.init)
        return;
    gp_kvscript_init(&fs.stamp, stamp_lua);
    gp_kvscript_init(&fs.lease, lease_lua);
    gp_kvscript_init(&fs.replace, replace_lua);
    gp_kvscript_init(&fs.retire, retire_lua);
    fs.init = true;
}

static void
grant_key(char *out, const char *site, const char *node)
{
    snprintf(out, SCHED_RES_KEY_LEN, "gp:{%u}:grant:%s", gp_shard_of(site), node);
}

/*     gp:{N}:retired:<node>  hash: "<job>:<attempt>" -> when it was retired
 *                            (Redis's clock; expires a day after the last) */
static void
retired_key(char *out, const char *site, const char *node)
{
    snprintf(out, SCHED_RES_KEY_LEN, "gp:{%u}:retired:%s", gp_shard_of(site), node);
}

/* The window after the last grant: the longest lease an agent may hold
 * (the lease handed in replies, or the RunAttempt's own) plus the margin. */
static unsigned
fence_window_ms(const sched *s)
{
    unsigned lease = s->cfg->lease_ms;

    if (s->cfg->attempt_lease_ms > lease)
        lease = s->cfg->attempt_lease_ms;
    return lease + s->cfg->fence_margin_ms;
}

/* ---- the dispatch stamp ------------------------------------------------------------ */

typedef struct stamp_call {
    sched_fence_cb *cb;
    void           *arg;
} stamp_call;

static void
stamped(void *arg, const redisReply *rep, gp_err err)
{
    stamp_call *c = arg;

    if (err == GP_EOK && rep->type == REDIS_REPLY_ERROR)
        err = GP_EUNAVAIL;
    c->cb(c->arg, err);
    free(c);
}

gp_err
sched_fence_stamp(sched *s, const char *site, const char *node, unsigned ahead_ms,
                  sched_fence_cb *cb, void *arg)
{
    char        key[SCHED_RES_KEY_LEN], ahead[16];
    const char *keys[1] = {key}, *args[1] = {ahead};
    stamp_call *c = malloc(sizeof(*c));
    gp_err      rc;

    if (c == NULL)
        return GP_ENOMEM;
    fence_init();
    c->cb = cb;
    c->arg = arg;
    grant_key(key, site, node);
    snprintf(ahead, sizeof(ahead), "%u", ahead_ms);
    rc = gp_kvscript_call(&fs.stamp, gp_app_kv(s->app), stamped, c, 1, keys, 1, args, NULL);
    if (rc != GP_EOK)
        free(c);
    return rc;
}

/* ---- the lease: keep and kill in one atomic call ---------------------------------- */

typedef struct lease_call {
    sched_lease_cb *cb;
    void           *arg;
    uint32_t        n;
} lease_call;

static void
leased(void *arg, const redisReply *rep, gp_err err)
{
    lease_call *c = arg;
    bool        keep[MSG_LEASE_RENEW_ATTEMPTS_MAXITEMS] = {false};

    if (err == GP_EOK && (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS) &&
        strcmp(rep->str, "notfound") == 0)
        err = GP_ENOTFOUND;
    else if (err == GP_EOK && (rep->type != REDIS_REPLY_ARRAY || rep->elements != c->n))
        err = GP_EUNAVAIL;
    for (uint32_t i = 0; err == GP_EOK && i < c->n; i++)
        keep[i] = rep->element[i]->type == REDIS_REPLY_INTEGER && rep->element[i]->integer == 1;
    c->cb(c->arg, err, keep, c->n);
    free(c);
}

gp_err
sched_fence_lease(sched *s, const char *site, const char *node, const msg_lease_renew *q,
                  sched_lease_cb *cb, void *arg)
{
    char                   kn[SCHED_RES_KEY_LEN], kr[SCHED_RES_KEY_LEN], kg[SCHED_RES_KEY_LEN];
    char                   kd[SCHED_RES_KEY_LEN];
    char                   held[MSG_LEASE_RENEW_ATTEMPTS_MAXITEMS][GP_MAX_ID + 16];
    const char            *keys[4] = {kn, kr, kg, kd}, *args[MSG_LEASE_RENEW_ATTEMPTS_MAXITEMS];
    const msg_attempt_ref *a = q->attempts.v;
    lease_call            *c;
    unsigned               shard = gp_shard_of(site);
    gp_err                 rc;

    if (q->attempts.n > MSG_LEASE_RENEW_ATTEMPTS_MAXITEMS || (c = malloc(sizeof(*c))) == NULL)
        return GP_ENOMEM;
    fence_init();
    c->cb = cb;
    c->arg = arg;
    c->n = q->attempts.n;
    sched_res_live_key(kn, shard, node);
    sched_res_key(kr, shard, node);
    grant_key(kg, site, node);
    retired_key(kd, site, node);
    for (uint32_t i = 0; i < q->attempts.n; i++) {
        snprintf(held[i], sizeof(held[i]), "%s:%u", a[i].job_id, a[i].attempt);
        args[i] = held[i];
    }
    rc = gp_kvscript_call(&fs.lease, gp_app_kv(s->app), leased, c, 4, keys, (int)q->attempts.n,
                          args, NULL);
    if (rc != GP_EOK)
        free(c);
    return rc;
}

/* ---- retiring an attempt a node may run unknown to us ----------------------------- */

typedef struct retire_call {
    sched_retire_cb *cb;
    void            *arg;
} retire_call;

static void
retire_answered(void *arg, const redisReply *rep, gp_err err)
{
    retire_call *c = arg;
    long long    wait = 0;

    if (err == GP_EOK && (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
                          rep->element[0]->type != REDIS_REPLY_INTEGER ||
                          rep->element[1]->type != REDIS_REPLY_INTEGER))
        err = GP_EUNAVAIL;
    if (err == GP_EOK && rep->element[0]->integer == 0)
        wait = rep->element[1]->integer > 0 ? rep->element[1]->integer : 1;
    c->cb(c->arg, err, (uint32_t)(wait > UINT32_MAX ? UINT32_MAX : wait));
    free(c);
}

gp_err
sched_fence_retire(sched *s, const char *site, const char *node, const char *job,
                   uint32_t attempt, sched_retire_cb *cb, void *arg)
{
    char         kd[SCHED_RES_KEY_LEN], kr[SCHED_RES_KEY_LEN], kg[SCHED_RES_KEY_LEN];
    char         ki[SCHED_RES_KEY_LEN], window[16], held[GP_MAX_ID + 16];
    const char  *keys[4] = {kd, kr, kg, ki}, *args[3] = {window, node, held};
    unsigned     shard = gp_shard_of(site);
    retire_call *c = malloc(sizeof(*c));
    gp_err       rc;

    if (c == NULL)
        return GP_ENOMEM;
    fence_init();
    *c = (retire_call){cb, arg};
    retired_key(kd, site, node);
    sched_res_key(kr, shard, node);
    grant_key(kg, site, node);
    sched_res_index_key(ki, shard);
    snprintf(window, sizeof(window), "%u", fence_window_ms(s));
    snprintf(held, sizeof(held), "%s:%u", job, attempt);
    rc = gp_kvscript_call(&fs.retire, gp_app_kv(s->app), retire_answered, c, 4, keys, 3, args,
                          NULL);
    if (rc != GP_EOK)
        free(c);
    return rc;
}

/* ---- a lost node's attempts: their reservations once the fence opens ---------- */

typedef struct replace_call {
    sched_retire_cb *cb;
    void            *arg;
} replace_call;

/* {0, ms to wait} while the fence holds; {1, GPUs removed} once open. */
static void
fenced(void *arg, const redisReply *rep, gp_err err)
{
    replace_call *c = arg;
    long long     wait = 0;

    if (err == GP_EOK && (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
                          rep->element[0]->type != REDIS_REPLY_INTEGER ||
                          rep->element[1]->type != REDIS_REPLY_INTEGER))
        err = GP_EUNAVAIL;
    if (err == GP_EOK && rep->element[0]->integer == 0)
        wait = rep->element[1]->integer > 0 ? rep->element[1]->integer : 1;
    c->cb(c->arg, err, (uint32_t)(wait > UINT32_MAX ? UINT32_MAX : wait));
    free(c);
}

gp_err
sched_fence_replace(sched *s, const char *site, const char *node, char (*job)[GP_MAX_ID + 1],
                    const uint32_t *attempt, unsigned n, sched_retire_cb *cb, void *arg)
{
    char          kn[SCHED_RES_KEY_LEN], kr[SCHED_RES_KEY_LEN];
    char          kg[SCHED_RES_KEY_LEN], ki[SCHED_RES_KEY_LEN], window[16];
    char        (*held)[GP_MAX_ID + 16] = calloc(n ? n : 1, sizeof(*held));
    const char  **args = calloc(n + 2, sizeof(*args));
    const char   *keys[4] = {kn, kr, kg, ki};
    unsigned      shard = gp_shard_of(site);
    replace_call *c = malloc(sizeof(*c));
    gp_err        rc = GP_ENOMEM;

    if (held != NULL && args != NULL && c != NULL) {
        fence_init();
        *c = (replace_call){cb, arg};
        sched_res_live_key(kn, shard, node);
        sched_res_key(kr, shard, node);
        grant_key(kg, site, node);
        sched_res_index_key(ki, shard);
        snprintf(window, sizeof(window), "%u", fence_window_ms(s));
        args[0] = window;
        args[1] = node;
        for (unsigned i = 0; i < n; i++) {
            snprintf(held[i], sizeof(held[i]), "%s:%u", job[i], attempt[i]);
            args[i + 2] = held[i];
        }
        rc = gp_kvscript_call(&fs.replace, gp_app_kv(s->app), fenced, c, 4, keys, (int)n + 2,
                              args, NULL);
    }
    if (rc != GP_EOK)
        free(c);
    free(held);          /* the call copied its arguments */
    free(args);
    return rc;
}

void
sched_fence_start(sched *s)
{
    (void)s;
    fence_init();
}
