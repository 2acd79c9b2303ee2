#!/usr/bin/env python3
"""tests/lib/jsapi.py -- the JetStream API as an operator uses it, for the
shell tests (the nats CLI is not installed): nats-server's own JSON
requests on $JS.API.>, over the text protocol, no client library.

    jsapi.py URLS info STREAM          the stream's info (JSON, one line)
    jsapi.py URLS set STREAM JSON      the stream's config with JSON's keys
                                       replaced (an operator's edit),
                                       then STREAM.UPDATE; prints the reply
    jsapi.py URLS create JSON          STREAM.CREATE of the config JSON
    jsapi.py URLS purge STREAM         STREAM.PURGE
    jsapi.py URLS delete STREAM        STREAM.DELETE
    jsapi.py URLS fill SUBJ BYTES N    publishes up to N messages of BYTES
                                       bytes (each its own Nats-Msg-Id) until
                                       one is refused; prints "stored K" and
                                       the refusal's JSON, if any
    jsapi.py URLS ids STREAM           every stored message's Nats-Msg-Id,
                                       one a line, in stream order ("-" for
                                       one without)

URLS: nats://H:P[,nats://H:P...] or H:P,...; the first that answers is
used, as GP_NATS_USER with GP_NATS_PASSWORD when they are set.  An API error reply ({"error": ...}) exits 1 after printing it; no
server or no answer exits 2.
"""
import base64
import json
import os
import socket
import sys
import time


class Conn:
    def __init__(self, urls):
        last = None
        for u in urls.split(','):
            hp = u.split('://')[-1]
            host, port = hp.rsplit(':', 1)
            try:
                self.s = socket.create_connection((host, int(port)), timeout=5)
                break
            except OSError as e:
                last = e
        else:
            raise OSError('no server of %s answers: %s' % (urls, last))
        self.buf = b''
        self.line()                                   # INFO
        auth = ''
        if os.environ.get('GP_NATS_USER'):
            auth = ',"user":%s,"pass":%s' % (json.dumps(os.environ['GP_NATS_USER']),
                                             json.dumps(os.environ.get('GP_NATS_PASSWORD', '')))
        self.s.sendall(('CONNECT {"verbose":false,"pedantic":false,"headers":true,'
                        '"no_responders":true%s}\r\nSUB _JSAPI.* 1\r\nPING\r\n' % auth).encode())
        while self.read()[0] != 'PONG':
            pass
        self.n = 0

    def line(self):
        while b'\r\n' not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise OSError('connection closed')
            self.buf += d
        ln, self.buf = self.buf.split(b'\r\n', 1)
        return ln.decode()

    def payload(self, size):
        while len(self.buf) < size + 2:
            d = self.s.recv(65536)
            if not d:
                raise OSError('connection closed')
            self.buf += d
        p, self.buf = self.buf[:size], self.buf[size + 2:]
        return p

    def read(self):
        """('MSG', subject, headers bytes, body bytes) or (word,)"""
        ln = self.line()
        w = ln.split(' ')
        if w[0] == 'PING':
            self.s.sendall(b'PONG\r\n')
            return ('PING',)
        if w[0] == '-ERR':
            raise OSError(ln)
        if w[0] == 'MSG':
            return ('MSG', w[1], b'', self.payload(int(w[-1])))
        if w[0] == 'HMSG':
            p = self.payload(int(w[-1]))
            h = int(w[-2])
            return ('MSG', w[1], p[:h], p[h:])
        return (w[0],)

    def send(self, subj, body, msg_id=None):
        """publishes with a reply inbox; returns the inbox"""
        self.n += 1
        inbox = '_JSAPI.%d' % self.n
        if isinstance(body, str):
            body = body.encode()
        if msg_id is None:
            self.s.sendall(b'PUB %s %s %d\r\n%s\r\n' % (subj.encode(), inbox.encode(), len(body), body))
        else:
            hdr = b'NATS/1.0\r\nNats-Msg-Id: %s\r\n\r\n' % msg_id.encode()
            self.s.sendall(b'HPUB %s %s %d %d\r\n%s%s\r\n' % (
                subj.encode(), inbox.encode(), len(hdr), len(hdr) + len(body), hdr, body))
        return inbox

    def replies(self, inboxes, timeout=10):
        """the JSON replies to the inboxes, in their order"""
        want, got = set(inboxes), {}
        end = time.time() + timeout
        self.s.settimeout(timeout)
        while want - set(got) and time.time() < end:
            m = self.read()
            if m[0] != 'MSG' or m[1] not in want:
                continue
            if m[2].startswith(b'NATS/1.0 503'):
                got[m[1]] = {'error': {'code': 503, 'description': 'no responders'}}
            else:
                got[m[1]] = json.loads(m[3] or b'{}')
        if want - set(got):
            raise OSError('no answer from the JetStream API')
        return [got[i] for i in inboxes]

    def api(self, what, body=''):
        return self.replies([self.send('$JS.API.' + what, body)])[0]


def fail_if_error(r):
    print(json.dumps(r, sort_keys=True))
    return 1 if 'error' in r else 0


def cmd_set(c, stream, patch):
    info = c.api('STREAM.INFO.' + stream)
    if 'error' in info:
        return fail_if_error(info)
    cfg = info['config']
    cfg.update(json.loads(patch))
    return fail_if_error(c.api('STREAM.UPDATE.' + stream, json.dumps(cfg)))


def cmd_fill(c, subj, size, n):
    body = b'x' * size
    stored = 0
    for i in range(n):
        r = c.replies([c.send(subj, body, 'fill-%d-%d' % (int(time.time() * 1000), i))])[0]
        if 'error' in r:
            print('stored %d' % stored)
            print(json.dumps(r, sort_keys=True))
            return 0
        stored += 1
    print('stored %d' % stored)
    return 0


def msg_id(hdrs):
    for ln in base64.b64decode(hdrs).decode(errors='replace').split('\r\n'):
        k, _, v = ln.partition(':')
        if k.strip().lower() == 'nats-msg-id':
            return v.strip()
    return '-'


def cmd_ids(c, stream):
    info = c.api('STREAM.INFO.' + stream)
    if 'error' in info:
        return fail_if_error(info)
    first, last = info['state']['first_seq'], info['state']['last_seq']
    out = []
    seq = first
    while seq <= last and info['state']['messages'] > 0:
        batch = range(seq, min(last, seq + 255) + 1)
        inboxes = [c.send('$JS.API.STREAM.MSG.GET.' + stream, json.dumps({'seq': s})) for s in batch]
        for r in c.replies(inboxes):
            if 'error' in r:
                if r['error'].get('err_code') == 10037:      # deleted: no message there
                    continue
                return fail_if_error(r)
            out.append(msg_id(r['message'].get('hdrs', '')))
        seq = batch[-1] + 1
    sys.stdout.write(''.join(i + '\n' for i in out))
    return 0


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        c = Conn(sys.argv[1])
        cmd, a = sys.argv[2], sys.argv[3:]
        if cmd == 'info':
            return fail_if_error(c.api('STREAM.INFO.' + a[0]))
        if cmd == 'set':
            return cmd_set(c, a[0], a[1])
        if cmd == 'create':
            return fail_if_error(c.api('STREAM.CREATE.' + json.loads(a[0])['name'], a[0]))
        if cmd == 'purge':
            return fail_if_error(c.api('STREAM.PURGE.' + a[0]))
        if cmd == 'delete':
            return fail_if_error(c.api('STREAM.DELETE.' + a[0]))
        if cmd == 'fill':
            return cmd_fill(c, a[0], int(a[1]), int(a[2]))
        if cmd == 'ids':
            return cmd_ids(c, a[0])
    except OSError as e:
        print('jsapi: %s' % e, file=sys.stderr)
        return 2
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main())
