#!/usr/bin/env bash
# tests/harness/invariants.sh -- the scheduler's safety invariants, checked
# over the whole history of a stack's attempts table (not only its present),
# so any test (placement, recovery, metering...) can end with one call:
#
#   invariants.sh [--redis] [--truth FILE] [--confirm-ms MS] [--slack-ms MS]
#                 [--max N] [--quiet]
#
# Connection: GP_PG_CONNINFO, GP_REDIS_HOST, GP_REDIS_PORT from the
# environment, else from the stack's gp.env ($GP_ENV_FILE, else
# $GP_STACK_DIR/gp.env; tests/harness/stack.sh writes it).
#
# Checks (each violation prints one "violation: <kind>: ..." line; a
# summary line "invariants: ..." comes last):
#  (a) double_booking: no (node, GPU) held by two attempt rows whose booked
#      intervals overlap.  A row books its GPUs over [created_ms, ended_ms)
#      (half-open: one may end and the next start in the same ms); a live
#      row (reserved, starting, running) until now.  EVERY state counts as
#      booking, ended ones too: a row is inserted only after its GPUs were
#      booked in Redis (queue.c commits after the book script), and every
#      end path (attempt events, dispatch failure, cancel, max run time,
#      preemption) writes ended_ms before it releases the Redis booking, so
#      a row's interval lies inside the time Redis held those GPUs for that
#      (job, attempt), and Redis never gives one GPU to two holders.  Leaving
#      out ended states would miss a double booking that has ended since.
#      An ended row without ended_ms is itself reported (ended_without_time)
#      and counted as booking until now.
#  (b) two_live_attempts: at most one attempt of a job live at any time:
#      the intervals of different attempt numbers of one job (an attempt's
#      interval spans all its nodes' rows) never overlap.  Also
#      live_attempt_of_ended_job: a job that ended (succeeded, failed,
#      cancelled) has no live attempt.
#  (c) --redis: the reservations (gp:{N}:res:<node> hashes, GPU index ->
#      "<job>:<attempt>:<ms>", services/scheduler/reserve.h) match the live
#      attempts exactly: orphan_reservation (Redis holds a GPU for a holder
#      with no live attempt on that node and GPU), missing_reservation (a
#      live attempt's GPU is free in Redis or held by someone else), and
#      unindexed_reservation (a node with reservations missing from its
#      shard's gp:{N}:resnodes set, which the reconcile walks: it could
#      never be reconciled).  A booking is written before its attempt row
#      (and released after its end), so a busy scheduler shows short-lived
#      differences: a difference is reported only if it is still there,
#      identical, after --confirm-ms (default 1000; 0 = one look).
#      A hold ("<job>:0:<ms>": a preempted attempt's GPUs kept for its
#      preemptor for 20 s, reserve.h) is not a booking: it is skipped, and
#      it keeps its node in the index like any reservation.
#  (d) --truth FILE: the simulator's ground truth (one JSON line per ended
#      attempt, services/sim/truth.c): truth_two_attempts (two attempt
#      numbers of one job running at once) and truth_gpu_shared (one GPU of
#      a node running two attempts at once; lines carry gpu_idx), over
#      [start_ms, end_ms).
# --slack-ms MS: an overlap of at most MS is tolerated (for timestamps from
# different hosts' clocks; 0 by default: one host, one clock).
# Exit status: 0 clean, 1 violations, 2 could not check (no database,
# Redis, truth file, or a query failed).  Redis Cluster is not walked (one
# node only): a MOVED reply is exit 2.
set -u
exec /usr/bin/python3 - "$@" <<'PY'
import json, os, socket, subprocess, sys, time

def usage(msg):
    print("invariants.sh: " + msg, file=sys.stderr)
    print("usage: invariants.sh [--redis] [--truth FILE] [--confirm-ms MS] [--slack-ms MS] "
          "[--max N] [--quiet]", file=sys.stderr)
    sys.exit(2)

args = sys.argv[1:]
opt = {"redis": False, "truth": None, "confirm_ms": 1000, "slack_ms": 0, "max": 20, "quiet": False}
i = 0
while i < len(args):
    a = args[i]
    if a == "--redis":
        opt["redis"] = True
    elif a == "--quiet":
        opt["quiet"] = True
    elif a in ("--truth", "--confirm-ms", "--slack-ms", "--max"):
        if i + 1 >= len(args):
            usage(a + " needs a value")
        v = args[i + 1]
        i += 1
        if a == "--truth":
            opt["truth"] = v
        else:
            try:
                opt[a[2:].replace("-", "_")] = int(v)
            except ValueError:
                usage(a + ": a number")
    else:
        usage("unknown argument " + a)
    i += 1

def cant(msg):
    print("invariants: could not check: " + msg)
    sys.exit(2)

# ---- settings: the environment first, then the stack's gp.env ----------------
env = {}
path = os.environ.get("GP_ENV_FILE") or (
    os.path.join(os.environ["GP_STACK_DIR"], "gp.env") if os.environ.get("GP_STACK_DIR") else None)
if path:
    try:
        for line in open(path):
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                env[k.strip()] = v.strip()
    except OSError as e:
        cant("cannot read %s: %s" % (path, e))
def setting(k):
    return os.environ.get(k) or env.get(k)
conninfo = setting("GP_PG_CONNINFO")
if not conninfo:
    cant("no GP_PG_CONNINFO (set it, GP_ENV_FILE or GP_STACK_DIR)")

violations = {}
def violation(kind, text):
    violations.setdefault(kind, []).append(text)

# ---- PostgreSQL --------------------------------------------------------------
def psql(sql):
    """Rows of a query as lists of strings (COPY TO STDOUT, tab separated)."""
    try:
        p = subprocess.run(["psql", conninfo, "-XAtq", "-v", "ON_ERROR_STOP=1",
                            "-c", "COPY (" + sql + ") TO STDOUT"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        cant("psql: %s" % e)
    if p.returncode != 0:
        cant("psql: " + p.stderr.strip().replace("\n", " ")[:300])
    return [l.split("\t") for l in p.stdout.split("\n") if l != ""]

LIVE = ("reserved", "starting", "running")
def ms(v):
    return None if v == "\\N" else int(v)

def read_attempts():
    """(now_ms on the database's clock, rows, jobs' states)"""
    rows = psql("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, a.job_id, "
                "a.attempt, a.rank, a.node, array_to_string(a.gpus, ','), a.state, a.created_ms, "
                "a.ended_ms, j.state FROM attempts a JOIN jobs j ON j.id = a.job_id")
    if not rows:
        rows = [[psql("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")[0][0]]]
        return int(rows[0][0]), [], {}
    now = max(int(r[0]) for r in rows)
    out, jobs = [], {}
    for r in rows:
        out.append({"job": r[1], "attempt": int(r[2]), "rank": int(r[3]), "node": r[4],
                    "gpus": [int(g) for g in r[5].split(",") if g != ""], "state": r[6],
                    "created": int(r[7]), "ended": ms(r[8])})
        jobs[r[1]] = r[9]
    return now, out, jobs

def overlaps(intervals, kind, fmt):
    """intervals: list of (start, end, label); reports each pair that
    overlaps by more than the slack, against the longest-running one seen."""
    intervals.sort(key=lambda x: (x[0], x[1]))
    best = None
    for s, e, lab in intervals:
        if best is not None and min(best[1], e) - s > opt["slack_ms"] and best[2] != lab:
            violation(kind, fmt(best, (s, e, lab)))
        if best is None or e > best[1]:
            best = (s, e, lab)

def check_history(now, rows, jobs):
    per_gpu, per_job = {}, {}
    for r in rows:
        live = r["state"] in LIVE
        end = now if live else r["ended"]
        if not live and r["ended"] is None:
            violation("ended_without_time", "attempt %s:%d rank %d on %s is %s without ended_ms"
                      % (r["job"], r["attempt"], r["rank"], r["node"], r["state"]))
            end = now
        end = max(end, r["created"])
        lab = "%s:%d" % (r["job"], r["attempt"])
        for g in r["gpus"]:
            per_gpu.setdefault((r["node"], g), []).append((r["created"], end, lab + "/" + r["state"]))
        a = per_job.setdefault(r["job"], {}).setdefault(r["attempt"], [r["created"], end, r["state"]])
        a[0], a[1] = min(a[0], r["created"]), max(a[1], end)
        if live and jobs.get(r["job"]) in ("succeeded", "failed", "cancelled"):
            violation("live_attempt_of_ended_job", "job %s is %s but attempt %d on %s is %s"
                      % (r["job"], jobs[r["job"]], r["attempt"], r["node"], r["state"]))
    for (node, g), iv in per_gpu.items():
        if len(iv) > 1:
            overlaps(iv, "double_booking", lambda a, b, node=node, g=g:
                     "node %s GPU %d: %s [%d,%d) overlaps %s [%d,%d) by %d ms"
                     % (node, g, a[2], a[0], a[1], b[2], b[0], b[1], min(a[1], b[1]) - b[0]))
    for job, atts in per_job.items():
        if len(atts) > 1:
            iv = [(v[0], v[1], "attempt %d" % k) for k, v in atts.items()]
            overlaps(iv, "two_live_attempts", lambda a, b, job=job:
                     "job %s: %s [%d,%d) overlaps %s [%d,%d) by %d ms"
                     % (job, a[2], a[0], a[1], b[2], b[0], b[1], min(a[1], b[1]) - b[0]))

# ---- Redis (a minimal RESP client: no package needed) ------------------------
class Redis:
    def __init__(self, host, port):
        try:
            self.s = socket.create_connection((host, int(port)), timeout=30)
        except (OSError, ValueError) as e:
            cant("redis %s:%s: %s" % (host, port, e))
        self.f = self.s.makefile("rb")
    def cmd(self, *a):
        self.send(a)
        return self.read()
    def send(self, a):
        b = b"*%d\r\n" % len(a)
        for x in a:
            x = x if isinstance(x, bytes) else str(x).encode()
            b += b"$%d\r\n%s\r\n" % (len(x), x)
        self.s.sendall(b)
    def read(self):
        line = self.f.readline()
        if not line:
            cant("redis closed the connection")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            cant("redis: " + rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            d = self.f.read(n + 2)
            return d[:-2].decode()
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        cant("redis: unexpected reply %r" % line[:40])

def read_redis(r):
    """{(node, gpu): holder}, {node: shard}, {shard: set of indexed nodes}"""
    keys, cur = [], "0"
    while True:
        cur, batch = r.cmd("SCAN", cur, "MATCH", "gp:*:res:*", "COUNT", 1000)
        keys += batch
        if cur == "0":
            break
    res, shard_of = {}, {}
    for k in keys:                       # pipelined: one round trip for all
        r.send(("HGETALL", k))
    for k in keys:
        kv = r.read() or []
        shard, node = k[len("gp:{"):].split("}:res:", 1)
        shard_of[node] = shard
        for j in range(0, len(kv), 2):
            v = kv[j + 1]
            holder = v.rsplit(":", 1)[0] if v.count(":") >= 2 else v
            if holder.endswith(":0"):    # a hold for a preemptor, not a booking
                continue
            res[(node, int(kv[j]))] = holder
    index = {}
    for sh in set(shard_of.values()):
        index[sh] = set(r.cmd("SMEMBERS", "gp:{%s}:resnodes" % sh) or [])
    return res, shard_of, index

def redis_diff(r):
    _, rows, _ = read_attempts()
    res, shard_of, index = read_redis(r)
    live = {}
    for a in rows:
        if a["state"] in LIVE:
            for g in a["gpus"]:
                live[(a["node"], g)] = "%s:%d" % (a["job"], a["attempt"])
    d = {}
    for (node, g), h in res.items():
        if live.get((node, g)) != h:
            d[("orphan_reservation", node, g, h)] = (
                "node %s GPU %d is reserved for %s, which has no live attempt there%s"
                % (node, g, h, "" if (node, g) not in live else " (the live one is %s)" % live[(node, g)]))
    for (node, g), h in live.items():
        if res.get((node, g)) != h:
            d[("missing_reservation", node, g, h)] = (
                "live attempt %s on node %s GPU %d has no reservation (Redis: %s)"
                % (h, node, g, res.get((node, g)) or "free"))
    for node, sh in shard_of.items():
        if node not in index.get(sh, set()):
            d[("unindexed_reservation", node, 0, sh)] = (
                "node %s holds reservations but is not in gp:{%s}:resnodes" % (node, sh))
    return d, len(res), len(live)

# ---- the simulator's ground truth -------------------------------------------
def check_truth(path):
    try:
        text = open(path).read()
    except OSError as e:
        cant("truth %s: %s" % (path, e))
    lines = text.split("\n")
    if lines and lines[-1] != "":
        lines = lines[:-1]               # a line being written: not whole yet
    per_gpu, per_job, n, no_idx = {}, {}, 0, 0
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            t = json.loads(line)
            job, att, node = t["job_id"], int(t["attempt"]), t["node"]
            s, e = int(t["start_ms"]), int(t["end_ms"])
        except (ValueError, KeyError, TypeError) as ex:
            cant("truth %s line %d: %s" % (path, no, ex))
        n += 1
        lab = "%s:%d" % (job, att)
        if "gpu_idx" in t:
            for g in t["gpu_idx"]:
                per_gpu.setdefault((node, int(g)), []).append((s, e, lab))
        else:
            no_idx += 1
        a = per_job.setdefault(job, {}).setdefault(att, [s, e])
        a[0], a[1] = min(a[0], s), max(a[1], e)
    for (node, g), iv in per_gpu.items():
        if len(iv) > 1:
            overlaps(iv, "truth_gpu_shared", lambda a, b, node=node, g=g:
                     "node %s GPU %d ran %s [%d,%d) and %s [%d,%d) at once (%d ms)"
                     % (node, g, a[2], a[0], a[1], b[2], b[0], b[1], min(a[1], b[1]) - b[0]))
    for job, atts in per_job.items():
        if len(atts) > 1:
            iv = [(v[0], v[1], "attempt %d" % k) for k, v in atts.items()]
            overlaps(iv, "truth_two_attempts", lambda a, b, job=job:
                     "job %s: %s [%d,%d) and %s [%d,%d) ran at once (%d ms)"
                     % (job, a[2], a[0], a[1], b[2], b[0], b[1], min(a[1], b[1]) - b[0]))
    return n, no_idx

# ---- run ---------------------------------------------------------------------
now, rows, jobs = read_attempts()
check_history(now, rows, jobs)
summary = ["attempt rows %d" % len(rows), "jobs with attempts %d" % len(jobs)]
if opt["redis"]:
    host, port = setting("GP_REDIS_HOST") or "127.0.0.1", setting("GP_REDIS_PORT")
    if not port:
        cant("no GP_REDIS_PORT")
    r = Redis(host, port)
    d, nres, nlive = redis_diff(r)
    if d and opt["confirm_ms"] > 0:
        time.sleep(opt["confirm_ms"] / 1000.0)
        d2, nres, nlive = redis_diff(r)
        d = {k: d2[k] for k in d if k in d2}      # what is still there, the same
    for k, text in sorted(d.items()):
        violation(k[0], text)
    summary.append("reserved GPUs %d, live attempt GPUs %d" % (nres, nlive))
if opt["truth"]:
    n, no_idx = check_truth(opt["truth"])
    summary.append("truth lines %d%s" % (n, " (%d without gpu_idx: GPUs not checked)" % no_idx
                                         if no_idx else ""))
total = 0
for kind in sorted(violations):
    lst = violations[kind]
    total += len(lst)
    if not opt["quiet"]:
        for text in lst[:opt["max"]]:
            print("violation: %s: %s" % (kind, text))
        if len(lst) > opt["max"]:
            print("violation: %s: ... and %d more" % (kind, len(lst) - opt["max"]))
print("invariants: %s; %d violation(s)%s" % (", ".join(summary), total,
      "" if not total else " (" + ", ".join("%s %d" % (k, len(v)) for k, v in sorted(violations.items())) + ")"))
sys.exit(1 if total else 0)
PY
