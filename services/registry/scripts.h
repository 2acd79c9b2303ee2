/* scripts.h -- the registry's Redis key layout and Lua scripts, in a header
 * so that the heartbeat benchmark runs redis-benchmark on exactly the
 * script the registry runs (tests/bench/hb_bench.c).
 *
 * Redis Cluster ready: every script declares every key it touches in
 * KEYS, and the keys of one call share a hash tag, so they are in one
 * slot.  The tag is the site's shard {N}, N = FNV-1a of the site id mod
 * REGISTRY_SHARDS:
 *
 *     gp:{N}:node:<id>    hash of one node (its site's shard)
 *     gp:{N}:seen         sorted set: the shard's nodes by last beat
 *     gp:{N}:rtt:<site>   hash: node -> last uplink RTT
 *     gp:epoch:v2         alone in its calls (no tag needed)
 *     gp:reseed:lock:v2   the reseeder's lock, alone in its calls
 *
 * REGISTRY_SHARDS is fixed (it is part of the layout: changing it moves
 * every key, so it comes with a new epoch key).  256: the live view can
 * spread over up to 256 slots (far more masters than a 100,000-node fleet
 * needs), each shard holds ~400 nodes of such a fleet, and the sweep's one
 * read per shard per tick is 256 small commands a second at the default
 * sweep interval. */
#ifndef REGISTRY_SCRIPTS_H
#define REGISTRY_SCRIPTS_H

#include <stdint.h>
#include <stdio.h>

#include "gp/shard.h"

#define REGISTRY_SHARDS GP_SHARDS

/* The shard of a site: FNV-1a (32 bit) of its id mod GP_SHARDS (gp/shard.h,
 * shared with the scheduler's reservation keys). */
static inline unsigned
registry_shard(const char *site)
{
    return gp_shard_of(site);
}

/* Key buffers: "gp:{255}:rtt:" + a 63-byte id + NUL fit in 96. */
#define REGISTRY_KEY_LEN 96

static inline void
registry_node_key(char *out, unsigned shard, const char *node)
{
    snprintf(out, REGISTRY_KEY_LEN, "gp:{%u}:node:%s", shard, node);
}

static inline void
registry_seen_key(char *out, unsigned shard)
{
    snprintf(out, REGISTRY_KEY_LEN, "gp:{%u}:seen", shard);
}

static inline void
registry_rtt_key(char *out, const char *site)
{
    snprintf(out, REGISTRY_KEY_LEN, "gp:{%u}:rtt:%s", registry_shard(site), site);
}

/* Time in the live view is Redis's own clock, read by each script
 * (redis.call('TIME'), allowed since Redis replicates script effects), so
 * beat stamps and stale cutoffs come from one clock, the shard's master,
 * whatever the wall clocks of the registry hosts say.  REGISTRY_LUA_NOW
 * sets 'now' (ms since the epoch, a number) and 'nows' (the same as an
 * integer string, for writes). */
#define REGISTRY_LUA_NOW                                                                    \
    "local t = redis.call('TIME')\n"                                                        \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"               \
    "local nows = string.format('%.0f', now)\n"

/* One heartbeat: KEYS node, seen, rtt (one shard); ARGV heartbeat
 * (msgpack, re-encoded; "" at registration), site, node, rtt.  Stamps
 * the beat with Redis's time.  Returns the previous state, or "ghost" (and
 * writes nothing) for a beat of a node whose hash lacks the 'reg' mark:
 * registration sets it, the reseed restores it for every inventory node,
 * delete removes the hash. */
static const char registry_hb_lua[] =
    "local reg = redis.call('HGET', KEYS[1], 'reg')\n"
    "if ARGV[1] ~= '' and not reg then return 'ghost' end\n"
    REGISTRY_LUA_NOW
    "local prev = redis.call('HGET', KEYS[1], 'state')\n"
    "if prev == 'draining' or prev == 'quarantined' then\n"
    "  redis.call('HSET', KEYS[1], 'seen', nows, 'site', ARGV[2], 'reg', '1')\n"
    "else\n"
    "  redis.call('HSET', KEYS[1], 'seen', nows, 'site', ARGV[2], 'state', 'healthy', 'reg', '1')\n"
    "end\n"
    "if ARGV[1] ~= '' then\n"
    "  redis.call('HSET', KEYS[1], 'hb', ARGV[1], 'rtt', ARGV[4])\n"
    "  redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])\n"
    "end\n"
    "redis.call('ZADD', KEYS[2], nows, ARGV[3])\n"
    "return prev\n";

/* The first half of the sweep of one shard: KEYS seen; ARGV stale window
 * (ms), batch.  Returns up to batch ids whose last beat is at least the
 * window older than Redis's time. */
static const char registry_sweep_read_lua[] =
    REGISTRY_LUA_NOW
    "local cutoff = string.format('%.0f', now - tonumber(ARGV[1]))\n"
    "return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[2]))\n";

/* The second half: KEYS seen, then the node keys of the ids read; ARGV
 * stale window (ms), then those ids, in KEYS order.  The cutoff is taken
 * again from Redis's time: a node whose score is still at or below it
 * leaves the index (a beat since the read moved it on: skipped); a healthy
 * one turns stale and is returned (id, site), so exactly one caller
 * reports it. */
static const char registry_sweep_lua[] =
    REGISTRY_LUA_NOW
    "local out = {}\n"
    "local cutoff = now - tonumber(ARGV[1])\n"
    "for i = 2, #KEYS do\n"
    "  local id = ARGV[i]\n"
    "  local score = redis.call('ZSCORE', KEYS[1], id)\n"
    "  if score and tonumber(score) <= cutoff then\n"
    "    redis.call('ZREM', KEYS[1], id)\n"
    "    if redis.call('HGET', KEYS[i], 'state') == 'healthy' then\n"
    "      redis.call('HSET', KEYS[i], 'state', 'stale')\n"
    "      out[#out + 1] = id\n"
    "      out[#out + 1] = redis.call('HGET', KEYS[i], 'site') or ''\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return out\n";

/* Re-seeding after Redis lost its data, one shard per call: KEYS seen,
 * then node keys; ARGV id, site, state of each node, in KEYS order.
 * Restores the 'reg' mark (so the node's beats are taken again) and, for a
 * node expected to beat, its place in the index as seen now (Redis's
 * time); a node a registration already brought back keeps its state. */
static const char registry_reseed_lua[] =
    REGISTRY_LUA_NOW
    "for i = 2, #KEYS do\n"
    "  local a = 1 + (i - 2) * 3\n"
    "  redis.call('HSETNX', KEYS[i], 'state', ARGV[a + 2])\n"
    "  redis.call('HSETNX', KEYS[i], 'site', ARGV[a + 1])\n"
    "  redis.call('HSET', KEYS[i], 'reg', '1')\n"
    "  if ARGV[a + 2] ~= 'stale' and ARGV[a + 2] ~= 'unknown' then\n"
    "    redis.call('ZADD', KEYS[1], 'NX', nows, ARGV[a])\n"
    "  end\n"
    "end\n"
    "return #KEYS - 1\n";

/* Removes a node from a shard (delete, or the old site's shard after a
 * move): KEYS node, seen, rtt (one shard); ARGV node.  One call, so one
 * reply says whether all of it happened. */
static const char registry_forget_lua[] =
    "redis.call('DEL', KEYS[1])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "redis.call('HDEL', KEYS[3], ARGV[1])\n"
    "return 1\n";

/* Drops the reseed lock (KEYS[1]) only if ARGV[1] (this instance) holds it. */
static const char registry_unlock_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

#endif
