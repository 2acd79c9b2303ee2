#!/usr/bin/env python3
"""deploy/compose/podman-compose.py -- docker-compose.yml under podman, for
machines without Docker (these; CI), one `podman run` per service driven
from the same file.

    podman-compose.py [-f FILE] [-p PROJECT] [--profile NAME]... up [--no-publish]
    podman-compose.py [-f FILE] [-p PROJECT] ps            every container, state, health
    podman-compose.py [-f FILE] [-p PROJECT] down [-v]     stop and remove (-v: volumes too)

The file is read through `docker-compose config` (so what Docker would
run is what runs: anchors, env_file and interpolation resolved, the same
validation).  For each network of the file a podman network with its
subnet; each service gets its fixed ipv4_address, or the next free one,
and every service's name as a host entry (as Docker's DNS would give);
named volumes are podman volumes; services start in depends_on order,
and a dependency's condition service_healthy is waited for by running
its health check (podman runs none by itself without systemd), its
condition service_completed_successfully by waiting for it to exit 0 (a
one-shot: a service's migrations); a disabled health check is none, not
the image's;
restart policies, commands, entrypoints, environment, binds and ports are
passed as they are.  Images must exist (deploy/compose/images.sh or `make
image`): `build:` is Docker's.  podman-compose 1.0.3 (Debian's) is not
used: it is untried here and does not wait for health.

Containers are labelled gridpool.compose.project=PROJECT; `down` removes
what has the label, the networks and (with -v) the volumes.
"""
import ipaddress
import json
import subprocess
import sys
import time

import yaml

LABEL = 'gridpool.compose.project'


def sh(args, check=True, capture=True):
    r = subprocess.run(args, stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None, text=True)
    if check and r.returncode != 0:
        raise SystemExit('podman-compose: %s: %s' % (' '.join(args[:4]), (r.stderr or '').strip()[:500]))
    return r


def config(file, project, profiles):
    args = ['docker-compose', '-f', file, '-p', project]
    for p in profiles:
        args += ['--profile', p]
    return yaml.safe_load(sh(args + ['config']).stdout)


def chosen(cfg, profiles):
    return {n: s for n, s in cfg['services'].items()
            if not s.get('profiles') or set(s['profiles']) & set(profiles)}


def order(svcs):
    done, out = set(), []

    def visit(n, path):
        if n in done:
            return
        if n in path:
            raise SystemExit('podman-compose: depends_on cycle at ' + n)
        for d in deps(svcs[n]):
            if d in svcs:
                visit(d, path | {n})
        done.add(n)
        out.append(n)
    for n in svcs:
        visit(n, set())
    return out


def deps(s):
    d = s.get('depends_on') or {}
    return d if isinstance(d, dict) else {x: {'condition': 'service_started'} for x in d}


def networks_of(s):
    n = s.get('networks') or {'default': None}
    return n if isinstance(n, dict) else {x: None for x in n}


def addresses(cfg, svcs):
    """service -> (network, ip); the file's ipv4_address, or the next free."""
    nets = cfg.get('networks') or {}
    used, out = set(), {}
    for name, s in svcs.items():
        for net, v in networks_of(s).items():
            if v and v.get('ipv4_address'):
                out[name] = (net, v['ipv4_address'])
                used.add(v['ipv4_address'])
    for name, s in svcs.items():
        if name in out:
            continue
        net = next(iter(networks_of(s)))
        sub = ((nets.get(net) or {}).get('ipam') or {}).get('config', [{}])[0].get('subnet')
        if not sub:
            raise SystemExit('podman-compose: network %s needs an ipam subnet' % net)
        for ip in list(ipaddress.ip_network(sub).hosts())[99:]:
            if str(ip) not in used:
                out[name] = (net, str(ip))
                used.add(str(ip))
                break
    return out


def seconds(v, default):
    if v is None:
        return default
    if isinstance(v, (int, float)):
        return float(v)
    v = str(v)
    mult = {'ms': 0.001, 's': 1, 'm': 60, 'h': 3600}
    for suf in ('ms', 's', 'm', 'h'):
        if v.endswith(suf):
            return float(v[:-len(suf)]) * mult[suf]
    return float(v)


def run_args(project, name, s, addr, hosts, publish):
    net, ip = addr[name]
    a = ['podman', 'run', '-d', '--name', '%s_%s_1' % (project, name),
         '--label', '%s=%s' % (LABEL, project), '--label', 'gridpool.compose.service=' + name,
         '--net', '%s_%s' % (project, net), '--ip', ip, '--hostname', name]
    for h, hip in sorted(hosts.items()):
        a += ['--add-host', '%s:%s' % (h, hip)]
    for k, v in sorted((s.get('environment') or {}).items()):
        a += ['--env', '%s=%s' % (k, '' if v is None else v)]
    for v in s.get('volumes') or []:
        if isinstance(v, dict):
            src = v.get('source')
            src = src if v.get('type') == 'bind' else '%s_%s' % (project, src)
            v = '%s:%s%s' % (src, v['target'], ':ro' if v.get('read_only') else '')
        else:
            parts = v.split(':')
            if not parts[0].startswith('/'):
                parts[0] = '%s_%s' % (project, parts[0])
            v = ':'.join(parts)
        a += ['--volume', v]
    if publish:
        for p in s.get('ports') or []:
            if isinstance(p, dict):      # the long form, with its host address if any
                p = ':'.join(str(x) for x in (p.get('host_ip'), p['published'], p['target']) if x)
            a += ['--publish', p]
    if s.get('restart'):
        a += ['--restart', s['restart']]
    hc = s.get('healthcheck')
    if hc and (hc.get('disable') or hc.get('test') in (['NONE'], 'NONE')):
        a += ['--no-healthcheck']
    elif hc:
        t = hc['test']
        cmd = json.dumps(t[1:]) if t[0] == 'CMD' else (t[1] if t[0] == 'CMD-SHELL' else t)
        a += ['--health-cmd', cmd, '--health-interval', hc.get('interval', '30s'),
              '--health-timeout', hc.get('timeout', '30s'),
              '--health-retries', str(hc.get('retries', 3))]
    if s.get('user'):
        a += ['--user', str(s['user'])]
    ep = s.get('entrypoint')
    if ep:
        ep = ep if isinstance(ep, list) else ep.split()
        a += ['--entrypoint', json.dumps(ep)]
    a.append(s['image'])
    cmd = s.get('command')
    if cmd:
        a += cmd if isinstance(cmd, list) else cmd.split()
    return a


def healthy(project, name, s, wait):
    """Runs the health check until it passes: True, or False after wait s."""
    ctr = '%s_%s_1' % (project, name)
    if not s.get('healthcheck'):
        return sh(['podman', 'inspect', '-f', '{{.State.Running}}', ctr], check=False).stdout.strip() == 'true'
    step = min(seconds(s['healthcheck'].get('interval'), 5), 1.0)
    t0 = time.time()
    while time.time() - t0 < wait:
        if sh(['podman', 'healthcheck', 'run', ctr], check=False).returncode == 0:
            return True
        time.sleep(step)
    return False


def completed(project, name, wait):
    """Waits until a one-shot exits: True when it exited 0."""
    ctr = '%s_%s_1' % (project, name)
    t0 = time.time()
    while time.time() - t0 < wait:
        st = sh(['podman', 'inspect', '-f', '{{.State.Status}} {{.State.ExitCode}}', ctr],
                check=False).stdout.split()
        if st and st[0] in ('exited', 'stopped'):
            return len(st) > 1 and st[1] == '0'
        time.sleep(0.3)
    return False


def waited(project, name, dep, cond, svcs):
    if cond == 'service_healthy' and not healthy(project, dep, svcs[dep], 180):
        raise SystemExit('podman-compose: %s waited for %s to be healthy: it is not' % (name, dep))
    if cond == 'service_completed_successfully' and not completed(project, dep, 180):
        raise SystemExit('podman-compose: %s waited for %s to complete: it failed (podman logs %s_%s_1)'
                         % (name, dep, project, dep))


def up(file, project, profiles, publish):
    cfg = config(file, project, profiles)
    svcs = chosen(cfg, profiles)
    addr = addresses(cfg, svcs)
    hosts = {n: ip for n, (_, ip) in addr.items()}
    for net, v in (cfg.get('networks') or {}).items():
        name = '%s_%s' % (project, net)
        if sh(['podman', 'network', 'exists', name], check=False).returncode != 0:
            sub = ((v or {}).get('ipam') or {}).get('config', [{}])[0].get('subnet')
            sh(['podman', 'network', 'create', '--label', '%s=%s' % (LABEL, project)] +
               (['--subnet', sub] if sub else []) + [name])
    for vol in cfg.get('volumes') or {}:
        name = '%s_%s' % (project, vol)
        if sh(['podman', 'volume', 'exists', name], check=False).returncode != 0:
            sh(['podman', 'volume', 'create', '--label', '%s=%s' % (LABEL, project), name])
    for name in order(svcs):
        s = svcs[name]
        for d, c in deps(s).items():
            waited(project, name, d, (c or {}).get('condition'), svcs)
        ctr = '%s_%s_1' % (project, name)
        sh(['podman', 'rm', '-f', ctr], check=False)
        sh(run_args(project, name, s, addr, hosts, publish))
        print('started %s (%s)' % (name, addr[name][1]), flush=True)
    return 0


def ps(project):
    r = sh(['podman', 'ps', '-a', '--filter', 'label=%s=%s' % (LABEL, project),
            '--format', '{{.Names}}\t{{.State}}\t{{.ExitCode}}'])
    bad = 0
    for line in sorted(r.stdout.split('\n')):
        if not line.strip():
            continue
        name, state, code = (line.split('\t') + ['', ''])[:3]
        state = (state.split() or ['?'])[0]          # "Exited (0) 2 minutes ago", "Up 3 minutes"
        policy = sh(['podman', 'inspect', '-f', '{{.HostConfig.RestartPolicy.Name}}', name],
                    check=False).stdout.strip()
        if state.lower() == 'exited' and code.strip() == '0' and policy in ('', 'no'):
            print('%-32s %-10s %s' % (name, 'completed', '-'))      # a one-shot that did its work
            continue
        has = sh(['podman', 'inspect', '-f', '{{.Config.Healthcheck}}', name], check=False).stdout.strip()
        health = '-'
        if has and has not in ('<nil>', ''):
            health = 'healthy' if sh(['podman', 'healthcheck', 'run', name], check=False).returncode == 0 \
                else 'unhealthy'
        bad += state.lower() not in ('running', 'up') or health == 'unhealthy'
        print('%-32s %-10s %s' % (name, state, health))
    return 1 if bad else 0


def down(project, volumes):
    r = sh(['podman', 'ps', '-a', '-q', '--filter', 'label=%s=%s' % (LABEL, project)])
    ids = r.stdout.split()
    if ids:
        sh(['podman', 'rm', '-f', '-t', '10'] + ids, check=False)
    for kind in ('network', 'volume') if volumes else ('network',):
        r = sh(['podman', kind, 'ls', '-q', '--filter', 'label=%s=%s' % (LABEL, project)], check=False)
        for n in r.stdout.split():
            sh(['podman', kind, 'rm', '-f', n], check=False)
    return 0


def main(argv):
    file, project, profiles, rest = 'docker-compose.yml', 'gridpool', [], []
    it = iter(argv[1:])
    for a in it:
        if a == '-f':
            file = next(it)
        elif a == '-p':
            project = next(it)
        elif a == '--profile':
            profiles.append(next(it))
        else:
            rest.append(a)
    if not rest or rest[0] in ('-h', '--help'):
        sys.stdout.write(__doc__)
        return 0 if rest else 2
    if rest[0] == 'up':
        return up(file, project, profiles, '--no-publish' not in rest)
    if rest[0] == 'ps':
        return ps(project)
    if rest[0] == 'down':
        return down(project, '-v' in rest)
    raise SystemExit('podman-compose: unknown command %r (up, ps, down)' % rest[0])


if __name__ == '__main__':
    sys.exit(main(sys.argv))
