#!/usr/bin/env python3
"""tests/lib/natsc.py -- a NATS client of a few lines, for the shell tests
that must see exactly what nats-server does with one connection: whether
it is admitted, which publishes it refuses, what reaches a subscriber
(the text protocol, so nothing in between retries, reconnects or hides an
-ERR).  No cnats, no library: the tests check the servers' own answers.

    natsc.py HOST:PORT [--user U --password P] [--sub SUBJ]...
             [--answer SUBJ] [--pub SUBJ[@REPLY]]... [--delay S] [--for S]

Connects (CONNECT with the user and password given, or none: anonymous)
and prints one line per event, flushed at once:

    connected              the server answered PING after CONNECT
    refused TEXT           the server closed the connection, TEXT its -ERR
    err TEXT               an -ERR that left the connection open
                           (a permissions violation)
    msg SUBJ REPLY         a message on a subscription (REPLY "-" if none)
    answered SUBJ          --answer: a request on SUBJ answered on its reply

--sub subscribes; --answer subscribes and answers each message with
"pong" on its reply subject (an agent's AttemptAck, one response);
--pub publishes "x" on SUBJ (with the reply subject REPLY) --delay
seconds after connecting (default 0.3: the subscriptions' interest has
crossed leaf links by then), then it listens --for seconds (default 1).
Exit 0 when connected, 1 when refused or unreachable.
"""
import argparse
import socket
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('addr')
    ap.add_argument('--user')
    ap.add_argument('--password')
    ap.add_argument('--sub', action='append', default=[])
    ap.add_argument('--answer', action='append', default=[])
    ap.add_argument('--pub', action='append', default=[])
    ap.add_argument('--delay', type=float, default=0.3)
    ap.add_argument('--for', dest='dur', type=float, default=1.0)
    a = ap.parse_args()
    host, port = a.addr.rsplit(':', 1)
    out = sys.stdout
    try:
        c = socket.create_connection((host, int(port)), timeout=5)
        buf = c.recv(65536)                       # INFO
    except OSError as e:
        out.write('refused %s\n' % e)
        return 1
    auth = ''
    if a.user is not None:
        auth = ',"user":"%s","pass":"%s"' % (a.user, a.password or '')
    c.sendall(('CONNECT {"verbose":false,"pedantic":false,"headers":false%s}\r\nPING\r\n'
               % auth).encode())
    sids = {}
    for i, s in enumerate(a.sub + a.answer, 1):
        sids[str(i)] = (s, s in a.answer)
        c.sendall(('SUB %s %d\r\n' % (s, i)).encode())
    connected = False
    pubs_at = None
    end = time.time() + 10                        # until connected
    buf = b''
    c.settimeout(0.1)
    while time.time() < end:
        try:
            data = c.recv(65536)
            if not data:
                if not connected:
                    out.write('refused (closed)\n')
                    return 1
                break
            buf += data
        except socket.timeout:
            pass
        except OSError as e:
            if not connected:
                out.write('refused %s\n' % e)
                return 1
            break
        while b'\r\n' in buf:
            line, rest = buf.split(b'\r\n', 1)
            word = line.split(b' ', 1)[0]
            if word == b'MSG':
                f = line.decode().split(' ')
                size = int(f[-1])
                if len(rest) < size + 2:
                    break                          # the payload is not all here yet
                buf = rest[size + 2:]
                subj, sid = f[1], f[2]
                reply = f[3] if len(f) == 5 else '-'
                out.write('msg %s %s\n' % (subj, reply))
                if sids.get(sid, ('', False))[1] and reply != '-':
                    c.sendall(('PUB %s 4\r\npong\r\n' % reply).encode())
                    out.write('answered %s\n' % subj)
                out.flush()
                continue
            buf = rest
            if word == b'PING':
                c.sendall(b'PONG\r\n')
            elif word == b'PONG' and not connected:
                connected = True
                out.write('connected\n')
                pubs_at = time.time() + a.delay
                end = pubs_at + a.dur
            elif word == b'-ERR':
                text = line.decode()[5:].strip().strip("'")
                if not connected or 'Violation' not in text:
                    out.write('refused %s\n' % text)
                    out.flush()
                    return 1
                out.write('err %s\n' % text)
            out.flush()
        if pubs_at is not None and time.time() >= pubs_at:
            for p in a.pub:
                subj, _, reply = p.partition('@')
                head = subj + (' ' + reply if reply else '')
                c.sendall(('PUB %s 1\r\nx\r\n' % head).encode())
            c.sendall(b'PING\r\n')
            pubs_at = None
    out.flush()
    return 0 if connected else 1


if __name__ == '__main__':
    sys.exit(main())
