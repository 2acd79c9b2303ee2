/* reserve_scripts.h -- the scheduler's GPU reservation keys and Lua
 * scripts, in a header so that a benchmark can run redis-benchmark on
 * exactly the scripts the scheduler runs.  Layout and rules: reserve.h.
 *
 * Every script declares every key it touches in KEYS, and every key of one
 * call carries the site's shard tag {N} (gp/shard.h), so one call is one
 * Redis Cluster slot.  Values are "<job>:<attempt>:<reserved_ms>"; the
 * holder of a GPU is the value less its last ":<ms>" (job ids are
 * gp_id_ok ids: no ':'). */
#ifndef SCHED_RESERVE_SCRIPTS_H
#define SCHED_RESERVE_SCRIPTS_H

#include <stdio.h>

#include "gp/shard.h"

/* "gp:{255}:res:" + a 63-byte id + NUL fit in 96. */
#define SCHED_RES_KEY_LEN 96

/* The hash of one node's reservations: GPU index -> "<job>:<attempt>:<ms>". */
static inline void
sched_res_key(char *out, unsigned shard, const char *node)
{
    snprintf(out, SCHED_RES_KEY_LEN, "gp:{%u}:res:%s", shard, node);
}

/* The set of a shard's nodes that hold at least one reservation, so a
 * reconcile walks them without SCAN (which a cluster cannot route). */
static inline void
sched_res_index_key(char *out, unsigned shard)
{
    snprintf(out, SCHED_RES_KEY_LEN, "gp:{%u}:resnodes", shard);
}

/* The registry's live hash of a node (services/registry/scripts.h); read
 * only, for its 'state' and 'reg' fields. */
static inline void
sched_res_live_key(char *out, unsigned shard, const char *node)
{
    snprintf(out, SCHED_RES_KEY_LEN, "gp:{%u}:node:%s", shard, node);
}

/* The registry's mark that it restored the shard's 'reg' marks after a
 * Redis loss (services/registry/scripts.h, registry_seeded_key); read
 * only, by the lease. */
static inline void
sched_res_seeded_key(char *out, unsigned shard)
{
    snprintf(out, SCHED_RES_KEY_LEN, "gp:{%u}:seeded", shard);
}

/* A shard's epoch: present while the shard's scheduler keys (reservations,
 * grants, retire marks) are whole.  Redis that lost its data (FLUSHALL, a
 * restart without persistence, a failover to an empty replica) lacks it,
 * and every script that books, grants, renews or opens a fence refuses
 * ('stale') until epoch.c rebuilt the shard from PostgreSQL and wrote it
 * again: a missing reservation or grant is never read as "free" or "no
 * lease". */
static inline void
sched_epoch_key(char *out, unsigned shard)
{
    snprintf(out, SCHED_RES_KEY_LEN, "gp:{%u}:sched:epoch", shard);
}

/* The latest grant of a node, ms on Redis's clock (fence.c). */
static inline void
sched_grant_key(char *out, unsigned shard, const char *node)
{
    snprintf(out, SCHED_RES_KEY_LEN, "gp:{%u}:grant:%s", shard, node);
}

/* Redis's own clock (the shard master's), as the registry's scripts read
 * it: 'now' in ms, 'nows' the same as an integer string.  Read first, so
 * the script's writes come after it (required before Redis 5). */
#define SCHED_RES_LUA_NOW                                                                   \
    "local t = redis.call('TIME')\n"                                                        \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"               \
    "local nows = string.format('%.0f', now)\n"

/* The holder "<job>:<attempt>" of a stored value (nil when malformed). */
#define SCHED_RES_LUA_HOLDER_OF                                                             \
    "local function holder_of(v) return (string.match(v, '^(.*):%d+$')) end\n"

/* A hold: the GPUs a preempted attempt gave back, kept for its preemptor
 * "<job>:0:<ms>" (attempt 0 is never an attempt: attempts count from 1).
 * Only that job may book a held GPU, until SCHED_RES_HOLD_MS after the
 * hold on Redis's clock; then it is free to anyone.  Without it another
 * instance placed the requeued lower-priority victim on the freed GPUs
 * before the preemptor's instance saw them free (sched_place_test part 5
 * with two instances). */
#define SCHED_RES_HOLD_MS     20000
#define SCHED_RES_HOLD_MS_LUA "20000"

/* true when v is a hold ("<job>:0:<ms>") that 'job' may take: its own, or
 * one past SCHED_RES_HOLD_MS (needs 'now'). */
#define SCHED_RES_LUA_TAKES_HOLD                                                            \
    "local function takes_hold(v, job)\n"                                                   \
    "  local j, ms = string.match(v, '^(.*):0:(%d+)$')\n"                                   \
    "  if not j then return false end\n"                                                   \
    "  return j == job or now - tonumber(ms) >= " SCHED_RES_HOLD_MS_LUA "\n"               \
    "end\n"

/* Book GPUs of one or more nodes of one site, all or nothing.
 * KEYS[1] the shard's index; then per node i: KEYS[2i] its reservations,
 * KEYS[2i+1] its live hash; last, the shard's epoch.  ARGV[1] holder
 * "<job>:<attempt>"; per node i: ARGV[2i] node id, ARGV[2i+1] GPU indexes
 * "0,3".  Every check comes before any write, so a refusal writes nothing:
 *   {'stale'}                   the shard's epoch is missing: Redis lost the
 *                               bookings PostgreSQL's live attempts hold
 *   {'unhealthy', node, state}  live hash without 'reg' ("unregistered")
 *                               or a state other than healthy
 *   {'busy', node, gpu, value}  a GPU held by another holder (or held for
 *                               another job's preemption, unexpired)
 *   {'ok', n}                   booked; n = GPUs newly booked (0: all were
 *                               already this holder's, an idempotent retry)
 * A job that books a GPU held for it takes it, and the node's other GPUs
 * held for it are freed (it needs them no more). */
static const char sched_res_book_lua[] =
    SCHED_RES_LUA_NOW
    SCHED_RES_LUA_HOLDER_OF
    SCHED_RES_LUA_TAKES_HOLD
    "if redis.call('EXISTS', KEYS[#KEYS]) == 0 then return {'stale'} end\n"
    "local holder = ARGV[1]\n"
    "local job = string.match(holder, '^(.*):%d+$')\n"
    "local n = (#KEYS - 2) / 2\n"
    "for i = 1, n do\n"
    "  local live = redis.call('HMGET', KEYS[2 * i + 1], 'state', 'reg')\n"
    "  if not live[2] then return {'unhealthy', ARGV[2 * i], 'unregistered'} end\n"
    "  if live[1] ~= 'healthy' then return {'unhealthy', ARGV[2 * i], live[1] or 'unknown'} end\n"
    "  for g in string.gmatch(ARGV[2 * i + 1], '%d+') do\n"
    "    local v = redis.call('HGET', KEYS[2 * i], g)\n"
    "    if v and holder_of(v) ~= holder and not takes_hold(v, job) then\n"
    "      return {'busy', ARGV[2 * i], g, v}\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local booked, mine = 0, job .. ':0'\n"
    "for i = 1, n do\n"
    "  local k = KEYS[2 * i]\n"
    "  local took = false\n"
    "  for g in string.gmatch(ARGV[2 * i + 1], '%d+') do\n"
    "    local v = redis.call('HGET', k, g)\n"
    "    if not v or holder_of(v) ~= holder then\n"
    "      took = took or (v and holder_of(v) == mine)\n"
    "      redis.call('HSET', k, g, holder .. ':' .. nows)\n"
    "      booked = booked + 1\n"
    "    end\n"
    "  end\n"
    "  if took then\n"
    "    local all = redis.call('HGETALL', k)\n"
    "    for j = 1, #all, 2 do\n"
    "      if holder_of(all[j + 1]) == mine then redis.call('HDEL', k, all[j]) end\n"
    "    end\n"
    "  end\n"
    "  redis.call('SADD', KEYS[1], ARGV[2 * i])\n"
    "end\n"
    "return {'ok', booked}\n";

/* Release GPUs of one holder (fencing: a field whose value belongs to
 * another job or attempt is left alone).  KEYS[1] the shard's index, KEYS[1+i]
 * node i's reservations; ARGV[1] holder; ARGV[2i] node id, ARGV[2i+1] GPU
 * indexes ("" = every GPU this holder has on the node); the last ARGV
 * (ARGV[2n+2]) an heir job or "": each GPU freed is held for the heir
 * ("<heir>:0:<now>", see SCHED_RES_HOLD_MS) instead of freed -- a
 * preempted attempt hands its GPUs to its preemptor.  A node left with no
 * reservation leaves the index.  Returns the number of GPUs freed. */
static const char sched_res_release_lua[] =
    SCHED_RES_LUA_NOW
    SCHED_RES_LUA_HOLDER_OF
    "local holder = ARGV[1]\n"
    "local heir = ARGV[2 * (#KEYS - 1) + 2] or ''\n"
    "local freed = 0\n"
    "for i = 1, #KEYS - 1 do\n"
    "  local k = KEYS[1 + i]\n"
    "  local gpus = {}\n"
    "  if ARGV[2 * i + 1] == '' then\n"
    "    local all = redis.call('HKEYS', k)\n"
    "    for j = 1, #all do gpus[#gpus + 1] = all[j] end\n"
    "  else\n"
    "    for g in string.gmatch(ARGV[2 * i + 1], '%d+') do gpus[#gpus + 1] = g end\n"
    "  end\n"
    "  for _, g in ipairs(gpus) do\n"
    "    local v = redis.call('HGET', k, g)\n"
    "    if v and holder_of(v) == holder then\n"
    "      if heir ~= '' then\n"
    "        redis.call('HSET', k, g, heir .. ':0:' .. nows)\n"
    "        freed = freed + 1\n"
    "      else\n"
    "        freed = freed + redis.call('HDEL', k, g)\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  if redis.call('EXISTS', k) == 0 then redis.call('SREM', KEYS[1], ARGV[2 * i]) end\n"
    "end\n"
    "return freed\n";

/* Reconcile, part one: remove reservations no live attempt backs.
 * KEYS[1] the shard's index, KEYS[1+i] the reservations of candidate i's
 * node; ARGV[1] the cutoff (ms, Redis's clock); per candidate i:
 * ARGV[3i-1] node, ARGV[3i] the field (GPU) and ARGV[3i+1] the value, both
 * as read.  A field is removed only if it still holds exactly the value
 * read (a GPU booked again since is someone's new booking) and that
 * booking is no later than the cutoff: the moment the live attempts were
 * read less the grace (a live instance may have booked and not yet written
 * its attempt row).  The cutoff, not "now less the grace": a booking made
 * after the truth was read cannot be in it, and would be taken for an
 * orphan by a pass that outlasts the grace (its lease then kills the
 * attempt it was booked for).
 * Returns {removed, kept because fresh}. */
static const char sched_res_orphans_lua[] =
    "local cutoff = tonumber(ARGV[1])\n"
    "local removed, fresh = 0, 0\n"
    "for i = 1, #KEYS - 1 do\n"
    "  local k, node, g, val = KEYS[1 + i], ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]\n"
    "  if redis.call('HGET', k, g) == val then\n"
    "    local ms = tonumber(string.match(val, ':(%d+)$'))\n"
    "    if ms and ms > cutoff then\n"
    "      fresh = fresh + 1\n"
    "    else\n"
    "      removed = removed + redis.call('HDEL', k, g)\n"
    "      if redis.call('EXISTS', k) == 0 then redis.call('SREM', KEYS[1], node) end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return {removed, fresh}\n";

/* Reconcile, part two: re-create what PostgreSQL has and Redis lacks
 * (after a flush or a restart without persistence).  KEYS[1] the shard's
 * index, KEYS[1+i] the reservations of entry i's node; per entry i:
 * ARGV[3i-2] node, ARGV[3i-1] GPU, ARGV[3i] holder.  A free GPU is booked
 * for its holder as of now; one held by the same holder is left as it is;
 * one held for a preemptor (a hold, attempt 0) is taken: the truth wins;
 * one held by another attempt is never overwritten and is reported.
 * Returns {rebuilt, node, gpu, value, node, gpu, value...} (the conflicts). */
static const char sched_res_rebuild_lua[] =
    SCHED_RES_LUA_NOW
    SCHED_RES_LUA_HOLDER_OF
    "local out = {0}\n"
    "for i = 1, #KEYS - 1 do\n"
    "  local k, node, g, holder = KEYS[1 + i], ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]\n"
    "  local v = redis.call('HGET', k, g)\n"
    "  if not v then\n"
    "    redis.call('HSET', k, g, holder .. ':' .. nows)\n"
    "    redis.call('SADD', KEYS[1], node)\n"
    "    out[1] = out[1] + 1\n"
    "  elseif string.match(v, ':0:%d+$') then\n"   /* a hold: the truth wins */
    "    redis.call('HSET', k, g, holder .. ':' .. nows)\n"
    "    out[1] = out[1] + 1\n"
    "  elseif holder_of(v) ~= holder then\n"
    "    out[#out + 1] = node\n"
    "    out[#out + 1] = g\n"
    "    out[#out + 1] = v\n"
    "  end\n"
    "end\n"
    "return out\n";

#endif
