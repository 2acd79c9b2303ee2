#!/usr/bin/env bash
# k8s_test.sh -- deploy/k8s renders and validates offline.
#
# Every kustomization (base, engines, overlays/pilot, overlays/production)
# renders with `kubectl kustomize`; every resource of both overlays
# validates against the Kubernetes API's own types with
# deploy/k8s/validate/check.mjs (kubernetes-models' validators, and the
# TypeScript compiler for fields the API does not have); what a deployment
# needs is there (a Deployment per service with /readyz and /healthz
# probes and scrape annotations, a PodDisruptionBudget each, NATS as a
# 3-server StatefulSet with JetStream volumes, settings and credentials
# from a ConfigMap and Secrets, each service with tables migrating in an
# initContainer, the one container with the PostgreSQL migrator's Secret,
# and logging in with its own; NATS's placeholder authorization admits no
# one and is the server's alone; no simulator identity); JetStream fits the
# servers' volumes (max_file_store below the volume, the streams' byte
# limits within max_file_store, every stream 3 replicas); and planted
# mistakes (a misspelt field, a string where a number goes, an unknown
# kind) fail the check.
# Prints TAP.  Needs kubectl (>= 1.24: kustomize 4 labels and replicas)
# and node with deploy/k8s/validate's packages (make deps); SKIPs without.
# test-tags: pass=normal (tests/run.sh)
set -u
here=$(cd "$(dirname "$0")/../../.." && pwd)
k8s=$here/deploy/k8s
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() {       # status message
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fails=$((fails + 1)); fi
}

minor=$(kubectl version --client -o json 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; print(int(json.load(sys.stdin)["clientVersion"]["minor"].rstrip("+")))' 2>/dev/null)
if [ -z "$minor" ] || [ "$minor" -lt 24 ]; then
    echo "1..0 # SKIP needs kubectl >= 1.24 (found: ${minor:+1.}${minor:-none})"
    exit 0
fi
if ! command -v node >/dev/null || [ ! -d "$k8s/validate/node_modules/kubernetes-models" ]; then
    echo "1..0 # SKIP needs node and deploy/k8s/validate/node_modules (make deps: npm ci)"
    exit 0
fi

# ---- rendering ------------------------------------------------------------------------
for d in base engines overlays/pilot overlays/production; do
    kubectl kustomize "$k8s/$d" >"$tmp/${d##*/}.yaml" 2>"$tmp/${d##*/}.err"
    st_=$?
    ok $st_ "kubectl kustomize deploy/k8s/$d: $(grep -c '^kind:' "$tmp/${d##*/}.yaml") resources"
done

# ---- validation -------------------------------------------------------------------------
for o in pilot production; do
    node "$k8s/validate/check.mjs" "$tmp/$o.yaml" >"$tmp/$o.check" 2>&1
    st_=$?
    ok $st_ "$o validates against the Kubernetes API's types: $(tail -n 1 "$tmp/$o.check")"
    [ $st_ -eq 0 ] || sed 's/^/#   /' "$tmp/$o.check" | head -n 10
done

# ---- what a deployment needs ----------------------------------------------------------------
node --input-type=module -e "
import { parseAllDocuments } from '$k8s/validate/node_modules/yaml/dist/index.js';
import { readFileSync } from 'node:fs';
for (const f of ['pilot', 'production'])
  console.log(JSON.stringify(parseAllDocuments(readFileSync('$tmp/' + f + '.yaml', 'utf8')).map(d => d.toJS())));
" >"$tmp/docs.jsonl" 2>"$tmp/docs.err"
/usr/bin/python3 - "$tmp/docs.jsonl" >"$tmp/needs.out" <<'PY'
import json, re, sys
svcs = ['registry', 'scheduler', 'recovery', 'metering', 'billing', 'alerting']
# the streams' default byte limits in MiB (services/*: sched_streams,
# metering_streams, alerting_streams; shared/src/app.c: DLQ)
STREAM_MB = {'JOBS': 1024, 'ATTEMPTS': 1024, 'USAGE': 4096, 'FLEET': 1024, 'ALERTS': 512, 'DLQ': 512}
UNITS = {'K': 10**3, 'M': 10**6, 'G': 10**9, 'T': 10**12, 'Ki': 2**10, 'Mi': 2**20, 'Gi': 2**30, 'Ti': 2**40}

def size(v):          # "16G" (nats-server: 10^9), "20Gi" (Kubernetes) -> bytes
    v = str(v)
    for u in sorted(UNITS, key=len, reverse=True):
        if v.endswith(u):
            return int(float(v[:-len(u)]) * UNITS[u])
    return int(v)

def storage(by):      # JetStream within the volumes, the streams within JetStream, 3 replicas
    bad = []
    nats = by.get(('StatefulSet', 'nats'))
    conf = by[('ConfigMap', 'nats-config')]['data']['nats.conf']
    env = {e['name']: e.get('value') for e in nats['spec']['template']['spec']['containers'][0].get('env', [])}
    m = [l.split(':', 1)[1].strip() for l in conf.splitlines() if l.strip().startswith('max_file_store')]
    store = size(env.get(m[0][1:], '') if m and m[0].startswith('$') else m[0]) if m else 0
    vol = size(nats['spec']['volumeClaimTemplates'][0]['spec']['resources']['requests']['storage'])
    if not 0 < store < vol:
        bad.append('max_file_store %d not below the volume %d' % (store, vol))
    cfg = by[('ConfigMap', 'gridpool-config')]['data']
    if cfg.get('GP_STREAM_REPLICAS') != '3':
        bad.append('GP_STREAM_REPLICAS %s, not 3' % cfg.get('GP_STREAM_REPLICAS'))
    spec = dict(kv.split('=') for kv in cfg.get('GP_STREAM_MAX_BYTES_MB', '').split(',') if kv)
    total = sum(int(spec.get(s, spec.get('*', mb))) for s, mb in STREAM_MB.items()) * 2**20
    if total >= store:
        bad.append('the streams take %d bytes of max_file_store %d' % (total, store))
    print('#', 'store', store, 'volume', vol, 'streams', total, file=sys.stderr)
    return bad
for name, line in zip(['pilot', 'production'], open(sys.argv[1])):
    docs = json.loads(line)
    by = {(d['kind'], d['metadata']['name']): d for d in docs}
    bad = []
    for s in svcs:
        dep = by.get(('Deployment', s))
        if dep is None:
            bad.append('no Deployment ' + s); continue
        pod = dep['spec']['template']
        c = pod['spec']['containers'][0]
        if c['readinessProbe']['httpGet']['path'] != '/readyz' or c['livenessProbe']['httpGet']['path'] != '/healthz':
            bad.append(s + ': probes')
        if pod['metadata']['annotations'].get('prometheus.io/scrape') != 'true':
            bad.append(s + ': scrape annotation')
        if not c['resources']['requests'].get('cpu') or not c['resources']['requests'].get('memory'):
            bad.append(s + ': requests')
        refs = {r.get('configMapRef', r.get('secretRef', {})).get('name') for r in c['envFrom']}
        want = {'gridpool-config', 'gridpool-nats-' + s, 'gridpool-postgres-' + s}
        if not want <= refs or 'gridpool-postgres-migrator' in refs:
            bad.append(s + ': settings ' + str(sorted(refs)))
        # the migrator's Secret: in the initContainer that migrates, alone
        inits = pod['spec'].get('initContainers') or []
        if not any(
                i.get('command') == ['gridpool-' + s, '--migrate-only'] and
                {r.get('secretRef', {}).get('name') for r in i.get('envFrom', [])} ==
                {'gridpool-postgres-migrator', 'gridpool-postgres-' + s} for i in inits):
            bad.append(s + ': no initContainer migrating with the migrator Secret')
        if dep['spec']['replicas'] < 2 or ('PodDisruptionBudget', s) not in by:
            bad.append(s + ': replicas or PDB')
    nats = by.get(('StatefulSet', 'nats'))
    if not nats or nats['spec']['replicas'] != 3 or not nats['spec'].get('volumeClaimTemplates') \
            or 'jetstream' not in by[('ConfigMap', 'nats-config')]['data']['nats.conf']:
        bad.append('nats: 3 servers with JetStream volumes')
    if ('Service', 'redis') not in by:
        bad.append('no redis Service')
    bad += storage(by)
    # NATS admits no one until an operator puts deploy/nats-auth's file in:
    # the placeholder lists one user, a bcrypt hash of a value thrown away,
    # denied everything (an empty list would admit anyone), read by the
    # server alone; no simulator identity, Secret or Deployment
    conf = by.get(('Secret', 'nats-auth'), {}).get('stringData', {}).get('auth.conf', '')
    users = re.findall(r'user:\s*"([^"]*)",\s*password:\s*"([^"]*)"', conf)
    if len(users) != 1 or not re.match(r'^\$2[aby]\$1[0-9]\$[./A-Za-z0-9]{53}$', users[0][1]) \
            or 'deny: [">"] }, subscribe: { deny: [">"]' not in conf or 'allow' in conf:
        bad.append('nats-auth placeholder: one locked user, a bcrypt hash, deny all (%s)' % users)
    vol = [v for v in nats['spec']['template']['spec']['volumes'] if v['name'] == 'auth'] if nats else []
    if not vol or vol[0]['secret'].get('defaultMode') != 0o400:
        bad.append('nats auth volume: mode 0400')
    if any('sim' in (d['metadata']['name'].split('-') + [u for u, _ in users]) for d in docs):
        bad.append('a simulator identity, Secret or Deployment')
    reps = {s: by[('Deployment', s)]['spec']['replicas'] for s in svcs if ('Deployment', s) in by}
    print(name, 'ok' if not bad else 'bad', len(docs), ' '.join('%s=%d' % kv for kv in reps.items()), '; '.join(bad))
PY
while read -r o res cnt reps; do
    [ "$res" = ok ]
    ok $? "$o: 6 Deployments (probes /readyz and /healthz, scrape annotations, requests, settings from ConfigMap and Secrets, PostgreSQL: its own login, the migrator's only in the initContainer) each with a PDB, NATS 3 servers with JetStream volumes (max_file_store below the volume, the streams' byte limits within it, stream-replicas 3), a redis Service, NATS's placeholder authorization admitting no one (0400), no simulator identity ($cnt resources; replicas $reps)"
done <"$tmp/needs.out"
[ "$(wc -l <"$tmp/needs.out")" -eq 2 ]
ok $? "... both overlays read back as objects$( [ -s "$tmp/docs.err" ] && echo ": $(head -c 200 "$tmp/docs.err")")"

# ---- Redis authentication ------------------------------------------------------------------------
/usr/bin/python3 - "$tmp/docs.jsonl" >"$tmp/redis.out" <<'PY'
import json, sys
for name, line in zip(['pilot', 'production'], open(sys.argv[1])):
    by = {(d['kind'], d['metadata']['name']): d for d in json.loads(line)}
    bad = []
    for s in ['registry', 'scheduler', 'recovery', 'metering']:
        c = by[('Deployment', s)]['spec']['template']['spec']['containers'][0]
        if 'gridpool-redis-' + s not in {r.get('secretRef', {}).get('name') for r in c['envFrom']}:
            bad.append(s + ' lacks its Redis user')
    if name == 'pilot':
        r = by[('StatefulSet', 'redis')]['spec']['template']['spec']['containers'][0]
        acl = by[('Secret', 'redis-acl')]['stringData']['users.acl']
        if '--aclfile' not in r['args']:
            bad.append('redis runs without its ACL file')
        if 'user default off' not in acl:
            bad.append('the placeholder ACL lets the default user in')
    print(name, 'ok' if not bad else 'bad: ' + '; '.join(bad))
PY
while read -r o res; do
    [ "$res" = ok ]
    ok $? "$o: each Redis-using service logs in as its own user (a Secret each); the pilot's Redis runs with an ACL file whose placeholder refuses the default user ($res)"
done <"$tmp/redis.out"

# ---- mistakes are caught -----------------------------------------------------------------------
sed '0,/^        image: \(.*gridpool.*\)$/s//        image: \1\n        imagePullPolic: Always/' "$tmp/production.yaml" \
    >"$tmp/typo.yaml"
node "$k8s/validate/check.mjs" "$tmp/typo.yaml" >"$tmp/typo.check" 2>&1
st_=$?
[ $st_ -ne 0 ] && grep -q "Deployment/.*'\"imagePullPolic\"' does not exist in type 'IContainer'" "$tmp/typo.check"
ok $? "a misspelt field (imagePullPolic) fails: $(head -n 1 "$tmp/typo.check")"
sed '0,/replicas: 2/s//replicas: two/' "$tmp/production.yaml" >"$tmp/type.yaml"
node "$k8s/validate/check.mjs" "$tmp/type.yaml" >"$tmp/type.check" 2>&1
st_=$?
[ $st_ -ne 0 ] && grep -q "replicas must be integer" "$tmp/type.check"
ok $? "a string where a number goes (replicas: two) fails: $(head -n 1 "$tmp/type.check")"
printf 'apiVersion: apps/v1\nkind: Deploymnet\nmetadata:\n  name: x\n' >"$tmp/kind.yaml"
node "$k8s/validate/check.mjs" "$tmp/kind.yaml" >"$tmp/kind.check" 2>&1
st_=$?
[ $st_ -ne 0 ] && grep -q "no schema for apiVersion apps/v1 kind Deploymnet" "$tmp/kind.check"
ok $? "an unknown kind (Deploymnet) fails"

echo "1..$n"
[ "$fails" -eq 0 ]
