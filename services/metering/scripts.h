/* scripts.h -- metering's Redis key layout and Lua scripts.
 *
 * Every key of one site's attempts carries the site's shard tag {N}
 * (gp/shard.h), so each call's keys share one Redis Cluster slot, and
 * every script declares every key it touches in KEYS:
 *
 *     gp:{N}:m:a:<job>:<att>:<node>  hash: one node's part of an attempt
 *                                    (the running state: last counters,
 *                                    the open window, the checkpoint)
 *     gp:{N}:m:d:<job>:<att>:<node>  closed (7 days): later beats ignored
 *     gp:{N}:m:lost:<node>           when the node was last found lost
 *     gp:{N}:m:open                  zset: attempts by when their window
 *                                    closes or their silence is checked
 *     gp:{N}:m:seq                   hash: site -> last record sequence
 *     gp:{N}:m:recs                  hash: record id -> record (outbox)
 *     gp:{N}:m:out                   zset: record id -> when it may be
 *                                    (re)published (a claim's expiry)
 *     gp:{N}:m:review                hash: record id -> record and why it
 *                                    was not published (kept for review)
 *     gp:{N}:m:epoch                 present while the shard's keys are
 *                                    whole (epoch.c); the scripts that take
 *                                    readings or write records refuse
 *                                    ('stale') without it
 *
 * Time is Redis's (TIME on the shard's master), never a metering host's:
 * the window of a reading is floor(now / window_ms) of the moment the
 * reading was taken in, so every instance puts it in the same window.
 *
 * A record is written to the outbox in the same script that closes its
 * window and advances the state, so its content never changes: a crash
 * between the write and the publish republishes the same bytes under the
 * same id, and neither the stream nor billing can count it twice.  The
 * scripts return each record (id, line) they wrote; it is stored in
 * PostgreSQL before it is published (store.c), where the running state is
 * taken up again from when Redis lost it.
 *
 * An attempt's node with no state and no closed mark is not taken: the
 * script answers 'need' (or lists it, for a beat) and the state is seeded
 * first from PostgreSQL's last record of it (store.c: its raw counters,
 * counted totals and checkpoint; nothing: a new attempt, from zero), so a
 * state Redis lost is never counted again from zero.
 *
 * Record line (space-separated; every token is an id, a number or a word):
 *   job att node site window window_ms first_ms last_ms gpu_ms energy_mj
 *   from_gpu_ms from_energy_mj dropped_gpu_ms resets site_seq final end_event
 *   ckpt_gpu_ms ckpt_energy_mj raw_gpu_ms raw_energy_mj
 * from_* are the attempt's counted totals before the window (counted: not
 * dropped), so to = from + the window's amounts; ckpt_* are counted totals
 * at the last checkpoint; raw_* the agent's counters of the last reading
 * the window took (the next reading's delta starts there).  A line of an
 * older metering ends after ckpt_energy_mj. */
#ifndef METERING_SCRIPTS_H
#define METERING_SCRIPTS_H

/* Shared by the scripts that change an attempt: load, emit, save. */
#define METERING_LUA_COMMON                                                               \
    "local function now_ms()\n"                                                           \
    "  local t = redis.call('TIME')\n"                                                    \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                \
    "end\n"                                                                               \
    "local NUM = {'g','e','ag','ae','dg','de','dd','rs','w','f','l','hs','up','t','lk',"  \
    "'cg','ce'}\n"                                                                        \
    "local function load(key)\n"                                                          \
    "  local v = redis.call('HGETALL', key)\n"                                            \
    "  if #v == 0 then return nil end\n"                                                  \
    "  local st = {}\n"                                                                   \
    "  for i = 1, #v, 2 do st[v[i]] = v[i + 1] end\n"                                     \
    "  for _, k in ipairs(NUM) do st[k] = tonumber(st[k]) end\n"                          \
    "  return st\n"                                                                       \
    "end\n"                                                                               \
    "local function fresh(job, att, node, site, lost)\n"                                  \
    "  return {job = job, att = att, node = node, site = site, g = 0, e = 0, ag = 0,"     \
    " ae = 0, dg = 0, de = 0, dd = 0, rs = 0, lk = lost, cg = 0, ce = 0}\n"               \
    "end\n"                                                                               \
    "local function save(key, st)\n"                                                      \
    "  local a = {}\n"                                                                    \
    "  for k, v in pairs(st) do a[#a + 1] = k; a[#a + 1] = tostring(v) end\n"             \
    "  redis.call('DEL', key)\n"                                                          \
    "  redis.call('HSET', key, unpack(a))\n"                                              \
    "end\n"                                                                               \
    "local function fmt(x) return string.format('%.0f', x) end\n"                         \
    /* closes the open window into a record (final: even when empty) */                   \
    "local function emit(st, final, endev, K, now, wms, claim, ids)\n"                    \
    "  if st.w == nil then st.w = math.floor(now / wms); st.f = now; st.l = now end\n"    \
    "  if final == 0 and st.dg == 0 and st.de == 0 and st.dd == 0 and st.rs == 0 then\n"  \
    "    st.w = nil; return end\n"                                                        \
    "  local seq = redis.call('HINCRBY', K.seq, st.site, 1)\n"                            \
    "  local id = st.job .. '.' .. st.att .. '.' .. st.node .. '.' .. fmt(st.w)\n"       \
    "  local line = table.concat({st.job, st.att, st.node, st.site, fmt(st.w), fmt(wms),"  \
    " fmt(st.f), fmt(st.l), fmt(st.dg), fmt(st.de), fmt(st.ag), fmt(st.ae), fmt(st.dd),"  \
    " fmt(st.rs), fmt(seq), tostring(final), endev, fmt(st.cg), fmt(st.ce), fmt(st.g),"   \
    " fmt(st.e)}, ' ')\n"                                                                 \
    "  redis.call('HSET', K.recs, id, line)\n"                                            \
    "  redis.call('ZADD', K.out, now + claim, id)\n"                                      \
    "  ids[#ids + 1] = id; ids[#ids + 1] = line\n"                                        \
    "  st.ag = st.ag + st.dg; st.ae = st.ae + st.de\n"                                    \
    "  st.dg = 0; st.de = 0; st.dd = 0; st.rs = 0; st.w = nil; st.f = nil; st.l = nil\n"  \
    "end\n"                                                                               \
    /* one reading of the cumulative counters: the delta since the last one,  \
     * from zero after a reset; dropped while the node was lost since or      \
     * the control plane is frozen; refused when impossible */                \
    "local function take(st, g, e, now, lost, frozen, wms, K, claim, ids, stat)\n"         \
    "  local cur = math.floor(now / wms)\n"                                               \
    "  if st.w ~= nil and st.w ~= cur then emit(st, 0, 'none', K, now, wms, claim, ids) end\n" \
    "  local dg, de = g - st.g, e - st.e\n"                                               \
    "  if dg < 0 or de < 0 then dg = g; de = e; st.rs = st.rs + 1; stat[3] = stat[3] + 1 end\n" \
    "  local span = 86400000 * 31\n"                                                      \
    "  if st.t ~= nil then span = now - st.t + 60000 end\n"                               \
    "  if dg > span * 16 or de > dg * 1500 + 60000000 then\n"                             \
    "    stat[5] = stat[5] + 1; st.g = g; st.e = e; return end\n"                         \
    "  st.g = g; st.e = e\n"                                                              \
    "  if st.w == nil then st.w = cur; st.f = now end\n"                                  \
    "  st.l = now\n"                                                                      \
    "  if lost > (st.lk or 0) or frozen then\n"                                           \
    "    if lost > (st.lk or 0) then st.lk = lost end\n"                                  \
    "    st.dd = st.dd + dg; stat[2] = stat[2] + dg; return end\n"                        \
    "  st.dg = st.dg + dg; st.de = st.de + de\n"                                          \
    "end\n"                                                                               \
    "local function keys4()\n"                                                            \
    "  return {open = KEYS[1], seq = KEYS[2], recs = KEYS[3], out = KEYS[4]}\n"           \
    "end\n"

/* The shard's epoch, the first thing a script that may write a record
 * checks (k: its KEYS index, a Lua expression). */
#define METERING_LUA_EPOCH(k) "if redis.call('EXISTS', " k ") == 0 then return 'stale' end\n"

/* A heartbeat's attempts.  KEYS: open seq recs out lost epoch, then per
 * attempt its state and closed keys.  ARGV: window_ms grace_ms claim_ms
 * frozen site node hb_seq uptime_s n, then per attempt job att gpu_ms
 * energy_mj member.  A beat older than one already taken (a lower seq
 * within two seconds: two instances took a node's beats out of order) is
 * ignored.  Returns {stale, dropped_gpu_ms, resets, closed, implausible,
 * {i of each attempt with no state: 'need'}, {id, line, id, line...}}. */
static const char metering_beat_lua[] = METERING_LUA_COMMON
    METERING_LUA_EPOCH("KEYS[6]")
    "local wms, grace, claim = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local frozen = ARGV[4] == '1'\n"
    "local site, node, hseq, up = ARGV[5], ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])\n"
    "local n = tonumber(ARGV[9])\n"
    "local K = keys4()\n"
    "local now = now_ms()\n"
    "local lost = tonumber(redis.call('GET', KEYS[5]) or '0')\n"
    "local ids, stat, need = {}, {0, 0, 0, 0, 0}, {}\n"
    "for i = 1, n do\n"
    "  local key, done = KEYS[5 + 2 * i], KEYS[6 + 2 * i]\n"
    "  local a = 9 + 5 * (i - 1)\n"
    "  local g, e, member = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), ARGV[a + 5]\n"
    "  local st = nil\n"
    "  if redis.call('EXISTS', done) == 1 then stat[4] = stat[4] + 1\n"
    "  else st = load(key); if st == nil then need[#need + 1] = i end end\n"
    "  if st ~= nil then\n"
    "    if st.hs ~= nil and hseq <= st.hs and not (now - st.t > 2000 and up < st.up) then\n"
    "      stat[1] = stat[1] + 1\n"
    "    else\n"
    "      take(st, g, e, now, lost, frozen, wms, K, claim, ids, stat)\n"
    "      st.hs = hseq; st.up = up; st.t = now\n"
    "      save(key, st)\n"
    "      redis.call('ZADD', K.open, (math.floor(now / wms) + 1) * wms + grace, member)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return {stat[1], fmt(stat[2]), stat[3], stat[4], stat[5], need, ids}\n";

/* Attempts of one shard due: their window closed, or their silence is to
 * be checked.  KEYS: open epoch.  ARGV: limit recheck_ms.  Members come
 * back, pushed recheck_ms on so other instances leave them meanwhile.
 * Run on every shard every sweep, it is also how a loss of a shard nothing
 * else touches is found ('stale'). */
static const char metering_due_lua[] =
    METERING_LUA_EPOCH("KEYS[2]")
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))\n"
    "for _, x in ipairs(m) do redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), x) end\n"
    "return m\n";

/* One due attempt: closes its window if the window is over; says whether
 * it has been silent silent_ms.  KEYS: open seq recs out state epoch.
 * ARGV: window_ms grace_ms claim_ms silent_ms member.
 * Returns {silent (0/1), last_ms, site, {id, line...}}; {-1} when the
 * state is gone. */
static const char metering_tick_lua[] = METERING_LUA_COMMON
    METERING_LUA_EPOCH("KEYS[6]")
    "local wms, grace, claim, silent = tonumber(ARGV[1]), tonumber(ARGV[2]),"
    " tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local K = keys4()\n"
    "local now = now_ms()\n"
    "local st = load(KEYS[5])\n"
    "if st == nil then redis.call('ZREM', K.open, ARGV[5]); return {-1} end\n"
    "local ids = {}\n"
    "local cur = math.floor(now / wms)\n"
    "if st.w ~= nil and st.w < cur then emit(st, 0, 'none', K, now, wms, claim, ids); save(KEYS[5], st) end\n"
    "local quiet = st.t == nil or now - st.t >= silent\n"
    "local nxt = (st.t or now) + silent\n"
    "if st.w ~= nil then nxt = math.min(nxt, (st.w + 1) * wms + grace) end\n"
    "if quiet then nxt = now + silent end\n"
    "redis.call('ZADD', K.open, nxt, ARGV[5])\n"
    "return {quiet and 1 or 0, fmt(st.t or 0), st.site, ids}\n";

/* Closes one node's part of an attempt: its final counters (when the
 * agent's final event brought them) are taken like a beat's, the open
 * window is written and a final record follows (the window of now).
 * KEYS: open seq recs out state closed lost epoch.  ARGV: window_ms
 * grace_ms claim_ms frozen member job att node site end_event has_counters
 * gpu_ms energy_mj.  Returns {closed_before (0/1), dropped_gpu_ms,
 * {id, line...}}, or 'need' (no state yet). */
static const char metering_close_lua[] = METERING_LUA_COMMON
    METERING_LUA_EPOCH("KEYS[8]")
    "local wms, grace, claim = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local frozen = ARGV[4] == '1'\n"
    "local K = keys4()\n"
    "if redis.call('EXISTS', KEYS[6]) == 1 then return {1, '0', {}} end\n"
    "local now = now_ms()\n"
    "local lost = tonumber(redis.call('GET', KEYS[7]) or '0')\n"
    "local st = load(KEYS[5])\n"
    "if st == nil then return 'need' end\n"
    "local ids, stat = {}, {0, 0, 0, 0, 0}\n"
    "if ARGV[11] == '1' then\n"
    "  take(st, tonumber(ARGV[12]), tonumber(ARGV[13]), now, lost, frozen, wms, K, claim, ids, stat)\n"
    "end\n"
    "local cur = math.floor(now / wms)\n"
    "if st.w ~= nil and st.w ~= cur then emit(st, 0, 'none', K, now, wms, claim, ids) end\n"
    "emit(st, 1, ARGV[10], K, now, wms, claim, ids)\n"
    "redis.call('DEL', KEYS[5])\n"
    "redis.call('ZREM', K.open, ARGV[5])\n"
    "redis.call('SET', KEYS[6], '1', 'EX', 604800)\n"
    "return {0, fmt(stat[2]), ids}\n";

/* A checkpoint: the attempt's counted totals at it (the raw counters at
 * the checkpoint, moved by what was counted since the last reading), kept
 * if later than the one known.  KEYS: state closed.  ARGV: job att node
 * site gpu_ms energy_mj.  Returns 1, 0 when closed already, or 'need'. */
static const char metering_ckpt_lua[] = METERING_LUA_COMMON
    "if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end\n"
    "local st = load(KEYS[1])\n"
    "if st == nil then return 'need' end\n"
    "local cg = math.max(0, st.ag + st.dg + tonumber(ARGV[5]) - st.g)\n"
    "local ce = math.max(0, st.ae + st.de + tonumber(ARGV[6]) - st.e)\n"
    "if cg >= st.cg then st.cg = cg; st.ce = ce; save(KEYS[1], st) end\n"
    "return 1\n";

/* Records of one shard due for (re)publishing, claimed claim_ms.  KEYS:
 * out epoch.  ARGV: limit claim_ms. */
#define metering_claim_lua metering_due_lua

/* A record the stream acknowledged leaves the outbox.  KEYS: recs out.
 * ARGV: id. */
static const char metering_ack_lua[] =
    "redis.call('HDEL', KEYS[1], ARGV[1])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "return 1\n";

/* A record that cannot be billed (the scheduler has no such attempt on
 * that node) leaves the outbox for review, with why.  KEYS: recs out
 * review.  ARGV: id why. */
static const char metering_review_lua[] =
    "local line = redis.call('HGET', KEYS[1], ARGV[1])\n"
    "if line then redis.call('HSET', KEYS[3], ARGV[1], line .. ' # ' .. ARGV[2]) end\n"
    "redis.call('HDEL', KEYS[1], ARGV[1])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "return 1\n";

/* The state of an attempt's node taken up from PostgreSQL's last record of
 * it, or from zero (a new attempt), unless it exists or is closed.  KEYS:
 * state closed lost epoch.  ARGV: job att node site found final raw_gpu_ms
 * raw_energy_mj to_gpu_ms to_energy_mj ckpt_gpu_ms ckpt_energy_mj last_ms.
 * Returns 0 (there already), 1 (seeded), 2 (closed: its last record was
 * final). */
static const char metering_seed_lua[] = METERING_LUA_COMMON
    METERING_LUA_EPOCH("KEYS[4]")
    "if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end\n"
    "if ARGV[5] == '1' and ARGV[6] == '1' then\n"
    "  redis.call('SET', KEYS[2], '1', 'EX', 604800); return 2\n"
    "end\n"
    "local lost = tonumber(redis.call('GET', KEYS[3]) or '0')\n"
    "local st = fresh(ARGV[1], ARGV[2], ARGV[3], ARGV[4], lost)\n"
    "if ARGV[5] == '1' then\n"
    "  st.g, st.e = tonumber(ARGV[7]), tonumber(ARGV[8])\n"
    "  st.ag, st.ae = tonumber(ARGV[9]), tonumber(ARGV[10])\n"
    "  st.cg, st.ce = tonumber(ARGV[11]), tonumber(ARGV[12])\n"
    "  st.t = tonumber(ARGV[13])\n"
    "end\n"
    "save(KEYS[1], st)\n"
    "return 1\n";

/* A rebuild (epoch.c).  Every step: KEYS[1] epoch, KEYS[2] the rebuild's
 * token; 'present' when the epoch is there (the shard is whole).
 *
 * begin: KEYS then since; ARGV token settle_ms.  The first call after a
 * loss writes 'since' (Redis's now: no earlier than the loss, which took
 * any older one) and answers 'wait', as every call does until settle_ms
 * later; then the token is set: 'begun'. */
static const char metering_begin_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 'present' end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local since = tonumber(redis.call('GET', KEYS[3]) or '')\n"
    "if not since then\n"
    "  redis.call('SET', KEYS[3], string.format('%.0f', now), 'PX', 600000); return 'wait'\n"
    "end\n"
    "if now - since < tonumber(ARGV[2]) then return 'wait' end\n"
    "redis.call('SET', KEYS[2], ARGV[1], 'PX', 60000)\n"
    "return 'begun'\n";

/* The steps after it need the token still there and theirs (a loss or
 * another rebuild took it: 'lost'). */
#define METERING_LUA_TOKEN                                                                  \
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 'present' end\n"                     \
    "if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 'lost' end\n"

/* requeue: records PostgreSQL has and the stream may not (Redis lost its
 * outbox) back into the outbox, due at once.  KEYS then recs out.  ARGV
 * token, then id line... */
static const char metering_requeue_lua[] =
    METERING_LUA_TOKEN
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "for i = 2, #ARGV, 2 do\n"
    "  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])\n"
    "  redis.call('ZADD', KEYS[4], now, ARGV[i])\n"
    "end\n"
    "return (#ARGV - 1) / 2\n";

/* seal: each site's sequence moved up to PostgreSQL's last (never down),
 * the epoch written, the token and 'since' removed.  KEYS then seq since.
 * ARGV token, the epoch's value, then site seq...: 'sealed'. */
static const char metering_seal_lua[] =
    METERING_LUA_TOKEN
    "for i = 3, #ARGV, 2 do\n"
    "  local cur = tonumber(redis.call('HGET', KEYS[3], ARGV[i]) or '0') or 0\n"
    "  if tonumber(ARGV[i + 1]) > cur then redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end\n"
    "end\n"
    "redis.call('SET', KEYS[1], ARGV[2])\n"
    "redis.call('DEL', KEYS[2], KEYS[4])\n"
    "return 'sealed'\n";

#endif
