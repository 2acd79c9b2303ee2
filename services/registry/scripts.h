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
 *     gp:{N}:seen         sorted set: the shard's nodes by their next deadline
 *     gp:{N}:rtt:<site>   hash: node -> last uplink RTT
 *     gp:{N}:seeded       the shard's 'reg' marks are restored (a reseed)
 *     gp:epoch:v3         alone in its calls (no tag needed)
 *     gp:reseed:lock:v3   the reseeder's lock, alone in its calls
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
registry_seen_key(char *out, unsigned shard);

/* A shard whose 'reg' marks the registry restored (live.c's reseed): while
 * it is missing (Redis lost its data, the reseed not through yet) the
 * scheduler answers a lease without a 'reg' mark "renew again", not
 * NOTFOUND, so a Redis loss does not send every agent to register again
 * (3,000 registrations queued before an operator's read in registry
 * fleet_test; 100,000 at the design limit).  The scheduler builds the same
 * name (services/scheduler/reserve_scripts.h). */
static inline void
registry_seeded_key(char *out, unsigned shard)
{
    snprintf(out, REGISTRY_KEY_LEN, "gp:{%u}:seeded", shard);
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

/* The failure detector (gp/detect.h), the same integer arithmetic in Lua,
 * so that every registry instance judges a node alike from the fields in
 * its hash: lb (last beat, ms), lc (last contact: a beat or a lease
 * renewal), m8 (smoothed interval x 8), d4 (smoothed deviation x 4), n
 * (samples).  Lua numbers are doubles: every value here is an integer
 * below 2^53, so the arithmetic is exact and equals the C one
 * (registry_detect_test compares them).  The configuration travels as one
 * argument, "interval floor ceiling k lost" in ms (registry_detect_args).
 *
 * A node's liveness is the field 'live' (healthy, suspect, lost); what an
 * operator or a quarantine rule set is 'adm' (draining, cordoned,
 * quarantined, or empty); 'state' is what the node shows and what the
 * scheduler's reservation script reads: suspect or lost first, then adm,
 * else healthy.  The seen index holds a node while it is not lost, scored
 * by its next deadline: suspect_at while healthy, lost_at while suspect. */
#define REGISTRY_LUA_DETECT                                                                 \
    "local function dcfg(s)\n"                                                              \
    "  local t = {}\n"                                                                      \
    "  for v in string.gmatch(s, '%d+') do t[#t + 1] = tonumber(v) end\n"                   \
    "  return {i = t[1], f = t[2], c = t[3], k = t[4], l = t[5], frozen = t[6] == 1}\n"                         \
    "end\n"                                                                                 \
    "local function dread(key)\n"                                                           \
    "  local v = redis.call('HMGET', key, 'lb', 'lc', 'm8', 'd4', 'n', 'live', 'adm', 'state', 'site')\n" \
    "  return {lb = tonumber(v[1] or 0) or 0, lc = tonumber(v[2] or 0) or 0,\n"             \
    "          m8 = tonumber(v[3] or 0) or 0, d4 = tonumber(v[4] or 0) or 0,\n"             \
    "          n = tonumber(v[5] or 0) or 0, live = v[6], adm = v[7] or '', state = v[8],\n" \
    "          site = v[9]}\n"                                                              \
    "end\n"                                                                                 \
    "local function dnum(x) return string.format('%.0f', x) end\n"                          \
    "local function dwrite(key, d)\n"                                                       \
    "  redis.call('HSET', key, 'lb', dnum(d.lb), 'lc', dnum(d.lc), 'm8', dnum(d.m8),\n"     \
    "             'd4', dnum(d.d4), 'n', dnum(d.n))\n"                                      \
    "end\n"                                                                                 \
    "local function deadline(d, C)\n"                                                       \
    "  local mean, dev = C.i, math.floor(C.i / 2)\n"                                        \
    "  if d.n > 0 then mean = math.floor(d.m8 / 8); dev = math.floor(d.d4 / 4) end\n"       \
    "  local t = mean + C.k * dev\n"                                                        \
    "  if t < C.f then t = C.f end\n"                                                       \
    "  if t > C.c then t = C.c end\n"                                                       \
    "  return t\n"                                                                          \
    "end\n"                                                                                 \
    "local function suspect_at(d, C)\n"                                                     \
    "  local a, b = d.lb + deadline(d, C), d.lc + C.f\n"                                    \
    "  if a > b then return a end\n"                                                        \
    "  return b\n"                                                                          \
    "end\n"                                                                                 \
    "local function lost_at(d, C)\n"                                                        \
    "  local a, s = d.lc + C.l, suspect_at(d, C)\n"                                         \
    "  if a > s then return a end\n"                                                        \
    "  return s\n"                                                                          \
    "end\n"                                                                                 \
    "local function dbeat(d, C, t)\n"                                                       \
    "  if d.lb ~= 0 and t > d.lb and t - d.lb <= C.c then\n"                                \
    "    local x = t - d.lb\n"                                                              \
    "    if d.n == 0 then d.m8 = x * 8; d.d4 = x * 2\n"                                     \
    "    else\n"                                                                            \
    "      local e = x - math.floor(d.m8 / 8)\n"                                            \
    "      d.m8 = d.m8 + e\n"                                                               \
    "      if e < 0 then e = -e end\n"                                                      \
    "      d.d4 = d.d4 + e - math.floor(d.d4 / 4)\n"                                        \
    "    end\n"                                                                             \
    "    if d.n < 1000000 then d.n = d.n + 1 end\n"                                         \
    "  end\n"                                                                               \
    "  if t > d.lb then d.lb = t end\n"                                                     \
    "  if t > d.lc then d.lc = t end\n"                                                     \
    "end\n"                                                                                 \
    "local function eff(live, adm)\n"                                                       \
    "  if live == 'suspect' or live == 'lost' then return live end\n"                       \
    "  if adm ~= nil and adm ~= '' then return adm end\n"                                   \
    "  return 'healthy'\n"                                                                  \
    "end\n"

/* One heartbeat: KEYS node, seen, rtt, seeded (one shard); ARGV heartbeat
 * (msgpack, re-encoded; "" at registration), site, node, rtt, detector
 * configuration, then the quarantine's facts: bad-GPU XIDs in this beat,
 * uncorrectable ECC errors (cumulative, all GPUs), the XID window and the
 * flap window (ms).  Stamps the beat with Redis's time, takes it as a
 * sample of the node's interval, makes it healthy (adm still applies) and
 * scores it in the index by its next suspect deadline.  Returns {previous
 * state, new state, bad XIDs within the window, new uncorrectable ECC
 * errors, returns from lost within the flap window}, or "ghost" (and
 * writes nothing) for a beat of a node whose hash lacks the 'reg' mark
 * ("unseeded" while the shard's seeded mark is missing: Redis lost its
 * data and the reseed is not through, so the node is not forgotten):
 * registration sets it, the reseed restores it for every inventory node,
 * delete removes the hash.  A registration ("" heartbeat) starts the
 * history afresh (the node restarted) and stamps 'regat': its reply keeps
 * what the agent runs, a grant the scheduler's fence waits out
 * (services/scheduler/fence.c).  Windows are lists "t:n,t:n" in the hash
 * ('qx' XIDs, 'fl' flaps), trimmed as they are written; ECC counters
 * reset by a reboot count from their new value.  One read of the hash and
 * one write of what the beat changes (the telemetry and the detector's
 * fields; liveness and state only when they change, site and the mark at
 * registration): 5 commands a beat where it took 9. */
static const char registry_hb_lua[] =
    "local v = redis.call('HMGET', KEYS[1], 'reg', 'lb', 'lc', 'm8', 'd4', 'n', 'live', 'adm',\n"
    "                     'state', 'dbe')\n"
    "if ARGV[1] ~= '' and not v[1] then\n"
    "  if redis.call('EXISTS', KEYS[4]) == 1 then return 'ghost' end\n"
    "  return 'unseeded'\n"
    "end\n"
    REGISTRY_LUA_NOW
    REGISTRY_LUA_DETECT
    "local function window(field, add, win)\n"
    "  local keep, total = {}, 0\n"
    "  for t, n in string.gmatch(redis.call('HGET', KEYS[1], field) or '', '(%d+):(%d+)') do\n"
    "    if now - tonumber(t) <= win then\n"
    "      keep[#keep + 1] = string.format('%s:%s', t, n); total = total + tonumber(n)\n"
    "    end\n"
    "  end\n"
    "  if add > 0 then\n"
    "    keep[#keep + 1] = string.format('%s:%d', nows, add); total = total + add\n"
    "    redis.call('HSET', KEYS[1], field, table.concat(keep, ','))\n"
    "  end\n"
    "  return total\n"
    "end\n"
    "local C = dcfg(ARGV[5])\n"
    "local d = {lb = tonumber(v[2] or 0) or 0, lc = tonumber(v[3] or 0) or 0,\n"
    "           m8 = tonumber(v[4] or 0) or 0, d4 = tonumber(v[5] or 0) or 0,\n"
    "           n = tonumber(v[6] or 0) or 0, live = v[7], adm = v[8] or '', state = v[9]}\n"
    "local prev = d.state or ''\n"
    "local f = {}\n"
    "local function put(k, x) f[#f + 1] = k; f[#f + 1] = x end\n"
    "if ARGV[1] == '' then\n"
    "  d.lb = 0; d.m8 = 0; d.d4 = 0; d.n = 0\n"
    "  put('regat', nows); put('site', ARGV[2]); put('reg', '1')\n"
    "end\n"
    "dbeat(d, C, now)\n"
    "put('lb', dnum(d.lb)); put('lc', dnum(d.lc)); put('m8', dnum(d.m8)); put('d4', dnum(d.d4))\n"
    "put('n', dnum(d.n)); put('seen', nows)\n"
    "local state = eff('healthy', d.adm)\n"
    "if d.live ~= 'healthy' or prev ~= state then put('live', 'healthy'); put('state', state) end\n"
    "local xids, dbe, flaps = 0, 0, 0\n"
    "if ARGV[1] ~= '' then\n"
    "  put('hb', ARGV[1]); put('rtt', ARGV[4])\n"
    "  redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])\n"
    "  local xb = tonumber(ARGV[6]) or 0\n"
    "  if xb > 0 then xids = window('qx', xb, tonumber(ARGV[8])) end\n"
    "  local e, se = tonumber(ARGV[7]) or 0, tonumber(v[10] or '-1')\n"
    "  if e ~= se then\n"
    "    if se >= 0 and e > se then dbe = e - se end\n"
    "    put('dbe', ARGV[7])\n"
    "  end\n"
    "end\n"
    "if d.live == 'lost' then flaps = window('fl', 1, tonumber(ARGV[9])) end\n"
    "redis.call('HSET', KEYS[1], unpack(f))\n"
    "redis.call('ZADD', KEYS[2], dnum(suspect_at(d, C)), ARGV[3])\n"
    "return {prev, state, xids, dbe, flaps}\n";

/* Contact without a heartbeat (a lease renewal the registry overheard):
 * KEYS node; moves lc to Redis's time.  The index keeps its score: the
 * sweep re-scores a node whose deadline contact moved on.  Nothing for a
 * node without the 'reg' mark or already lost (only a beat or a
 * registration brings a lost node back). */
static const char registry_contact_lua[] =
    "local v = redis.call('HMGET', KEYS[1], 'reg', 'live')\n"
    "if not v[1] or v[2] == 'lost' then return 0 end\n"
    REGISTRY_LUA_NOW
    "redis.call('HSET', KEYS[1], 'lc', nows)\n"
    "return 1\n";

/* The first half of the sweep of one shard: KEYS seen; ARGV batch.
 * Returns up to batch ids whose deadline (their score) has passed on
 * Redis's time. */
static const char registry_sweep_read_lua[] =
    REGISTRY_LUA_NOW
    "return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'LIMIT', 0, tonumber(ARGV[1]))\n";

/* The second half: KEYS seen, then the node keys of the ids read; ARGV
 * detector configuration, then those ids, in KEYS order.  Each node is
 * judged again on Redis's time from its own fields (a beat or a renewal
 * since the read moved its deadline on: re-scored, not reported): healthy
 * past suspect_at turns suspect (re-scored at lost_at), suspect past
 * lost_at turns lost (out of the index).  Returns {id, site, prev, state,
 * reason} per transition, a node passing both deadlines at once giving
 * two, so exactly one caller reports each.  A node that is neither healthy
 * nor suspect (no 'live': an old hash) leaves the index.  While the
 * control plane is isolated (a sixth number 1 in the configuration: the
 * recovery service's gp:recovery:frozen), nobody turns lost: a suspect
 * node past its deadline is looked at again a second later. */
static const char registry_sweep_lua[] =
    REGISTRY_LUA_NOW
    REGISTRY_LUA_DETECT
    "local C = dcfg(ARGV[1])\n"
    "local out = {}\n"
    "local function put(id, d, prev, state, why)\n"
    "  out[#out + 1] = id; out[#out + 1] = d.site or ''; out[#out + 1] = prev\n"
    "  out[#out + 1] = state; out[#out + 1] = why\n"
    "end\n"
    "for i = 2, #KEYS do\n"
    "  local id = ARGV[i]\n"
    "  local score = redis.call('ZSCORE', KEYS[1], id)\n"
    "  if score and tonumber(score) <= now then\n"
    "    local d = dread(KEYS[i])\n"
    "    local prev = d.state or 'unknown'\n"
    "    if d.live == 'healthy' and now > suspect_at(d, C) then\n"
    "      d.live = 'suspect'\n"
    "      redis.call('HSET', KEYS[i], 'live', 'suspect', 'state', 'suspect')\n"
    "      put(id, d, prev, 'suspect', string.format('no heartbeat for %.0f ms (deadline %.0f ms)', now - d.lb, deadline(d, C)))\n"
    "      prev = 'suspect'\n"
    "    end\n"
    "    if d.live == 'suspect' and now > lost_at(d, C) and C.frozen then\n"
    "      redis.call('ZADD', KEYS[1], dnum(now + 1000), id)\n"
    "    elseif d.live == 'suspect' and now > lost_at(d, C) then\n"
    "      redis.call('HSET', KEYS[i], 'live', 'lost', 'state', 'lost')\n"
    "      redis.call('ZREM', KEYS[1], id)\n"
    "      local rtt = tonumber(redis.call('HGET', KEYS[i], 'rtt') or '') or -1\n"
    "      put(id, d, prev, 'lost', string.format('no contact for %.0f ms (last heartbeat %.0f ms ago, uplink RTT %.0f ms)', now - d.lc, now - d.lb, rtt))\n"
    "    elseif d.live == 'suspect' then\n"
    "      redis.call('ZADD', KEYS[1], dnum(lost_at(d, C)), id)\n"
    "    elseif d.live == 'healthy' then\n"
    "      redis.call('ZADD', KEYS[1], dnum(suspect_at(d, C)), id)\n"
    "    else\n"
    "      redis.call('ZREM', KEYS[1], id)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return out\n";

/* An operator's (or a quarantine rule's) mode, after PostgreSQL took it
 * (nodes.adm is the authority; this mirrors it): KEYS node; ARGV the new
 * adm ('' clears it).  Returns {prev state, new state}, or "ghost" for a
 * node without the 'reg' mark. */
static const char registry_adm_lua[] =
    "local v = redis.call('HMGET', KEYS[1], 'reg', 'live', 'state')\n"
    "if not v[1] then return 'ghost' end\n"
    REGISTRY_LUA_DETECT
    "local state = eff(v[2] or 'healthy', ARGV[1])\n"
    "redis.call('HSET', KEYS[1], 'adm', ARGV[1], 'state', state)\n"
    "return {v[3] or 'unknown', state}\n";

/* Re-seeding after Redis lost its data, one shard per call: KEYS seen,
 * then node keys; ARGV detector configuration, then id, site, state, adm
 * of each node, in KEYS order.  Restores the 'reg' mark (so the node's
 * beats are taken again) and the operator's mode (PostgreSQL has it);
 * a node not lost (nor unknown) starts a fresh history as seen now, in
 * the index, so it is refreshed by its next beat or found suspect one
 * deadline later; a node a registration already brought back keeps its
 * liveness. */
static const char registry_reseed_lua[] =
    REGISTRY_LUA_NOW
    REGISTRY_LUA_DETECT
    "local C = dcfg(ARGV[1])\n"
    "for i = 2, #KEYS do\n"
    "  local a = 2 + (i - 2) * 4\n"
    "  redis.call('HSETNX', KEYS[i], 'site', ARGV[a + 1])\n"
    "  redis.call('HSET', KEYS[i], 'reg', '1', 'adm', ARGV[a + 3])\n"
    "  local live = redis.call('HGET', KEYS[i], 'live')\n"
    "  if not live then\n"
    "    live = ARGV[a + 2]\n"
    "    if live ~= 'lost' and live ~= 'unknown' then\n"
    "      live = 'healthy'\n"
    "      local d = {lb = now, lc = now, m8 = 0, d4 = 0, n = 0}\n"
    "      dwrite(KEYS[i], d)\n"
    "      redis.call('ZADD', KEYS[1], 'NX', dnum(suspect_at(d, C)), ARGV[a])\n"
    "    end\n"
    "    redis.call('HSET', KEYS[i], 'live', live)\n"
    "  end\n"
    "  redis.call('HSET', KEYS[i], 'state', live == 'unknown' and 'unknown' or eff(live, ARGV[a + 3]))\n"
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
