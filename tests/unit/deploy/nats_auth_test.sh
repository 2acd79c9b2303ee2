#!/usr/bin/env bash
# nats_auth_test.sh -- deploy/nats-auth's files, without a server
# (tests/integration/e2e/nats_perms_test.sh runs them in nats-server).
#
#   - deploy/nats-permissions.md is what `nats-auth table` derives from the
#     contract now (change the contract, regenerate the table);
#   - no service, the operator or a tenant is granted a full wildcard
#     (">", "$JS.API.>"); each service may subscribe what it serves and
#     publish what it sends, and nothing of another service's serving;
#   - a tenant may read its own consumer tenant-<t> on JOBS (info, fetch,
#     ack) and create none;
#   - `init` makes the services and the operator, never the simulator
#     (only `nats-auth sim` does); every file is 0600; auth.conf holds
#     bcrypt hashes that check against the passwords, never a password;
#     a hash is made once (identities.json keeps it).
# test-tags: pass=normal (tests/run.sh)
set -u
here=$(cd "$(dirname "$0")/../../.." && pwd)
NA=$here/deploy/nats-auth
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() {       # status message
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fails=$((fails + 1)); fi
}

"$NA" table >"$tmp/table.md" 2>"$tmp/table.err"
cmp -s "$tmp/table.md" "$here/deploy/nats-permissions.md"
ok $? "deploy/nats-permissions.md is current (nats-auth table >deploy/nats-permissions.md)$(
    diff "$here/deploy/nats-permissions.md" "$tmp/table.md" | head -5 | tr '\n' ' ')"

export NATS_AUTH_BCRYPT_COST=4
A=$tmp/auth
"$NA" init "$A" --url nats://127.0.0.1:4222 >"$tmp/init.out" 2>&1
st_=$?
"$NA" tenant "$A" acme beta >>"$tmp/init.out" 2>&1
ok $((st_ + $?)) "init and tenant run ($(head -c 200 "$tmp/init.out"))"

/usr/bin/python3 - "$here/schemas/asyncapi.json" "$A" <<'PY' >"$tmp/perms.out"
import json, os, re, sys
import bcrypt
contract, d = sys.argv[1], sys.argv[2]
doc = json.load(open(contract))
ids = json.load(open(os.path.join(d, 'identities.json')))['identities']
conf = open(os.path.join(d, 'auth.conf')).read()
users = {}
for m in re.finditer(r'\{ user: "([^"]+)", password: "([^"]+)"\s+permissions: \{\s+'
                     r'publish:\s+\{ allow: \[([^]]*)\] \}\s+subscribe:\s+\{ allow: \[([^]]*)\] \}',
                     conf):
    users[m.group(1)] = (m.group(2), json.loads('[%s]' % m.group(3)), json.loads('[%s]' % m.group(4)))
chans = doc['channels']
def addr(op):
    return chans[op['channel']['$ref'].split('/')[-1]]['address']
def pat(a, svc):
    return re.sub(r'\{service\}', svc, re.sub(r'\{(?!service)[a-z_]+\}', '*', a))
def names(op, k):
    v = op.get(k) or []
    return [v] if isinstance(v, str) else v
bad = []
def check(cond, what):
    if not cond:
        bad.append(what)
names_ = sorted(users)
check(names_ == sorted(['admin', 'tenant-acme', 'tenant-beta'] + ['service-' + s for s in
      ['registry', 'scheduler', 'recovery', 'metering', 'billing', 'alerting']]),
      'identities of init + tenant: %s' % names_)
for i in ids:
    h, pub, sub = users[i['user']]
    check(h.startswith('$2b$04$') and bcrypt.checkpw(i['password'].encode(), h.encode()),
          '%s: bcrypt hash of its password' % i['user'])
    check(i['password'] not in conf, '%s: its password is not in auth.conf' % i['user'])
    check(i.get('hash') == h, '%s: identities.json keeps the hash' % i['user'])
    for x in pub + sub:
        check(x not in ('>', '$JS.API.>', '$JS.>', 'gp.>', '$JS.API.CONSUMER.>'),
              '%s: no full wildcard (%s)' % (i['user'], x))
    if i['kind'] != 'service':
        continue
    s = i['service']
    for oid, op in doc['operations'].items():
        a = addr(op)
        served = op['action'] == 'receive' and s in names(op, 'x-gp-service')
        sent = s in names(op, 'x-gp-service' if op['action'] == 'send' else 'x-gp-senders')
        if served and '{service}' not in a:
            check(a.replace('{', '').replace('}', '') and re.sub(r'\{[a-z_]+\}', '*', a) in sub,
                  '%s subscribes %s (%s)' % (i['user'], oid, a))
        if sent and '{service}' not in a:
            check(re.sub(r'\{[a-z_]+\}', '*', a) in pub, '%s publishes %s' % (i['user'], oid))
        if op['action'] == 'receive' and not served and not sent and \
                s not in names(op, 'x-gp-readers') and '{' not in a:
            check(a not in sub and a not in pub, '%s: nothing of %s (%s)' % (i['user'], oid, a))
    check('gp.int.health.%s' % s in sub and 'gp.int.health.*' not in sub,
          '%s answers its own health subject only' % i['user'])
_, tpub, tsub = users['tenant-acme']
check('$JS.API.CONSUMER.MSG.NEXT.JOBS.tenant-acme' in tpub and
      '$JS.API.CONSUMER.INFO.JOBS.tenant-acme' in tpub and '$JS.ACK.JOBS.tenant-acme.>' in tpub,
      'tenant-acme reads its consumer tenant-acme: %s' % [x for x in tpub if x.startswith('$')])
check(not [x for x in tpub if 'CREATE' in x or 'beta' in x or x.endswith('.*')],
      'tenant-acme creates no consumer and touches nothing of beta')
check(all(x.startswith('gp.api.acme.') or x.startswith('$JS.') for x in tpub) and
      sorted(tsub) == ['gp.api.acme._reply.>', 'gp.events.acme.job.*.*'],
      'tenant-acme publishes gp.api.acme.* only; subscribes its replies and events: %s' % tsub)
_, spub, _ = users['service-scheduler']
check('$JS.API.CONSUMER.DURABLE.CREATE.JOBS.*' in spub, 'the scheduler makes the tenants\' consumers')
# metering and alerting overhear the lease renewals (x-gp-overhear): they
# read them, and may not answer an agent
for svc in ('metering', 'alerting'):
    _, opub, osub = users['service-' + svc]
    check('gp.node.*.*.lease' in osub and 'gp.node.*.*._reply.>' not in opub,
          '%s reads the lease renewals and may not publish to an agent\'s inbox' % svc)
for b in bad:
    print(b)
PY
[ ! -s "$tmp/perms.out" ]
ok $? "auth.conf: bcrypt hashes only, no full wildcard, each service its own operations, tenants their own consumer$(
    head -5 "$tmp/perms.out" | tr '\n' ';')"

modes=$(stat -c '%a %n' "$A"/* | awk '$1 != "600"')
[ -z "$modes" ]
ok $? "every file nats-auth writes is 0600${modes:+ (not: $modes)}"
! grep -q '"sim"' "$A/identities.json" && ! [ -e "$A/sim.env" ]
ok $? "init makes no simulator identity"
h1=$(grep -o '"hash": "[^"]*"' "$A/identities.json" | head -1)
"$NA" sim "$A" >/dev/null 2>&1
h2=$(grep -o '"hash": "[^"]*"' "$A/identities.json" | head -1)
grep -q 'user: "sim"' "$A/auth.conf" && [ -f "$A/sim.env" ] && [ -n "$h1" ] && [ "$h1" = "$h2" ]
ok $? "nats-auth sim adds it; the hashes made before are kept"

echo "1..$n"
[ "$fails" -eq 0 ]
