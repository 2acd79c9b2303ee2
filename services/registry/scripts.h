/* scripts.h -- the registry's Redis scripts, in a header so that the
 * heartbeat benchmark runs redis-benchmark on exactly the script the
 * registry runs (tests/bench/hb_bench.c). */
#ifndef REGISTRY_SCRIPTS_H
#define REGISTRY_SCRIPTS_H

/* One heartbeat: KEYS gp:node:<id>, gp:seen; ARGV now_ms, raw heartbeat
 * (or "" at registration), site, node, rtt.  Returns the previous state. */
static const char registry_hb_lua[] =
    "local prev = redis.call('HGET', KEYS[1], 'state')\n"
    "if prev == 'draining' or prev == 'quarantined' then\n"
    "  redis.call('HSET', KEYS[1], 'seen', ARGV[1], 'site', ARGV[3])\n"
    "else\n"
    "  redis.call('HSET', KEYS[1], 'seen', ARGV[1], 'site', ARGV[3], 'state', 'healthy')\n"
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

/* Re-seeding after Redis lost its data: ARGV now_ms, then id, site pairs.
 * A node a heartbeat already brought back is left as it is. */
static const char registry_reseed_lua[] =
    "for i = 2, #ARGV, 2 do\n"
    "  local k = 'gp:node:' .. ARGV[i]\n"
    "  redis.call('HSETNX', k, 'state', 'healthy')\n"
    "  redis.call('HSETNX', k, 'site', ARGV[i + 1])\n"
    "  redis.call('ZADD', 'gp:seen', 'NX', ARGV[1], ARGV[i])\n"
    "end\n"
    "return #ARGV\n";

#endif
