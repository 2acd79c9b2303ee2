#!/usr/bin/env bash
# schema_validate_test.sh -- the C codec and the JSON Schemas agree.
#
# Runs $BUILD/test/bin/schema_dump (every generated sample, encoded by
# gp_msg_encode) and validates each <Title>.msgpack against
# schemas/<domain>/<Title>.json with Debian's python3-jsonschema (Draft
# 2020-12, $refs between files resolved over schemas/ by $id); checks that
# broken objects do not validate, that gen.py --check passes (and refuses
# broken folders, the markings deploy/nats-auth reads included), and that
# Error.code's enum is the gp_err names of shared/include/gp/err.h, in order.
# Prints TAP; exits non-zero on any failure.
set -u
here=$(cd "$(dirname "$0")/../../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$here/$build ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! "$build/test/bin/schema_dump" "$tmp" >"$tmp/dump.log" 2>&1; then
    echo "not ok 1 - schema_dump ran"; cat "$tmp/dump.log"; exit 1
fi
echo "ok 1 - schema_dump ran"

/usr/bin/python3 - "$here" "$tmp" <<'PY'
import base64, glob, json, os, re, subprocess, sys, warnings
import msgpack
import jsonschema
from jsonschema import Draft202012Validator

root, dump = sys.argv[1], sys.argv[2]
sdir = os.path.join(root, 'schemas')
n = 1
fails = 0

def tap(ok, what):
    global n, fails
    n += 1
    fails += not ok
    print('%sok %d - %s' % ('' if ok else 'not ', n, what))
    sys.stdout.flush()

schemas = {}
for path in sorted(glob.glob(os.path.join(sdir, '*', '*.json'))):
    with open(path) as f:
        s = json.load(f)
    schemas[s['title']] = s
store = {s['$id']: s for s in schemas.values()}

def validator(title):
    s = schemas[title]
    try:
        from referencing import Registry, Resource
        reg = Registry().with_resources(
            (k, Resource.from_contents(v)) for k, v in store.items())
        return Draft202012Validator(s, registry=reg)
    except ImportError:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', DeprecationWarning)
            res = jsonschema.RefResolver(s['$id'], s, store=store)
        return Draft202012Validator(s, resolver=res)

def jsonable(v):
    """msgpack -> the JSON data model: bin -> base64 (contentEncoding)."""
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    return v

def errors(title, obj):
    return [e.message for e in validator(title).iter_errors(obj)]

objs = {}
dumped = sorted(glob.glob(os.path.join(dump, '*.msgpack')))
tap(len(dumped) == len(schemas) and len(dumped) > 0,
    'one sample per schema (%d samples, %d schemas)' % (len(dumped), len(schemas)))
for path in dumped:
    title = os.path.basename(path)[:-len('.msgpack')]
    with open(path, 'rb') as f:
        raw = f.read()
    try:
        obj = jsonable(msgpack.unpackb(raw, raw=False, strict_map_key=True))
    except Exception as e:
        tap(False, '%s: msgpack decodes (%s)' % (title, e))
        continue
    objs[title] = obj
    if title not in schemas:
        tap(False, '%s: has a schema' % title)
        continue
    errs = errors(title, obj)
    tap(not errs, '%s: sample validates against its schema %s' % (title, '; '.join(errs[:3])))

# Broken objects must not validate (the validator really checks).
echo = objs.get('Echo', {})
bad = dict(echo, i32='not an integer')
tap(bool(echo) and bool(errors('Echo', bad)), 'Echo with a string for i32 is refused')
bad = {k: v for k, v in echo.items() if k != 'u64'}
tap(bool(echo) and bool(errors('Echo', bad)), 'Echo without required u64 is refused')
bad = dict(echo, item={'temp_c': 1.5})
tap(bool(echo) and bool(errors('Echo', bad)), 'Echo with item lacking its required name is refused ($ref)')
bad = dict(echo, items=echo.get('items', []) + [{'name': 'x', 'count': 'many'}])
tap(bool(echo) and bool(errors('Echo', bad)), 'Echo with items[].count a string is refused')
hl = objs.get('Health', {})
tap(bool(hl) and bool(errors('Health', dict(hl, nats='sideways'))), 'Health with a bad enum is refused')
er = objs.get('ErrorReply', {})
tap(bool(er) and bool(errors('ErrorReply', {'error': {'code': 'NOPE', 'message': ''}})),
    'ErrorReply with an unknown code is refused (cross-file $ref)')

# gen.py --check passes.
p = subprocess.run(['/usr/bin/python3', os.path.join(sdir, 'gen.py'), '--schemas', sdir,
                    '--check'], capture_output=True, text=True)
tap(p.returncode == 0, 'gen.py --check passes %s' % p.stderr.strip()[:500])

# gen.py --check refuses broken schema folders (copies in a temp dir).
import shutil, tempfile
def broken(what, edit):
    d = tempfile.mkdtemp(dir=dump)
    shutil.copytree(sdir, os.path.join(d, 's'))
    edit(os.path.join(d, 's'))
    p = subprocess.run(['/usr/bin/python3', os.path.join(sdir, 'gen.py'), '--schemas',
                        os.path.join(d, 's'), '--check'], capture_output=True, text=True)
    tap(p.returncode != 0 and what[1] in p.stderr,
        'gen.py --check refuses %s (%s)' % (what[0], p.stderr.strip()[:200]))

def patch(rel, fn):
    def edit(root):
        path = os.path.join(root, rel)
        with open(path) as f:
            doc = json.load(f)
        fn(doc)
        with open(path, 'w') as f:
            json.dump(doc, f)
    return edit

broken(('a string without maxLength', 'maxLength'),
       patch('test/Echo.json', lambda d: d['properties']['str'].pop('maxLength')))
broken(('an inline object', 'inline objects'),
       patch('test/Echo.json', lambda d: d['properties'].update(
           o={'description': 'x', 'type': 'object', 'properties': {}})))
broken(('an array without maxItems', 'maxItems'),
       patch('test/Echo.json', lambda d: d['properties']['tags'].pop('maxItems')))
broken(('a $ref to a missing schema', 'no such schema'),
       patch('test/Echo.json', lambda d: d['properties']['item'].update({'$ref': 'Nope.json'})))
broken(('a channel whose payload schema is missing', 'no such schema'),
       patch('asyncapi.json', lambda d: d['components']['messages']['Echo']['payload'].update(
           {'$ref': 'test/Nope.json'})))
broken(('an invalid examples[0]', 'examples[0]'),
       patch('test/Echo.json', lambda d: d['examples'][0].update(level=99)))
# the markings deploy/nats-auth derives permissions from
broken(('a receive operation without its senders', '"x-gp-senders" must name'),
       patch('asyncapi.json', lambda d: d['operations']['apiJobGet'].pop('x-gp-senders')))
broken(('a sender that is no identity', "x-gp-senders ['nobody']"),
       patch('asyncapi.json', lambda d: d['operations']['apiJobGet'].update(
           {'x-gp-senders': ['tenant', 'nobody']})))
broken(('a send operation without its sender', '"x-gp-service" must name'),
       patch('asyncapi.json', lambda d: d['operations']['alert'].pop('x-gp-service')))
broken(('a tenant consumer read by another', "a tenant's consumer is named with {tenant}"),
       patch('asyncapi.json', lambda d: d['x-gp-streams']['JOBS']['consumers']
             ['tenant-{tenant}'].update(by='operator')))
broken(('a stream declared by no service', '"declared-by" must name'),
       patch('asyncapi.json', lambda d: d['x-gp-streams']['JOBS'].pop('declared-by')))

# Error.code == the names in err.h, in order (so the index is the gp_err).
with open(os.path.join(root, 'shared/include/gp/err.h')) as f:
    names = re.findall(r'^\s*X\((\w+),', f.read(), re.M)
codes = schemas['Error']['properties']['code']['enum']
tap(names and codes == names, 'Error.code enum equals err.h names in order %s'
    % ('' if codes == names else '(%s vs %s)' % (codes, names)))

print('1..%d' % n)
sys.exit(1 if fails else 0)
PY
