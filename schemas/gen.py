#!/usr/bin/python3
"""schemas/gen.py -- schemas/ -> msg_gen.h / msg_gen.c (descriptor tables for
shared/src/codec.c).  Standard library only.

    gen.py --schemas schemas --out build/gen      generate
    gen.py --schemas schemas --check              check only; non-zero on any error

LAYOUT
  schemas/<domain>/<Title>.json   one message per file (JSON Schema 2020-12):
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id":     "https://gridpool.example/schemas/<domain>/<Title>.json",
      "title":   "<Title>" (CamelCase, equal to the file name, unique across
                 domains), "description", "type": "object", "properties",
                 "required", "additionalProperties": true, optional "examples".
      Every property has a "description".
  schemas/asyncapi.json           AsyncAPI 3.0.0, the subjects (see below).

PROPERTY TYPES (anything else is an error, so the C codec enforces every
constraint the schema states)
  string + maxLength                    char name[maxLength + 1]     GP_T_STR
  string + enum (maxLength optional)    int32_t, MSG_<T>_<F>_<VALUE> GP_T_ENUM
  string + contentEncoding "base64"
      or format "binary", + maxLength   gp_bytes (maxLength in bytes) GP_T_BYTES
  boolean                               bool                         GP_T_BOOL
  integer (+ format int32|uint32|int64|uint64; default int64)
                                        int32_t..uint64_t            GP_T_I32..U64
  number                                double                       GP_T_F64
  minimum / maximum on integer/number   GP_FF_MIN / GP_FF_MAX bounds
  {"$ref": "Other.json"} (relative file path, e.g. "../common/Error.json")
                                        msg_other (inline struct)    GP_T_OBJ
  array + maxItems + items (one of the above but array/bytes)
                                        gp_arr                       GP_T_ARR
  Allowed annotations: description, title, examples, default, deprecated,
  $comment, readOnly, writeOnly, contentMediaType.  "readOnly": true sets
  GP_FF_READONLY: the owner computes the field; clients do not set it.  Inline objects, pattern,
  minLength, oneOf... are errors: give the object its own file and $ref it.
  String limits are bytes in C (maxLength counts characters in JSON Schema;
  the codec is the stricter of the two for non-ASCII text).

SAMPLES: examples[0] when present (checked here), else synthesized: each
  property's own examples[0] if any, else a valid non-zero value ("x..."
  strings, first enum value, arrays of two items).  A $ref'd message's sample
  is its own sample.

ASYNCAPI (standard AsyncAPI 3.0.0 request/reply with dynamic reply address):
  "defaultContentType": "application/msgpack",
  "channels": {
    "health": {                                  <- channel id: GP_SUBJ_HEALTH
      "address": "gp.int.health.{service}",
      "parameters": {"service": {"description": "..."}},  one per {token}
      "messages": {"HealthRequest": {"$ref": "#/components/messages/HealthRequest"}}
    },
    "healthReply": {                             <- reply channel: address null
      "address": null,                              (NATS inbox), not a subject
      "messages": {"Health": {"$ref": "#/components/messages/Health"}}
    }
  },
  "operations": {
    "health": {
      "action": "receive",                       <- the service's view
      "channel": {"$ref": "#/channels/health"},
      "messages": [{"$ref": "#/channels/health/messages/HealthRequest"}],
      "reply": {
        "address": {"location": "$message.header#/replyTo"},
        "channel": {"$ref": "#/channels/healthReply"},
        "messages": [{"$ref": "#/channels/healthReply/messages/Health"}]
      }
    }
  },
  "components": {"messages": {"Health": {"name": "Health", "title": ...,
      "payload": {"$ref": "common/Health.json"}}}}   path relative to schemas/
  Addressed channels carry exactly one message (the request, or the event for
  publish-only subjects: no operation with a reply).  A reply message must not
  have an "error" object property (error replies are {"error": {...}}).
  Every {parameter} is a whole subject token and is declared once with a
  "description" and "examples" (subject tokens), plus an "enum" where the set
  is closed (e.g. the service names of gp.int.health.{service}), so a client
  in another language knows what to put there.
  Every "receive" operation names the service(s) that serve it in
  "x-gp-service" (one of the health channel's service enum, or "agent");
  tests/unit/schemas/contract_drift_test.sh checks the services serve exactly these.
  Who else uses a subject, so deploy/nats-auth can derive each identity's
  NATS permissions from this file (names: the services, "agent",
  "operator", "tenant"):
    "x-gp-senders"  (every receive operation) who publishes on its channel:
                    the callers of a request, the publishers of an event;
    "x-gp-service"  on a "send" operation: who sends it;
    "x-gp-readers"  (optional) who subscribes to it without serving it: a
                    service's plain subscription, a watcher, a stream reader;
    "x-gp-overhear" (optional, a subset of x-gp-service of a request) who
                    serves it without ever replying (gp/app.h's
                    GP_R_OVERHEAR): no right to the callers' inboxes.
  "x-gp-streams" (top level) lists the JetStream streams: NAME ->
  {"description", "subjects" (patterns), "declared-by" (services that create
  or update it alike), "consumers": {DURABLE -> {"by": who reads it,
  optional "made-by": the service that creates it for "by" (then "filter",
  its subject filter), "description"}}}.  A DURABLE "*" is any name of
  that reader's choosing; "{tenant}" in a name or filter is the tenant's
  id.  contract_drift_test.sh checks the services declare and consume
  exactly these.
  A channel with "x-gp-inbox": true is a reply inbox (where replies arrive):
  addressed, with parameters, no messages of its own.
  "x-gp-limit-by": "<parameter>" on a receive operation with a reply: the
  serving chassis keeps a request-rate and in-flight limit per value of that
  parameter (the tenant of gp.api.{tenant}.>), refusing the excess with
  RATE_LIMITED and a retry hint (gp/ratelimit.h).

OUTPUT (msg_gen.h), per message Title (snake = title_snake):
  typedef struct msg_<snake> { uint64_t has; <fields in schema order> } msg_<snake>;
  enum { MSG_<SNAKE>__<FIELD> = i, ... };          field indexes for GP_HAS
  enum { MSG_<SNAKE>_<FIELD>_<VALUE> = i, ... };   per enum field (or array of enum)
  extern const char *const msg_<snake>_<field>_names[];
  extern const gp_msg_desc msg_<snake>_desc;
  #define GP_SUBJ_<CHANNEL_ID> "<address>"         per addressed channel and inbox
  #define GP_PAT_<CHANNEL_ID> "<pattern>"          the same, each {param} a "*"
  #define MSG_<T>_<F>_MAXLEN / _MAXITEMS / _ITEM_MAXLEN / _MIN / _MAX
                                                   each schema bound, named
  extern const gp_op gp_op_<op>;  GP_OP_<OP>       per AsyncAPI operation (gp/op.h):
                                                   pattern, parameters, request and
                                                   reply descriptors, serving services
  extern const gp_op gp_inbox_<ch>; GP_INBOX_<CH>  per inbox channel (no messages)
  extern const gp_op *const gp_ops[];              every operation, ends NULL
  extern const msg_sample msg_all[];               {desc, sample}, ends {NULL, NULL}
  extern const msg_channel msg_channels[];         {id, address, request, reply}, ends NULL id
"""
import argparse
import base64
import json
import math
import os
import re
import sys

ID_BASE = 'https://gridpool.example/schemas/'
SCHEMA_URI = 'https://json-schema.org/draft/2020-12/schema'
MAX_FIELDS = 64
MAX_DEPTH = 8          # GP_MAX_DEPTH

INT_RANGE = {
    'I32': (-2**31, 2**31 - 1), 'U32': (0, 2**32 - 1),
    'I64': (-2**63, 2**63 - 1), 'U64': (0, 2**64 - 1),
}
INT_FORMATS = {'int32': 'I32', 'uint32': 'U32', 'int64': 'I64', 'uint64': 'U64'}
CTYPE = {'BOOL': 'bool', 'I32': 'int32_t', 'I64': 'int64_t', 'U32': 'uint32_t',
         'U64': 'uint64_t', 'F64': 'double', 'ENUM': 'int32_t'}
ANNOTATIONS = {'description', 'title', 'examples', 'default', 'deprecated',
               '$comment', 'readOnly', 'writeOnly', 'contentMediaType'}
TOP_KEYS = {'$schema', '$id', 'title', 'description', 'type', 'properties',
            'required', 'additionalProperties', 'examples', '$comment', 'deprecated'}
C_KEYWORDS = set('''auto break case char const continue default do double else enum
extern float for goto if inline int long register restrict return short signed sizeof
static struct switch typedef union unsigned void volatile while bool true false has
_Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn
_Static_assert _Thread_local'''.split())


class GenError(Exception):
    pass


def snake(name):
    s = re.sub(r'([A-Z]+)([A-Z][a-z])', r'\1_\2', name)
    s = re.sub(r'([a-z0-9])([A-Z])', r'\1_\2', s)
    s = re.sub(r'[^A-Za-z0-9]+', '_', s).strip('_')
    return s.lower()


def upper(name):
    return snake(name).upper()


class Field:
    def __init__(self, name, kind):
        self.name = name
        self.kind = kind          # STR BOOL I32 I64 U32 U64 F64 ENUM OBJ ARR BYTES
        self.elem = None          # a Field describing one item, for ARR
        self.limit = 0
        self.min = self.max = None
        self.enums = None
        self.ref = None           # schema path, for OBJ
        self.required = False
        self.read_only = False    # "readOnly": computed by the owner, never set by clients
        self.examples = None


class Msg:
    def __init__(self, path, doc):
        self.path = path          # "common/Error.json"
        self.doc = doc
        self.title = doc.get('title', '')
        self.snake = snake(self.title)
        self.fields = []
        self.sample = None


class Op:
    def __init__(self, oid, action, cid, addr, req, params):
        self.id = oid
        self.action = action
        self.cid = cid
        self.addr = addr
        self.req = req            # Msg published on the address
        self.reply = None         # Msg of the reply, or None (an event)
        self.params = params      # parameter names, address order
        self.services = []
        self.limit_by = None      # x-gp-limit-by: the parameter a limit is kept per

    def pattern(self):
        return re.sub(r'\{[^{}]*\}', '*', self.addr)

    def param_tokens(self):
        toks = self.addr.split('.')
        return [toks.index('{%s}' % p) for p in self.params]


class Gen:
    def __init__(self, root):
        self.root = root
        self.errors = []
        self.msgs = {}            # path -> Msg
        self.by_title = {}
        self.order = []
        self.channels = []        # (id, address, req Msg|None, reply Msg|None)
        self.inboxes = []         # (id, address): reply inboxes, documented, no payload of their own
        self.ops = []             # Op, in document order
        self.params = {}          # channel id -> [parameter names in address order]

    def err(self, where, text):
        self.errors.append('%s: %s' % (where, text))

    # ---- loading -------------------------------------------------------
    def load(self):
        for dirpath, dirnames, files in os.walk(self.root):
            dirnames.sort()
            rel = os.path.relpath(dirpath, self.root)
            for f in sorted(files):
                if not f.endswith('.json') or rel == '.':
                    continue
                path = os.path.normpath(os.path.join(rel, f))
                try:
                    with open(os.path.join(self.root, path), encoding='utf-8') as fp:
                        doc = json.load(fp)
                except (OSError, ValueError) as e:
                    self.err(path, 'cannot read: %s' % e)
                    continue
                self.msgs[path] = Msg(path, doc)
        for path, m in self.msgs.items():
            try:
                self.parse_msg(m)
            except GenError as e:
                self.err(path, str(e))

    def parse_msg(self, m):
        doc, path = m.doc, m.path
        if not isinstance(doc, dict):
            raise GenError('not a JSON object')
        for k in doc:
            if k not in TOP_KEYS and not k.startswith('x-'):
                raise GenError('unsupported top-level keyword %r' % k)
        stem = os.path.splitext(os.path.basename(path))[0]
        if m.title != stem or not re.match(r'^[A-Z][A-Za-z0-9]*$', m.title):
            raise GenError('"title" must be the CamelCase file name %r' % stem)
        if m.title in self.by_title:
            raise GenError('title %r already used by %s' % (m.title, self.by_title[m.title].path))
        self.by_title[m.title] = m
        if doc.get('$schema') != SCHEMA_URI:
            raise GenError('"$schema" must be %s' % SCHEMA_URI)
        if doc.get('$id') != ID_BASE + path.replace(os.sep, '/'):
            raise GenError('"$id" must be %s' % (ID_BASE + path))
        if not doc.get('description'):
            raise GenError('missing "description"')
        if doc.get('type') != 'object':
            raise GenError('"type" must be "object"')
        if doc.get('additionalProperties', True) is not True:
            raise GenError('"additionalProperties" must be true (forward compatibility)')
        props = doc.get('properties', {})
        req = doc.get('required', [])
        if not isinstance(props, dict) or not isinstance(req, list):
            raise GenError('"properties" must be an object and "required" a list')
        for r in req:
            if r not in props:
                raise GenError('required %r is not a property' % r)
        if len(props) > MAX_FIELDS:
            raise GenError('more than %d properties' % MAX_FIELDS)
        for name, p in props.items():
            try:
                m.fields.append(self.parse_prop(m, name, p, req))
            except GenError as e:
                self.err(m.path, str(e))

    def parse_prop(self, m, name, p, req):
        where = 'properties.%s' % name
        if not re.match(r'^[a-z][a-z0-9_]*$', name) or name in C_KEYWORDS:
            raise GenError('%s: names are lower_snake, not a C keyword nor "has"' % where)
        if not isinstance(p, dict) or not p.get('description'):
            raise GenError('%s: missing "description"' % where)
        f = self.parse_type(m, name, p, where, False)
        f.required = name in req
        f.read_only = p.get('readOnly') is True
        if f.required and f.read_only:
            raise GenError('%s: a readOnly field cannot be required' % where)
        f.examples = p.get('examples')
        return f

    def parse_type(self, m, name, p, where, is_item):
        self.cur = m
        extra = set()
        if '$ref' in p:
            extra = set(p) - ANNOTATIONS - {'$ref'}
            if extra:
                raise GenError('%s: %s not allowed beside $ref' % (where, sorted(extra)))
            f = Field(name, 'OBJ')
            ref = p['$ref']
            if not isinstance(ref, str) or '#' in ref or not ref.endswith('.json'):
                raise GenError('%s: $ref must be a relative schema file path' % where)
            f.ref = os.path.normpath(os.path.join(os.path.dirname(m.path), ref))
            if f.ref not in self.msgs:
                raise GenError('%s: $ref %r: no such schema (%s)' % (where, ref, f.ref))
            return f
        t = p.get('type')
        keys = set(p) - ANNOTATIONS - {'type'}
        if t == 'object':
            raise GenError('%s: inline objects are not supported; move it to its own '
                           'schema file and use {"$ref": "Name.json"}' % where)
        if t == 'string':
            return self.parse_string(name, p, where, keys)
        if t == 'boolean':
            self.only(where, keys, set())
            return Field(name, 'BOOL')
        if t == 'integer':
            return self.parse_int(name, p, where, keys)
        if t == 'number':
            self.only(where, keys, {'minimum', 'maximum'})
            f = Field(name, 'F64')
            for k in ('minimum', 'maximum'):
                v = p.get(k)
                if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)
                                      or not math.isfinite(v)):
                    raise GenError('%s: %s must be a finite number' % (where, k))
            f.min, f.max = p.get('minimum'), p.get('maximum')
            return f
        if t == 'array':
            if is_item:
                raise GenError('%s: arrays of arrays are not supported' % where)
            self.only(where, keys, {'maxItems', 'items'})
            mi = p.get('maxItems')
            if not isinstance(mi, int) or isinstance(mi, bool) or mi < 0 or mi >= 2**32:
                raise GenError('%s: arrays need "maxItems" (a non-negative integer)' % where)
            items = p.get('items')
            if not isinstance(items, dict):
                raise GenError('%s: arrays need an "items" schema' % where)
            f = Field(name, 'ARR')
            f.limit = mi
            f.elem = self.parse_type(m, name, items, where + '.items', True)
            if f.elem.kind == 'BYTES':
                raise GenError('%s: arrays of bytes are not supported' % where)
            return f
        raise GenError('%s: unsupported or missing "type" %r' % (where, t))

    def only(self, where, keys, allowed):
        bad = keys - allowed
        if bad:
            raise GenError('%s: unsupported keyword(s) %s (the C codec would not enforce '
                           'them)' % (where, ', '.join(sorted(bad))))

    def parse_string(self, name, p, where, keys):
        ml = p.get('maxLength')
        if ml is not None and (not isinstance(ml, int) or isinstance(ml, bool) or ml < 0
                               or ml >= 2**32):
            raise GenError('%s: bad maxLength' % where)
        if 'enum' in p:
            self.only(where, keys, {'enum', 'maxLength'})
            vals = p['enum']
            if (not isinstance(vals, list) or not vals
                    or not all(isinstance(v, str) and v for v in vals)
                    or len(set(vals)) != len(vals)):
                raise GenError('%s: enum must be a list of distinct non-empty strings' % where)
            if ml is not None and any(len(v) > ml for v in vals):
                raise GenError('%s: an enum value is longer than maxLength' % where)
            f = Field(name, 'ENUM')
            f.enums = vals
            f.cprefix = 'MSG_%s_%s_' % (upper(self.cur.title), name.upper())
            return f
        binary = p.get('contentEncoding') == 'base64' or p.get('format') == 'binary'
        if binary:
            self.only(where, keys, {'maxLength', 'contentEncoding', 'format'})
            if p.get('format', 'binary') != 'binary' or \
                    p.get('contentEncoding', 'base64') != 'base64':
                raise GenError('%s: bytes are contentEncoding "base64" or format "binary"' % where)
        else:
            self.only(where, keys, {'maxLength'})
        if ml is None:
            raise GenError('%s: strings need "maxLength"' % where)
        f = Field(name, 'BYTES' if binary else 'STR')
        f.limit = ml
        return f

    def parse_int(self, name, p, where, keys):
        self.only(where, keys, {'format', 'minimum', 'maximum'})
        fmt = p.get('format', 'int64')
        if fmt not in INT_FORMATS:
            raise GenError('%s: integer format must be one of %s' % (where, sorted(INT_FORMATS)))
        f = Field(name, INT_FORMATS[fmt])
        lo, hi = INT_RANGE[f.kind]
        for k in ('minimum', 'maximum'):
            v = p.get(k)
            if v is None:
                continue
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise GenError('%s: %s must be an integer within %s' % (where, k, fmt))
            if v > 2**63 - 1 and v != hi:
                raise GenError('%s: %s above INT64_MAX is not supported' % (where, k))
        f.min, f.max = p.get('minimum'), p.get('maximum')
        if f.min is not None and f.max is not None and f.min > f.max:
            raise GenError('%s: minimum > maximum' % where)
        return f

    # ---- order and depth ----------------------------------------------
    def sort(self):
        state = {}

        def visit(path, chain):
            if state.get(path) == 2:
                return
            if state.get(path) == 1:
                raise GenError('$ref cycle: %s' % ' -> '.join(chain + [path]))
            state[path] = 1
            for f in self.msgs[path].fields:
                ref = f.ref or (f.elem.ref if f.elem else None)
                if ref:
                    visit(ref, chain + [path])
            state[path] = 2
            self.order.append(self.msgs[path])

        for path in sorted(self.msgs):
            try:
                visit(path, [])
            except GenError as e:
                self.err(path, str(e))
                return False
        for m in self.order:
            if self.depth(m) > MAX_DEPTH:
                self.err(m.path, 'nesting deeper than GP_MAX_DEPTH (%d)' % MAX_DEPTH)
        return True

    def depth(self, m):
        d = 1
        for f in m.fields:
            if f.kind == 'OBJ':
                d = max(d, 1 + self.depth(self.msgs[f.ref]))
            elif f.kind == 'ARR':
                sub = 2 + self.depth(self.msgs[f.elem.ref]) if f.elem.kind == 'OBJ' else 2
                d = max(d, sub)
        return d

    # ---- samples -------------------------------------------------------
    def samples(self):
        for m in self.order:
            try:
                ex = m.doc.get('examples')
                if ex is not None:
                    if not isinstance(ex, list) or not ex:
                        raise GenError('"examples" must be a non-empty list')
                    m.sample = self.check_obj(m, ex[0], 'examples[0]')
                else:
                    m.sample = self.synth_obj(m)
            except GenError as e:
                self.err(m.path, str(e))
                m.sample = None

    def check_obj(self, m, v, where):
        if not isinstance(v, dict):
            raise GenError('%s: expected object' % where)
        names = {f.name: f for f in m.fields}
        out = {}
        for k, x in v.items():
            if k not in names:
                raise GenError('%s: unknown property %r' % (where, k))
            out[k] = self.check_val(names[k], x, '%s.%s' % (where, k))
        for f in m.fields:
            if f.required and f.name not in v:
                raise GenError('%s: missing required %r' % (where, f.name))
        return out

    def check_val(self, f, v, where):
        k = f.kind
        if k == 'OBJ':
            return self.check_obj(self.msgs[f.ref], v, where)
        if k == 'ARR':
            if not isinstance(v, list) or len(v) > f.limit:
                raise GenError('%s: expected array of at most %d items' % (where, f.limit))
            return [self.check_val(f.elem, x, '%s[%d]' % (where, i)) for i, x in enumerate(v)]
        if k == 'STR':
            if not isinstance(v, str) or len(v.encode()) > f.limit or '\0' in v:
                raise GenError('%s: expected string of at most %d bytes' % (where, f.limit))
            return v
        if k == 'BYTES':
            try:
                b = base64.b64decode(v, validate=True)
            except (TypeError, ValueError):
                raise GenError('%s: expected base64 string' % where)
            if len(b) > f.limit:
                raise GenError('%s: more than %d bytes' % (where, f.limit))
            return b
        if k == 'ENUM':
            if v not in f.enums:
                raise GenError('%s: not one of %s' % (where, f.enums))
            return f.enums.index(v)
        if k == 'BOOL':
            if not isinstance(v, bool):
                raise GenError('%s: expected boolean' % where)
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise GenError('%s: expected a number' % where)
        if k == 'F64':
            if not math.isfinite(v):
                raise GenError('%s: not finite' % where)
            v = float(v)
        else:
            lo, hi = INT_RANGE[k]
            if not isinstance(v, int) or not lo <= v <= hi:
                raise GenError('%s: expected integer within %s' % (where, k))
        if (f.min is not None and v < f.min) or (f.max is not None and v > f.max):
            raise GenError('%s: out of [%s, %s]' % (where, f.min, f.max))
        return v

    def synth_obj(self, m):
        return {f.name: self.synth_field(f, 'properties.' + f.name) for f in m.fields}

    def synth_field(self, f, where):
        if f.examples is not None:
            if not isinstance(f.examples, list) or not f.examples:
                raise GenError('%s: "examples" must be a non-empty list' % where)
            return self.check_val(f, f.examples[0], where + '.examples[0]')
        return self.synth(f, where)

    def synth(self, f, where):
        k = f.kind
        if k == 'OBJ':
            s = self.msgs[f.ref].sample
            if s is None:
                raise GenError('%s: referenced schema has no valid sample' % where)
            return s
        if k == 'ARR':
            return [self.synth_item(f.elem, i) for i in range(min(2, f.limit))]
        if k == 'STR':
            return ('x' + f.name)[:max(1, min(f.limit, 8))] if f.limit else ''
        if k == 'BYTES':
            return bytes(range(1, 1 + min(f.limit, 4)))
        if k == 'ENUM':
            return 0
        if k == 'BOOL':
            return True
        want = 1.5 if k == 'F64' else 42
        lo = f.min if f.min is not None else -math.inf
        hi = f.max if f.max is not None else math.inf
        v = min(max(want, lo), hi)
        if v == 0 and hi >= 1:
            v = 1
        return float(v) if k == 'F64' else v

    def synth_item(self, e, i):
        v = self.synth(e, 'items')
        if e.kind == 'STR' and e.limit:
            v = ('x%d' % i)[:e.limit]
        elif e.kind == 'ENUM':
            v = i % len(e.enums)
        elif e.kind in INT_RANGE:
            v2 = v + i
            if e.max is None or v2 <= e.max:
                v = v2
        return v

    # ---- asyncapi --------------------------------------------------------
    def asyncapi(self):
        path = os.path.join(self.root, 'asyncapi.json')
        try:
            with open(path, encoding='utf-8') as fp:
                doc = json.load(fp)
        except (OSError, ValueError) as e:
            self.err('asyncapi.json', 'cannot read: %s' % e)
            return
        self.adoc = doc
        try:
            self.parse_asyncapi(doc)
        except GenError as e:
            self.err('asyncapi.json', str(e))

    def pointer(self, ref, where):
        if not isinstance(ref, str) or not ref.startswith('#/'):
            raise GenError('%s: expected a local "#/..." $ref, got %r' % (where, ref))
        node = self.adoc
        for tok in ref[2:].split('/'):
            tok = tok.replace('~1', '/').replace('~0', '~')
            if not isinstance(node, dict) or tok not in node:
                raise GenError('%s: $ref %s does not resolve' % (where, ref))
            node = node[tok]
        return node

    def deref(self, node, where):
        seen = 0
        while isinstance(node, dict) and '$ref' in node:
            node = self.pointer(node['$ref'], where)
            seen += 1
            if seen > 16:
                raise GenError('%s: $ref loop' % where)
        return node

    def payload_msg(self, msg, where):
        msg = self.deref(msg, where)
        pl = msg.get('payload') if isinstance(msg, dict) else None
        if not isinstance(pl, dict):
            raise GenError('%s: message without a payload' % where)
        ref = pl.get('$ref') or (pl.get('schema') or {}).get('$ref')
        if not isinstance(ref, str) or ref.startswith('#'):
            raise GenError('%s: payload must be {"$ref": "<domain>/<Title>.json"}' % where)
        p = os.path.normpath(ref)
        if p not in self.msgs:
            raise GenError('%s: payload $ref %r: no such schema' % (where, ref))
        ct = msg.get('contentType', self.adoc.get('defaultContentType'))
        if ct != 'application/msgpack':
            raise GenError('%s: contentType must be application/msgpack' % where)
        return self.msgs[p]

    def chan_ref(self, ref, where):
        if not isinstance(ref, dict) or not str(ref.get('$ref', '')).startswith('#/channels/'):
            raise GenError('%s: expected {"$ref": "#/channels/<id>"}' % where)
        cid = ref['$ref'][len('#/channels/'):]
        if cid not in self.adoc.get('channels', {}):
            raise GenError('%s: no channel %r' % (where, cid))
        return cid

    def op_messages(self, refs, cid, where):
        out = []
        for i, r in enumerate(refs):
            w = '%s[%d]' % (where, i)
            ref = r.get('$ref', '') if isinstance(r, dict) else ''
            if not ref.startswith('#/channels/%s/messages/' % cid):
                raise GenError('%s: must reference a message of channel %r' % (w, cid))
            out.append(self.payload_msg(r, w))
        return out

    def parse_asyncapi(self, doc):
        if not str(doc.get('asyncapi', '')).startswith('3.'):
            raise GenError('"asyncapi" must be 3.x')
        if doc.get('defaultContentType') != 'application/msgpack':
            raise GenError('"defaultContentType" must be application/msgpack')
        chans = doc.get('channels')
        if not isinstance(chans, dict):
            raise GenError('no "channels"')
        req, reply = {}, {}
        for cid, ch in chans.items():
            w = 'channels.%s' % cid
            if not re.match(r'^[a-z][A-Za-z0-9]*$', cid):
                raise GenError('%s: channel ids are lowerCamelCase' % w)
            ch = self.deref(ch, w)
            addr = ch.get('address')
            if ch.get('x-gp-inbox') is True:
                self.parse_inbox(cid, ch, w)
                continue
            msgs = ch.get('messages', {})
            if not isinstance(msgs, dict) or not msgs:
                raise GenError('%s: no messages' % w)
            ms = [self.payload_msg(v, '%s.messages.%s' % (w, k)) for k, v in msgs.items()]
            if addr is None:
                continue
            self.params[cid] = self.parse_address(ch, addr, w)
            if len(ms) != 1:
                raise GenError('%s: an addressed channel carries exactly one message' % w)
            req[cid] = (addr, ms[0])
        services = self.service_names(chans)
        for oid, op in (doc.get('operations') or {}).items():
            w = 'operations.%s' % oid
            op = self.deref(op, w)
            if not re.match(r'^[a-z][A-Za-z0-9]*$', oid):
                raise GenError('%s: operation ids are lowerCamelCase' % w)
            if op.get('action') not in ('send', 'receive'):
                raise GenError('%s: action must be send or receive' % w)
            cid = self.chan_ref(op.get('channel'), w + '.channel')
            if cid not in req:
                raise GenError('%s: channel %r has no address' % (w, cid))
            self.op_messages(op.get('messages', []), cid, w + '.messages')
            o = Op(oid, op['action'], cid, req[cid][0], req[cid][1], self.params[cid])
            o.services = self.op_services(op, services, w)
            self.ops.append(o)
            rp = op.get('reply')
            o.limit_by = self.op_limit_by(op, o, rp, w)
            if rp is None:
                continue
            if op['action'] != 'receive':
                raise GenError('%s: only receive operations carry a reply' % w)
            rcid = self.chan_ref(rp.get('channel'), w + '.reply.channel')
            if 'messages' in rp:
                rms = self.op_messages(rp['messages'], rcid, w + '.reply.messages')
            else:
                rch = self.deref(chans[rcid], w)
                rms = [self.payload_msg(v, w + '.reply') for v in rch['messages'].values()]
            if len(rms) != 1:
                raise GenError('%s.reply: exactly one reply message' % w)
            if cid in reply and reply[cid] is not rms[0]:
                raise GenError('%s: channel %r already has another reply' % (w, cid))
            for f in rms[0].fields:
                if f.name == 'error' and f.kind == 'OBJ':
                    raise GenError('%s: reply %s has an "error" object property, which '
                                   'reads as an error reply' % (w, rms[0].title))
            reply[cid] = rms[0]
            o.reply = rms[0]
        for cid, (addr, m) in req.items():
            self.channels.append((cid, addr, m, reply.get(cid)))
        self.parse_streams(doc, services)

    TOKEN = re.compile(r'^[A-Za-z0-9_-]{1,63}$')

    def parse_address(self, ch, addr, w):
        """The {parameters} of an address, in order; each declared once, with a
        description and examples (and an enum where the set is closed), so a
        client in another language knows what to put there."""
        if not isinstance(addr, str) or not addr:
            raise GenError('%s: address must be a string or null' % w)
        order = re.findall(r'\{([^{}]*)\}', addr)
        decl = ch.get('parameters') or {}
        if set(order) != set(decl.keys()) or len(order) != len(set(order)):
            raise GenError('%s: address parameters %s but "parameters" declares %s'
                           % (w, order, sorted(decl)))
        for tok in addr.split('.'):
            if '{' in tok and not re.match(r'^\{[a-z][a-z0-9_]*\}$', tok):
                raise GenError('%s: a parameter must be a whole subject token' % w)
        for name, p in decl.items():
            pw = '%s.parameters.%s' % (w, name)
            p = self.deref(p, pw)
            if not isinstance(p, dict) or not p.get('description'):
                raise GenError('%s: missing "description"' % pw)
            ex, en = p.get('examples'), p.get('enum')
            if not isinstance(ex, list) or not ex or not all(
                    isinstance(x, str) and self.TOKEN.match(x) for x in ex):
                raise GenError('%s: "examples" must list subject tokens ([A-Za-z0-9_-]{1,63})'
                               % pw)
            if en is not None:
                if not isinstance(en, list) or not en or not all(
                        isinstance(x, str) and self.TOKEN.match(x) for x in en):
                    raise GenError('%s: "enum" must list subject tokens' % pw)
                if any(x not in en for x in ex):
                    raise GenError('%s: an example is not in "enum"' % pw)
        return order

    def parse_inbox(self, cid, ch, w):
        """A reply inbox: where replies of request/reply operations arrive.
        Documented so a client's NATS permissions can name it; it carries the
        reply of whatever request it was given as replyTo."""
        addr = ch.get('address')
        if not isinstance(ch.get('description'), str) or not ch['description']:
            raise GenError('%s: missing "description"' % w)
        if ch.get('messages'):
            raise GenError('%s: an inbox channel lists no messages (it carries replies)' % w)
        self.params[cid] = self.parse_address(ch, addr, w)
        self.inboxes.append((cid, addr))

    def service_names(self, chans):
        """The services that may serve operations: the closed enum of the health
        channel's {service} parameter, plus the node agent (which answers on its
        own subjects)."""
        h = self.deref(chans.get('health', {}), 'channels.health')
        en = ((h.get('parameters') or {}).get('service') or {}).get('enum')
        if not isinstance(en, list) or not en:
            raise GenError('channels.health.parameters.service: needs the "enum" of services')
        return set(en) | {'agent'}

    # who else may use a subject: besides the services and the agent
    PEERS = {'operator', 'tenant'}

    def names(self, op, key, allowed, w, required):
        """A list of names (or one name) under key, each one of allowed."""
        v = op.get(key)
        if v is None and not required:
            return []
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
            raise GenError('%s: "%s" must name one or more of %s' % (w, key, sorted(allowed)))
        bad = [x for x in v if x not in allowed]
        if bad or len(set(v)) != len(v):
            raise GenError('%s: %s %s: not one of %s, or named twice' % (w, key, bad or v,
                                                                       sorted(allowed)))
        return v

    def op_services(self, op, services, w):
        """The services that serve a receive operation (or send a send one);
        its senders and readers are checked here too (deploy/nats-auth
        reads them)."""
        everyone = services | self.PEERS
        self.names(op, 'x-gp-readers', everyone, w, False)
        if op['action'] == 'send':
            if 'x-gp-senders' in op:
                raise GenError('%s: a send operation names its sender in "x-gp-service"' % w)
            self.names(op, 'x-gp-service', services, w, True)
            return []
        self.names(op, 'x-gp-senders', everyone, w, True)
        served = self.names(op, 'x-gp-service', services, w, True)
        over = self.names(op, 'x-gp-overhear', services, w, False)
        if over and (not op.get('reply') or not set(over) <= set(served)):
            raise GenError('%s: "x-gp-overhear" names services that serve a request' % w)
        return served

    def parse_streams(self, doc, services):
        """x-gp-streams: the JetStream streams, who declares and who reads
        each (deploy/nats-auth grants the JetStream API from it)."""
        st = doc.get('x-gp-streams')
        if not isinstance(st, dict) or not st:
            raise GenError('"x-gp-streams": the JetStream streams (see gen.py)')
        everyone = services | self.PEERS
        for name, s in st.items():
            w = 'x-gp-streams.%s' % name
            if not re.match(r'^[A-Z][A-Z0-9_]{0,31}$', name):
                raise GenError('%s: a stream name is [A-Z][A-Z0-9_]*' % w)
            if not isinstance(s, dict) or not s.get('description'):
                raise GenError('%s: missing "description"' % w)
            subs = s.get('subjects')
            if not isinstance(subs, list) or not subs or not all(
                    isinstance(x, str) and re.match(r'^[A-Za-z0-9_.*>-]+$', x) for x in subs):
                raise GenError('%s: "subjects" lists subject patterns' % w)
            self.names(s, 'declared-by', services, w, True)
            cons = s.get('consumers')
            if not isinstance(cons, dict):
                raise GenError('%s: "consumers" (an object, maybe empty)' % w)
            for dn, c in cons.items():
                cw = '%s.consumers.%s' % (w, dn)
                if not re.match(r'^(\*|[A-Za-z0-9_-]*(\{tenant\})?[A-Za-z0-9_-]*)$', dn) or not dn:
                    raise GenError('%s: a durable name, "*" or a name with {tenant}' % cw)
                if not isinstance(c, dict):
                    raise GenError('%s: an object' % cw)
                who = self.names(c, 'by', everyone, cw, True)
                made = self.names(c, 'made-by', services, cw, False)
                if ('{tenant}' in dn) != (who == ['tenant']) or bool(made) != ('filter' in c):
                    raise GenError('%s: a tenant\'s consumer is named with {tenant}, and one '
                                   'made by a service for another has its "filter"' % cw)

    def op_limit_by(self, op, o, rp, w):
        lb = op.get('x-gp-limit-by')
        if lb is None:
            return None
        if op['action'] != 'receive' or rp is None:
            raise GenError('%s: x-gp-limit-by is for receive operations with a reply' % w)
        if lb not in o.params:
            raise GenError('%s: x-gp-limit-by %r is not a parameter of %s' % (w, lb, o.addr))
        return lb

    # ---- emit ------------------------------------------------------------
    def build(self):
        h, c = [], []
        self.idents = set()
        h.append('/* msg_gen.h -- generated by schemas/gen.py from schemas/. DO NOT EDIT. */')
        h.append('#ifndef MSG_GEN_H\n#define MSG_GEN_H\n')
        h.append('#include <stdbool.h>\n#include <stdint.h>\n\n#include "gp/codec.h"\n'
                 '#include "gp/op.h"\n')
        h.append('typedef struct msg_sample {\n    const gp_msg_desc *desc;\n'
                 '    const void        *sample;    /* a valid msg of that type */\n'
                 '} msg_sample;\n')
        h.append('typedef struct msg_channel {\n    const char        *id;        '
                 '/* AsyncAPI channel id */\n    const char        *address;   '
                 '/* subject, {params} unfilled */\n    const gp_msg_desc *request;   '
                 '/* payload published on address */\n    const gp_msg_desc *reply;     '
                 '/* reply payload, or NULL */\n} msg_channel;\n')
        c.append('/* msg_gen.c -- generated by schemas/gen.py from schemas/. DO NOT EDIT. */')
        c.append('#include "msg_gen.h"\n\n#include <stddef.h>\n')
        for m in self.order:
            self.emit_msg(m, h, c)
        h.append('/* Subjects (AsyncAPI channel addresses, {parameters} unfilled) and\n'
                 ' * their subscription patterns (each parameter a "*"). */')
        for cid, addr in [(c[0], c[1]) for c in self.channels] + self.inboxes:
            h.append('#define %s %s' % (self.ident('GP_SUBJ_' + upper(cid)), cstr(addr)))
            h.append('#define %s %s' % (self.ident('GP_PAT_' + upper(cid)),
                                                cstr(re.sub(r'\{[^{}]*\}', '*', addr))))
        self.emit_ops(h, c)
        h.append('\n#define MSG_NMESSAGES %d\n#define MSG_NCHANNELS %d\n#define GP_NOPS %d\n'
                 % (len(self.order), len(self.channels), len(self.ops)))
        h.append('/* Every message with a sample, schema dependency order; ends {NULL, NULL}. */')
        h.append('extern const msg_sample msg_all[];')
        h.append('/* Every addressed channel; ends with a NULL id. */')
        h.append('extern const msg_channel msg_channels[];\n\n#endif')
        c.append('const msg_sample msg_all[] = {')
        for m in self.order:
            c.append('    { &msg_%s_desc, &msg_%s_sample },' % (m.snake, m.snake))
        c.append('    { NULL, NULL }\n};\n')
        c.append('const msg_channel msg_channels[] = {')
        for cid, addr, rq, rp in self.channels:
            c.append('    { %s, %s, &msg_%s_desc, %s },' % (
                cstr(cid), cstr(addr), rq.snake,
                '&msg_%s_desc' % rp.snake if rp else 'NULL'))
        c.append('    { NULL, NULL, NULL, NULL }\n};')
        return {'msg_gen.h': h, 'msg_gen.c': c}

    def emit_ops(self, h, c):
        """One gp_op per AsyncAPI operation: what a route table or a client
        needs (subject pattern, parameters, request and reply descriptors,
        who serves it), so services name operations, never subject strings."""
        h.append('\n/* Operations (AsyncAPI operations).  GP_OP_<ID> points at the gp_op. */')
        for o in self.ops:
            S = snake(o.id)
            h.append('extern const gp_op %s;' % self.ident('gp_op_' + S))
            h.append('#define %s (&gp_op_%s)' % (self.ident('GP_OP_' + upper(o.id)), S))
        h.append('/* Every operation, document order; ends with NULL. */')
        h.append('extern const gp_op *const gp_ops[];')
        for o in self.ops:
            S = snake(o.id)
            if o.params:
                c.append('static const char *const gp_op_%s_params[] = { %s };' % (
                    S, ', '.join(cstr(p) for p in o.params)))
                c.append('static const unsigned char gp_op_%s_ptok[] = { %s };' % (
                    S, ', '.join(str(t) for t in o.param_tokens())))
            if o.services:
                c.append('static const char *const gp_op_%s_svc[] = { %s, NULL };' % (
                    S, ', '.join(cstr(x) for x in o.services)))
            c.append('const gp_op gp_op_%s = {\n    .id = %s, .address = %s, .pattern = %s,\n'
                     '    .in = &msg_%s_desc, .out = %s, .receive = %s,\n'
                     '    .nparams = %d, .params = %s, .param_tok = %s, .services = %s,\n'
                     '    .limit_by = %s\n};' % (
                         S, cstr(o.id), cstr(o.addr), cstr(o.pattern()), o.req.snake,
                         '&msg_%s_desc' % o.reply.snake if o.reply else 'NULL',
                         'true' if o.action == 'receive' else 'false', len(o.params),
                         'gp_op_%s_params' % S if o.params else 'NULL',
                         'gp_op_%s_ptok' % S if o.params else 'NULL',
                         'gp_op_%s_svc' % S if o.services else 'NULL',
                         cstr(o.limit_by) if o.limit_by else 'NULL'))
        h.append('/* Reply inboxes, as gp_op with no message of their own (in = out = NULL),\n'
                 ' * so a client builds its inbox subject from the contract too. */')
        for cid, addr in self.inboxes:
            S = snake(cid)
            params = self.params[cid]
            toks = addr.split('.')
            h.append('extern const gp_op %s;' % self.ident('gp_inbox_' + S))
            h.append('#define %s (&gp_inbox_%s)' % (self.ident('GP_INBOX_' + upper(cid)), S))
            c.append('static const char *const gp_inbox_%s_params[] = { %s };' % (
                S, ', '.join(cstr(x) for x in params)))
            c.append('static const unsigned char gp_inbox_%s_ptok[] = { %s };' % (
                S, ', '.join(str(toks.index('{%s}' % x)) for x in params)))
            c.append('const gp_op gp_inbox_%s = {\n    .id = %s, .address = %s, .pattern = %s,\n'
                     '    .nparams = %d, .params = gp_inbox_%s_params, .param_tok = gp_inbox_%s_ptok\n};'
                     % (S, cstr(cid), cstr(addr), cstr(re.sub(r'\{[^{}]*\}', '*', addr)),
                        len(params), S, S))
        c.append('const gp_op *const gp_ops[] = {')
        for o in self.ops:
            c.append('    &gp_op_%s,' % snake(o.id))
        c.append('    NULL\n};')

    def emit_limits(self, m, h):
        """Each schema bound as a named constant, so no limit is restated by hand."""
        U = upper(m.title)
        for f in m.fields:
            F = f.name.upper()
            if f.kind in ('STR', 'BYTES'):
                h.append('#define MSG_%s_%s_MAXLEN %d' % (U, F, f.limit))
            elif f.kind == 'ARR':
                h.append('#define MSG_%s_%s_MAXITEMS %d' % (U, F, f.limit))
                if f.elem.kind == 'STR':
                    h.append('#define MSG_%s_%s_ITEM_MAXLEN %d' % (U, F, f.elem.limit))
            e = f.elem if f.kind == 'ARR' else f
            if e.kind in ('I32', 'I64', 'U32', 'U64'):
                if e.min is not None:
                    h.append('#define MSG_%s_%s_MIN %s' % (U, F, cint(e.min, e.kind)))
                if e.max is not None:
                    h.append('#define MSG_%s_%s_MAX %s' % (U, F, cint(e.max, e.kind)))

    def write(self, outdir, files):
        os.makedirs(outdir, exist_ok=True)
        for name, lines in files.items():
            tmp = os.path.join(outdir, name + '.tmp')
            with open(tmp, 'w', encoding='utf-8') as fp:
                fp.write('\n'.join(lines) + '\n')
            os.replace(tmp, os.path.join(outdir, name))

    def ident(self, name):
        if name in self.idents:
            raise GenError('generated C name %s is defined twice' % name)
        self.idents.add(name)
        return name

    def emit_msg(self, m, h, c):
        S, U = m.snake, upper(m.title)
        h.append('/* %s: %s */' % (m.path, one_line(m.doc.get('description', ''))))
        for f in m.fields:
            e = f.elem if f.kind == 'ARR' else f
            if e.kind != 'ENUM':
                continue
            names = ['%s = %d' % (self.ident('MSG_%s_%s_%s' % (U, f.name.upper(), upper(v))), i)
                     for i, v in enumerate(e.enums)]
            h.append('enum {\n    %s\n};' % ',\n    '.join(names))
            nm = self.ident('msg_%s_%s_names' % (S, f.name))
            h.append('extern const char *const %s[%d];' % (nm, len(e.enums)))
            c.append('const char *const %s[%d] = { %s };' % (
                nm, len(e.enums), ', '.join(cstr(v) for v in e.enums)))
        h.append('typedef struct msg_%s {\n    uint64_t has;' % self.ident(S))
        for f in m.fields:
            h.append('    %s;%s' % (cdecl(f, f.name), comment(f)))
        h.append('} msg_%s;' % S)
        if m.fields:
            h.append('enum {\n    %s\n};' % ',\n    '.join(
                '%s = %d' % (self.ident('MSG_%s__%s' % (U, f.name.upper())), i)
                for i, f in enumerate(m.fields)))
        h.append('extern const gp_msg_desc %s;' % self.ident('msg_%s_desc' % S))
        self.emit_limits(m, h)
        h.append('')
        if m.fields:
            c.append('\nstatic const gp_field msg_%s_fields[] = {' % S)
            for f in m.fields:
                c.append('    ' + self.fdesc(m, f) + ',')
            c.append('};')
        c.append('const gp_msg_desc msg_%s_desc = {\n    %s, sizeof(msg_%s), %d, %s\n};'
                 % (S, cstr(m.title), S, len(m.fields),
                    'msg_%s_fields' % S if m.fields else 'NULL'))
        pre = []
        init = self.cinit_obj(m, m.sample, 'msg_%s_sample' % S, pre)
        c.extend(pre)
        c.append('static const msg_%s msg_%s_sample = %s;' % (S, S, init))

    def fdesc(self, m, f):
        e = f.elem if f.kind == 'ARR' else f
        parts = ['.name = %s' % cstr(f.name), '.namelen = %d' % len(f.name.encode()),
                 '.type = GP_T_%s' % f.kind]
        if f.kind == 'ARR':
            parts.append('.elem = GP_T_%s' % e.kind)
        if f.required:
            parts.append('.flags = GP_FF_REQUIRED')
        flags = ['GP_FF_REQUIRED'] if f.required else []
        if f.read_only:
            flags.append('GP_FF_READONLY')
        parts.append('.offset = offsetof(msg_%s, %s)' % (m.snake, f.name))
        if f.kind in ('STR', 'ARR', 'BYTES'):
            parts.append('.limit = %d' % f.limit)
        if f.kind == 'ARR' and e.kind == 'STR':
            parts.append('.elem_limit = %d' % e.limit)
        isf = e.kind == 'F64'
        if e.min is not None and not (not isf and e.min == INT_RANGE[e.kind][0]):
            flags.append('GP_FF_MIN')
            parts.append('.fmin = %r' % float(e.min) if isf else '.min = %s' % cint(e.min))
        if e.max is not None and not (not isf and e.max == INT_RANGE[e.kind][1]):
            flags.append('GP_FF_MAX')
            parts.append('.fmax = %r' % float(e.max) if isf else '.max = %s' % cint(e.max))
        parts = [p for p in parts if not p.startswith('.flags')]
        if flags:
            parts.insert(2 + (f.kind == 'ARR'), '.flags = %s' % ' | '.join(flags))
        if e.kind == 'OBJ':
            parts.append('.sub = &msg_%s_desc' % self.msgs[e.ref].snake)
        if e.kind == 'ENUM':
            parts.append('.enums = msg_%s_%s_names, .nenums = %d'
                         % (m.snake, f.name, len(e.enums)))
        return '{ %s }' % ', '.join(parts)

    def cinit_obj(self, m, val, base, pre):
        has = 0
        parts = []
        for i, f in enumerate(m.fields):
            if f.name not in val:
                continue
            has |= 1 << i
            parts.append('.%s = %s' % (f.name, self.cinit(f, val[f.name],
                                                          '%s_%s' % (base, f.name), pre)))
        return '{ %s }' % ', '.join(['.has = UINT64_C(0x%x)' % has] + parts)

    def cinit(self, f, v, base, pre):
        k = f.kind
        if k == 'OBJ':
            return self.cinit_obj(self.msgs[f.ref], v, base, pre)
        if k == 'ARR':
            if not v:
                return '{ NULL, 0 }'
            items = [self.cinit(f.elem, x, '%s_%d' % (base, i), pre) for i, x in enumerate(v)]
            e = f.elem
            decl = cdecl(e, '%s[%d]' % (base, len(v)))
            pre.append('static const %s = {\n    %s\n};' % (decl, ',\n    '.join(items)))
            return '{ (void *)%s, %d }' % (base, len(v))
        if k == 'BYTES':
            if not v:
                return '{ NULL, 0 }'
            pre.append('static const uint8_t %s[%d] = { %s };' % (
                base, len(v), ', '.join('0x%02x' % b for b in v)))
            return '{ (uint8_t *)%s, %d }' % (base, len(v))
        if k == 'STR':
            return cstr(v)
        if k == 'ENUM':
            return f.cprefix + upper(f.enums[v])
        if k == 'BOOL':
            return 'true' if v else 'false'
        if k == 'F64':
            return repr(float(v))
        return cint(v, k)


def cdecl(f, name):
    k = f.kind
    if k == 'STR':
        return 'char %s[%d]' % (name, f.limit + 1)
    if k == 'OBJ':
        return 'msg_%s %s' % (snake(os.path.splitext(os.path.basename(f.ref))[0]), name)
    if k == 'ARR':
        return 'gp_arr %s' % name
    if k == 'BYTES':
        return 'gp_bytes %s' % name
    return '%s %s' % (CTYPE[k], name)


def comment(f):
    k = f.kind
    if k == 'ARR':
        e = f.elem
        what = {'STR': 'char[%d]' % (e.limit + 1), 'OBJ': 'msg_%s' % snake(
            os.path.splitext(os.path.basename(e.ref or ''))[0])}.get(e.kind, CTYPE.get(e.kind))
        return '  /* of %s, max %d, owned */' % (what, f.limit)
    if k == 'BYTES':
        return '  /* max %d bytes, owned */' % f.limit
    if k == 'ENUM':
        return '  /* enum index */'
    return ''


def cint(v, kind='I64'):
    if kind in ('U32', 'U64'):
        return 'UINT64_C(%d)' % v if v > 2**31 else '%d' % v
    if v == -2**63:
        return '(-INT64_C(9223372036854775807) - 1)'
    return 'INT64_C(%d)' % v if abs(v) > 2**31 - 1 else '%d' % v


def cstr(s):
    out = []
    for b in s.encode('utf-8'):
        ch = chr(b)
        if ch in '"\\?':
            out.append('\\' + ch)
        elif 32 <= b < 127:
            out.append(ch)
        else:
            out.append('\\%03o' % b)
    return '"%s"' % ''.join(out)


def one_line(s):
    return ' '.join(str(s).split()).replace('*/', '* /')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--schemas', default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument('--out')
    ap.add_argument('--check', action='store_true', help='check only, write nothing')
    a = ap.parse_args()
    if not a.check and not a.out:
        ap.error('--out is required unless --check')
    g = Gen(a.schemas)
    g.load()
    if not g.errors and g.sort():
        g.samples()
        g.asyncapi()
    files = None
    if not g.errors:
        try:
            files = g.build()
        except GenError as e:
            g.err('output', str(e))
    for e in g.errors:
        print('gen.py: schemas/%s' % e, file=sys.stderr)
    if g.errors:
        return 1
    if not a.check:
        g.write(a.out, files)
    else:
        print('gen.py: %d messages, %d channels: OK' % (len(g.order), len(g.channels)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
