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
 * margin.
 *
 * Redis that lost its data (FLUSHALL, a restart without persistence) has
 * lost the grants, and a missing grant would open every fence at once.  So
 * every script here checks the shard's epoch (reserve_scripts.h) before it
 * reads a grant or a reservation, and refuses ('stale') without it: the
 * lease is answered UNAVAIL (the agent keeps its attempts to its own lease
 * end and renews again), the replace and retire calls wait a whole window,
 * the dispatch stamp is refused.
 * epoch.c rebuilds the shard from PostgreSQL first: every node with a live
 * attempt gets a grant of now + dispatch-timeout-ms, no earlier than any
 * grant Redis lost (every one was given before the rebuild, at most
 * dispatch-timeout-ms ahead), and only then the epoch.
 *
 * The dispatch stamp also wants the attempt's reservation on the node: a
 * booking made before a loss whose attempt row was committed after the
 * rebuild read PostgreSQL has none, and its GPUs may be booked again by
 * now; such a RunAttempt is not sent (the attempt failed to start, a
 * platform fault). */
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

#define FENCE_LUA_STALE(k) "if redis.call('EXISTS', " k ") == 0 then return 'stale' end\n"

/* KEYS grant, reservations, epoch; ARGV ms ahead of now, "<job>:<attempt>".
 * Moves the stamp to now + ahead unless it is later already; 'gone' when
 * the attempt holds no GPU of the node. */
static const char stamp_lua[] =
    FENCE_LUA_STALE("KEYS[3]")
    FENCE_LUA_NOW
    "local mine = false\n"
    "for _, v in ipairs(redis.call('HVALS', KEYS[2])) do\n"
    "  if string.match(v, '^(.*):%d+$') == ARGV[2] then mine = true end\n"
    "end\n"
    "if not mine then return 'gone' end\n"
    "local at = now + tonumber(ARGV[1])\n"
    "local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0\n"
    "if at > cur then redis.call('SET', KEYS[1], string.format('%.0f', at), 'PX', " GRANT_TTL_MS ") end\n"
    "return 1\n";

/* KEYS live hash (the registry's), reservations, grant, retired, epoch,
 * the registry's seeded mark; ARGV the reported attempts
 * "<job>:<attempt>".  'notfound' without the registry's 'reg' mark (first:
 * registering again grants nothing of ours, and the registration's stamp
 * holds the fence), but 'reseeding' while the registry has not restored
 * the shard's marks after a Redis loss (the node is renewed again in a
 * moment instead of every node registering at once); 'stale' without the
 * shard's epoch; else one 1 (keep) or 0 (kill) per reported attempt, and the
 * grant is stamped when anything is kept.  A retired attempt (below) is
 * killed though it still holds its GPUs. */
static const char lease_lua[] =
    "if not redis.call('HGET', KEYS[1], 'reg') then\n"
    "  if redis.call('EXISTS', KEYS[6]) == 0 then return 'reseeding' end\n"
    "  return 'notfound'\n"
    "end\n"
    FENCE_LUA_STALE("KEYS[5]")
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

/* KEYS live hash, reservations, grant, the shard's reservation index,
 * epoch; ARGV window (lease + margin), node id, then the attempts
 * "<job>:<attempt>".
 * {0, ms to wait} while the fence holds; else the attempts' reservations
 * on the node are removed and {1, GPUs removed}. */
static const char replace_lua[] =
    FENCE_LUA_STALE("KEYS[5]")
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

/* KEYS retired, reservations, grant, the shard's reservation index,
 * epoch; ARGV window, node id, "<job>:<attempt>".  The first call retires the attempt
 * on the node at max(now, the node's grant): no renewal keeps it from
 * then on (lease_lua), so it surely stopped there a window later.  Until
 * then {0, ms to wait}; after, its reservations on the node are removed
 * with its mark and {1, GPUs removed}. */
static const char retire_lua[] =
    FENCE_LUA_STALE("KEYS[5]")
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
    sched_grant_key(out, gp_shard_of(site), node);
}

/* A script's 'stale': the shard's epoch is missing (see the top); its
 * rebuild is asked for. */
static bool
stale(sched *s, unsigned shard, const redisReply *rep)
{
    if ((rep->type != REDIS_REPLY_STATUS && rep->type != REDIS_REPLY_STRING) ||
        strcmp(rep->str, "stale") != 0)
        return false;
    sched_shard_stale(s, shard);
    return true;
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

/* The calls' common part: who to tell, and the shard a 'stale' names. */
typedef struct fence_call {
    sched    *s;
    unsigned  shard;
    union {
        sched_fence_cb  *stamp;
        sched_lease_cb  *lease;
        sched_retire_cb *retire;
    } cb;
    void     *arg;
    uint32_t  n;                 /* the lease: attempts reported */
} fence_call;

/* The caller sets the callback. */
static fence_call *
call_new(sched *s, const char *site, void *arg)
{
    fence_call *c = calloc(1, sizeof(*c));

    if (c != NULL) {
        c->s = s;
        c->shard = gp_shard_of(site);
        c->arg = arg;
    }
    fence_init();
    return c;
}

static void
stamped(void *arg, const redisReply *rep, gp_err err)
{
    fence_call *c = arg;

    if (err == GP_EOK && rep->type == REDIS_REPLY_ERROR)
        err = GP_EUNAVAIL;
    else if (err == GP_EOK && stale(c->s, c->shard, rep))
        err = GP_EUNAVAIL;
    else if (err == GP_EOK && rep->type != REDIS_REPLY_INTEGER)
        err = GP_ECONFLICT;                /* 'gone': the attempt holds no GPU there */
    c->cb.stamp(c->arg, err);
    free(c);
}

gp_err
sched_fence_stamp(sched *s, const char *site, const char *node, const char *job,
                  uint32_t attempt, unsigned ahead_ms, sched_fence_cb *cb, void *arg)
{
    char        kg[SCHED_RES_KEY_LEN], kr[SCHED_RES_KEY_LEN], ke[SCHED_RES_KEY_LEN];
    char        ahead[16], held[GP_MAX_ID + 16];
    const char *keys[3] = {kg, kr, ke}, *args[2] = {ahead, held};
    fence_call *c = call_new(s, site, arg);
    gp_err      rc;

    if (c == NULL)
        return GP_ENOMEM;
    c->cb.stamp = cb;
    grant_key(kg, site, node);
    sched_res_key(kr, c->shard, node);
    sched_epoch_key(ke, c->shard);
    snprintf(ahead, sizeof(ahead), "%u", ahead_ms);
    snprintf(held, sizeof(held), "%s:%u", job, attempt);
    rc = gp_kvscript_call(&fs.stamp, gp_app_kv(s->app), stamped, c, 3, keys, 2, args, NULL);
    if (rc != GP_EOK)
        free(c);
    return rc;
}

/* ---- the lease: keep and kill in one atomic call ---------------------------------- */

static void
leased(void *arg, const redisReply *rep, gp_err err)
{
    fence_call     *c = arg;
    bool            keep[MSG_LEASE_RENEW_ATTEMPTS_MAXITEMS] = {false};

    if (err == GP_EOK && stale(c->s, c->shard, rep))
        err = GP_EUNAVAIL;                 /* nothing granted before the rebuild */
    else if (err == GP_EOK && (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS) &&
             strcmp(rep->str, "notfound") == 0)
        err = GP_ENOTFOUND;
    else if (err == GP_EOK && (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS) &&
             strcmp(rep->str, "reseeding") == 0)
        err = GP_ECONFLICT;                /* the registry restores its marks: again soon */
    else if (err == GP_EOK && (rep->type != REDIS_REPLY_ARRAY || rep->elements != c->n))
        err = GP_EUNAVAIL;
    for (uint32_t i = 0; err == GP_EOK && i < c->n; i++)
        keep[i] = rep->element[i]->type == REDIS_REPLY_INTEGER && rep->element[i]->integer == 1;
    c->cb.lease(c->arg, err, keep, c->n);
    free(c);
}

gp_err
sched_fence_lease(sched *s, const char *site, const char *node, const msg_lease_renew *q,
                  sched_lease_cb *cb, void *arg)
{
    char                   kn[SCHED_RES_KEY_LEN], kr[SCHED_RES_KEY_LEN], kg[SCHED_RES_KEY_LEN];
    char                   kd[SCHED_RES_KEY_LEN], ke[SCHED_RES_KEY_LEN], ks[SCHED_RES_KEY_LEN];
    char                   held[MSG_LEASE_RENEW_ATTEMPTS_MAXITEMS][GP_MAX_ID + 16];
    const char            *keys[6] = {kn, kr, kg, kd, ke, ks};
    const char            *args[MSG_LEASE_RENEW_ATTEMPTS_MAXITEMS];
    const msg_attempt_ref *a = q->attempts.v;
    fence_call            *c;
    gp_err                 rc;

    if (q->attempts.n > MSG_LEASE_RENEW_ATTEMPTS_MAXITEMS ||
        (c = call_new(s, site, arg)) == NULL)
        return GP_ENOMEM;
    c->cb.lease = cb;
    c->n = q->attempts.n;
    sched_res_live_key(kn, c->shard, node);
    sched_res_key(kr, c->shard, node);
    grant_key(kg, site, node);
    retired_key(kd, site, node);
    sched_epoch_key(ke, c->shard);
    sched_res_seeded_key(ks, c->shard);
    for (uint32_t i = 0; i < q->attempts.n; i++) {
        snprintf(held[i], sizeof(held[i]), "%s:%u", a[i].job_id, a[i].attempt);
        args[i] = held[i];
    }
    rc = gp_kvscript_call(&fs.lease, gp_app_kv(s->app), leased, c, 6, keys, (int)q->attempts.n,
                          args, NULL);
    if (rc != GP_EOK)
        free(c);
    return rc;
}

/* ---- retiring, replacing: {0, ms to wait} or {1, GPUs removed} --------------------- */

/* A stale shard waits a whole window: its rebuild stamps a grant that
 * holds the fence at least that long anyway. */
static void
fence_answered(void *arg, const redisReply *rep, gp_err err)
{
    fence_call *c = arg;
    long long   wait = 0;

    if (err == GP_EOK && stale(c->s, c->shard, rep))
        wait = fence_window_ms(c->s);
    else if (err == GP_EOK && (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
                               rep->element[0]->type != REDIS_REPLY_INTEGER ||
                               rep->element[1]->type != REDIS_REPLY_INTEGER))
        err = GP_EUNAVAIL;
    else if (err == GP_EOK && rep->element[0]->integer == 0)
        wait = rep->element[1]->integer > 0 ? rep->element[1]->integer : 1;
    c->cb.retire(c->arg, err, (uint32_t)(wait > UINT32_MAX ? UINT32_MAX : wait));
    free(c);
}

gp_err
sched_fence_retire(sched *s, const char *site, const char *node, const char *job,
                   uint32_t attempt, sched_retire_cb *cb, void *arg)
{
    char        kd[SCHED_RES_KEY_LEN], kr[SCHED_RES_KEY_LEN], kg[SCHED_RES_KEY_LEN];
    char        ki[SCHED_RES_KEY_LEN], ke[SCHED_RES_KEY_LEN], window[16], held[GP_MAX_ID + 16];
    const char *keys[5] = {kd, kr, kg, ki, ke}, *args[3] = {window, node, held};
    fence_call *c = call_new(s, site, arg);
    gp_err      rc;

    if (c == NULL)
        return GP_ENOMEM;
    c->cb.retire = cb;
    retired_key(kd, site, node);
    sched_res_key(kr, c->shard, node);
    grant_key(kg, site, node);
    sched_res_index_key(ki, c->shard);
    sched_epoch_key(ke, c->shard);
    snprintf(window, sizeof(window), "%u", fence_window_ms(s));
    snprintf(held, sizeof(held), "%s:%u", job, attempt);
    rc = gp_kvscript_call(&fs.retire, gp_app_kv(s->app), fence_answered, c, 5, keys, 3, args,
                          NULL);
    if (rc != GP_EOK)
        free(c);
    return rc;
}

gp_err
sched_fence_replace(sched *s, const char *site, const char *node, char (*job)[GP_MAX_ID + 1],
                    const uint32_t *attempt, unsigned n, sched_retire_cb *cb, void *arg)
{
    char          kn[SCHED_RES_KEY_LEN], kr[SCHED_RES_KEY_LEN], ke[SCHED_RES_KEY_LEN];
    char          kg[SCHED_RES_KEY_LEN], ki[SCHED_RES_KEY_LEN], window[16];
    char        (*held)[GP_MAX_ID + 16] = calloc(n ? n : 1, sizeof(*held));
    const char  **args = calloc(n + 2, sizeof(*args));
    const char   *keys[5] = {kn, kr, kg, ki, ke};
    fence_call   *c = call_new(s, site, arg);
    gp_err        rc = GP_ENOMEM;

    if (held != NULL && args != NULL && c != NULL) {
        c->cb.retire = cb;
        sched_res_live_key(kn, c->shard, node);
        sched_res_key(kr, c->shard, node);
        grant_key(kg, site, node);
        sched_res_index_key(ki, c->shard);
        sched_epoch_key(ke, c->shard);
        snprintf(window, sizeof(window), "%u", fence_window_ms(s));
        args[0] = window;
        args[1] = node;
        for (unsigned i = 0; i < n; i++) {
            snprintf(held[i], sizeof(held[i]), "%s:%u", job[i], attempt[i]);
            args[i + 2] = held[i];
        }
        rc = gp_kvscript_call(&fs.replace, gp_app_kv(s->app), fence_answered, c, 5, keys,
                              (int)n + 2, args, NULL);
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
