/* scripts.h -- the registry's Redis scripts, in a header so that the
 * heartbeat benchmark runs redis-benchmark on exactly the script the
 * registry runs (tests/bench/hb_bench.c). */
#ifndef REGISTRY_SCRIPTS_H
#define REGISTRY_SCRIPTS_H

/* One heartbeat: KEYS gp:node:<id>, gp:seen; ARGV now_ms, heartbeat
 * (msgpack, re-encoded; "" at registration), site, node, rtt.  Returns the
 * previous state, or "ghost" (and writes nothing) for a beat of a node
 * whose hash lacks the 'reg' mark: registration sets it, the reseed
 * restores it for every inventory node, delete removes the hash. */
static const char registry_hb_lua[] =
    "local reg = redis.call('HGET', KEYS[1], 'reg')\n"
    "if ARGV[2] ~= '' and not reg then return 'ghost' end\n"
    "local prev = redis.call('HGET', KEYS[1], 'state')\n"
    "if prev == 'draining' or prev == 'quarantined' then\n"
    "  redis.call('HSET', KEYS[1], 'seen', ARGV[1], 'site', ARGV[3], 'reg', '1')\n"
    "else\n"
    "  redis.call('HSET', KEYS[1], 'seen', ARGV[1], 'site', ARGV[3], 'state', 'healthy', 'reg', '1')\n"
    "end\n"
    "if ARGV[2] ~= '' then\n"
    "  redis.call('HSET', KEYS[1], 'hb', ARGV[2], 'rtt', ARGV[5])\n"
    "  redis.call('HSET', 'gp:rtt:' .. ARGV[3], ARGV[4], ARGV[5])\n"
    "end\n"
    "redis.call('ZADD', KEYS[2], ARGV[1], ARGV[4])\n"
    "return prev\n";

static const char registry_sweep_lua[] =
    "local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))\n"
    "local out = {}\n"
    "for _, id in ipairs(ids) do\n"
    "  redis.call('ZREM', KEYS[1], id)\n"
    "  local k = 'gp:node:' .. id\n"
    "  if redis.call('HGET', k, 'state') == 'healthy' then\n"
    "    redis.call('HSET', k, 'state', 'stale')\n"
    "    out[#out + 1] = id\n"
    "    out[#out + 1] = redis.call('HGET', k, 'site') or ''\n"
    "  end\n"
    "end\n"
    "return out\n";

/* Re-seeding after Redis lost its data: ARGV now_ms, then id, site, state
 * triples of every inventory node.  Restores the 'reg' mark (so their beats
 * are taken again) and, for a node expected to beat, its place in the
 * index; a node a registration already brought back keeps its state. */
static const char registry_reseed_lua[] =
    "for i = 2, #ARGV, 3 do\n"
    "  local k = 'gp:node:' .. ARGV[i]\n"
    "  redis.call('HSETNX', k, 'state', ARGV[i + 2])\n"
    "  redis.call('HSETNX', k, 'site', ARGV[i + 1])\n"
    "  redis.call('HSET', k, 'reg', '1')\n"
    "  if ARGV[i + 2] ~= 'stale' and ARGV[i + 2] ~= 'unknown' then\n"
    "    redis.call('ZADD', 'gp:seen', 'NX', ARGV[1], ARGV[i])\n"
    "  end\n"
    "end\n"
    "return #ARGV\n";

#endif
