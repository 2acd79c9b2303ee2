#!/usr/bin/env bash
# contract_drift_test.sh -- what the services serve is what
# schemas/asyncapi.json says, both ways.
#
# Every service binary prints the operations it serves, declares or binds
# (--print-routes, a bare bool flag: "route <service> <operation id> <subject pattern>",
# and "stream <service> <NAME> <subjects>", "durable <service> <STREAM> <name>"
# for its JetStream streams and consumers) and exits without serving.  Fails when a service serves an operation that is
# not in the contract or that the contract does not give to it
# (x-gp-service), when a receive operation of the contract is served by
# none of the services it names, when a pattern differs from the address,
# when a stream or durable consumer differs from x-gp-streams,
# or when services/ holds a string literal of a contract subject (services
# name operations: GP_OP_...).  Prints TAP.
set -u
here=$(cd "$(dirname "$0")/../../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$here/$build ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
nok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; }

# binary of a service name (x-gp-service values)
bin_of() {
    case $1 in
        testsvc) echo "$build/test/bin/testsvc" ;;
        *) echo "$build/bin/gridpool-$1" ;;
    esac
}

services=$(/usr/bin/python3 - "$here/schemas/asyncapi.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = set()
for op in d['operations'].values():
    sv = op.get('x-gp-service') or []
    names.update([sv] if isinstance(sv, str) else sv)
print(' '.join(sorted(names)))
PY
)
[ -n "$services" ] && ok "the contract names the services that serve it ($services)" \
    || nok "the contract names no service"

: >"$tmp/served"
: >"$tmp/streams"
for s in $services; do
    b=$(bin_of "$s")
    if [ ! -x "$b" ]; then
        nok "service $s has a binary ($b)"
        continue
    fi
    # Extra options each binary needs to get as far as its routes; the bus
    # and databases are not reachable and need not be.
    extra=()
    [ "$s" = agent ] && extra=(--site s0001 --node s0001-n1 --gpu-backend sim)
    if GP_NATS_URL=nats://127.0.0.1:1 timeout 20 "$b" --print-routes --http-port -1 \
            "${extra[@]}" >"$tmp/$s.routes" 2>"$tmp/$s.err"; then
        ok "$s --print-routes exits 0"
    else
        nok "$s --print-routes exits 0"; sed 's/^/# /' "$tmp/$s.err" | tail -5
    fi
    grep '^route ' "$tmp/$s.routes" >>"$tmp/served"
    grep -E '^(stream|durable) ' "$tmp/$s.routes" >>"$tmp/streams"
done

/usr/bin/python3 - "$here/schemas/asyncapi.json" "$tmp/served" "$services" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
present = set(sys.argv[3].split())
served = {}
for line in open(sys.argv[2]):
    f = line.split()[1:]
    served.setdefault(f[0], {})[f[1]] = f[2]
chans = d['channels']
errors = []
for svc, ops in sorted(served.items()):
    for oid, pat in sorted(ops.items()):
        op = d['operations'].get(oid)
        if op is None:
            errors.append('%s serves %s (%s), which asyncapi.json lacks' % (svc, oid, pat))
            continue
        sv = op.get('x-gp-service') or []
        sv = [sv] if isinstance(sv, str) else sv
        if svc not in sv:
            errors.append('%s serves %s, but asyncapi.json gives it to %s' % (svc, oid, sv))
        addr = chans[op['channel']['$ref'].split('/')[-1]]['address']
        if re.sub(r'\{[^{}]*\}', '*', addr) != pat:
            errors.append('%s serves %s on %s, asyncapi.json says %s' % (svc, oid, pat, addr))
for oid, op in d['operations'].items():
    if op['action'] != 'receive':
        continue
    sv = op.get('x-gp-service') or []
    sv = [sv] if isinstance(sv, str) else sv
    for s in sv:
        if oid not in served.get(s, {}):
            errors.append('receive operation %s: service %s does not serve it' % (oid, s))
for e in errors:
    print('# ' + e)
sys.exit(1 if errors else 0)
PY
if [ $? -eq 0 ]; then
    ok "services serve exactly the receive operations of asyncapi.json"
else
    nok "services serve exactly the receive operations of asyncapi.json"
fi

# The JetStream streams each service declares (with their subjects) and
# the durable consumers it reads are the contract's x-gp-streams, from
# which deploy/nats-auth grants the JetStream API: a stream or consumer
# the contract lacks would be refused by nats-server under authorization.
/usr/bin/python3 - "$here/schemas/asyncapi.json" "$tmp/streams" "$services" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
present = set(sys.argv[3].split()) - {'agent'}
st = d['x-gp-streams']
want, got = set(), set()
for name, s in st.items():
    for svc in s['declared-by']:
        want.add(('stream', svc, name, ','.join(s['subjects'])))
    for dn, c in s['consumers'].items():
        if 'made-by' not in c and c['by'] in present:
            want.add(('durable', c['by'], name, dn))
for line in open(sys.argv[2]):
    got.add(tuple(line.split()))
want = {w for w in want if w[1] in present}
for w in sorted(got - want):
    print('# %s: not in x-gp-streams' % ' '.join(w))
for w in sorted(want - got):
    print('# x-gp-streams says %s, the binary does not' % ' '.join(w))
sys.exit(0 if got == want and got else 1)
PY
if [ $? -eq 0 ]; then
    ok "services declare and consume exactly the streams and durables of x-gp-streams"
else
    nok "services declare and consume exactly the streams and durables of x-gp-streams"
fi

# Every operation a program's sources name (GP_OP_...) is one the contract
# lets it use: served (x-gp-service), sent (x-gp-senders, or x-gp-service
# of a send operation) or read (x-gp-readers).  nats-server refuses a
# subject outside these once deploy/nats-auth derived the permissions, so
# a new call must be marked in the contract first.  gpctl is the operator.
# Exception: recovery names nodeLease only to read the leaves' /leafz.
/usr/bin/python3 - "$here" <<'PY'
import glob, json, re, sys
here = sys.argv[1]
d = json.load(open(here + '/schemas/asyncapi.json'))
snake = lambda oid: 'GP_OP_' + re.sub(r'([a-z0-9])([A-Z])', r'\1_\2', oid).upper()
by_name = {snake(k): k for k in d['operations']}
known = {('recovery', 'nodeLease')}
errors = []
for prog in sorted(p.split('/')[-1] for p in glob.glob(here + '/services/*')):
    who_am_i = 'operator' if prog == 'gpctl' else prog
    used = set()
    for f in glob.glob('%s/services/%s/*.[ch]' % (here, prog)):
        used |= set(re.findall(r'\bGP_OP_[A-Z0-9_]*[A-Z0-9]\b', open(f).read()))
    for u in sorted(used):
        oid = by_name.get(u)
        if oid is None or (prog, oid) in known:
            continue
        op = d['operations'][oid]
        marks = set()
        for k in ('x-gp-service', 'x-gp-senders', 'x-gp-readers'):
            v = op.get(k) or []
            marks |= set([v] if isinstance(v, str) else v)
        if who_am_i not in marks:
            errors.append('%s names %s, which the contract does not give it (%s)'
                          % (prog, oid, ', '.join(sorted(marks))))
for e in errors:
    print('# ' + e)
sys.exit(1 if errors else 0)
PY
if [ $? -eq 0 ]; then
    ok "every operation a program names is one it serves, sends or reads in the contract"
else
    nok "every operation a program names is one it serves, sends or reads in the contract"
fi

# No contract subject as a string literal in services/: every subject of
# gridpool starts with "gp." (or is a NATS inbox), so a quoted "gp. or
# "_INBOX in services/ is a hand-written subject.
# grep: 1 is "no match"; 2 (no services/ folder, unreadable file) must not
# pass for a clean tree, and neither may a tree without C files.
hits=$(grep -rnE '"(gp\.|_INBOX)' "$here/services" --include='*.c' --include='*.h')
grc=$?
nfiles=$(find "$here/services" -name '*.c' 2>/dev/null | wc -l)
if [ "$grc" -eq 1 ] && [ "$nfiles" -gt 0 ]; then
    ok "no contract subject is a string literal in services/"
else
    nok "no contract subject is a string literal in services/ (grep status $grc, $nfiles C files)"
    printf '%s\n' "$hits" | sed 's/^/# /' | head -20
fi
echo "1..$n"
exit $fail
