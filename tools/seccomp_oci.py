#!/usr/bin/env python3
"""seccomp_oci.py -- the containers' seccomp profile, from the default that
Debian's containers-common ships for podman (/usr/share/containers/seccomp.json,
Docker's format), written as an OCI runtime-spec linux.seccomp object for
this machine's architecture and for a process with no capabilities (the
agent drops them all): rules that need a capability are left out, rules that
apply only without one are kept.

usage: seccomp_oci.py [IN] OUT
"""
import json
import platform
import sys

ARCH = {  # uname -m -> the profile's arch name and the OCI architectures
    'x86_64': ('amd64', ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32']),
    'aarch64': ('arm64', ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM']),
}


def applies(rule, arch):
    inc, exc = rule.get('includes', {}), rule.get('excludes', {})
    if inc.get('caps'):
        return False                    # needs a capability the container lacks
    if inc.get('arches') and arch not in inc['arches']:
        return False
    if exc.get('arches') and arch in exc['arches']:
        return False
    return True                         # excludes.caps: applies without the cap


def convert(src, arch, arches):
    out = {'defaultAction': src['defaultAction'], 'architectures': arches, 'syscalls': []}
    if 'defaultErrnoRet' in src:
        out['defaultErrnoRet'] = src['defaultErrnoRet']
    for r in src['syscalls']:
        if not applies(r, arch):
            continue
        o = {'names': sorted(r['names']), 'action': r['action']}
        if 'errnoRet' in r:
            o['errnoRet'] = r['errnoRet']
        if r.get('args'):
            o['args'] = [{k: a[k] for k in ('index', 'value', 'valueTwo', 'op') if k in a}
                         for a in r['args']]
        out['syscalls'].append(o)
    if not out['syscalls']:
        raise SystemExit('seccomp_oci.py: no rule applies: refusing an empty profile')
    return out


def main():
    args = sys.argv[1:]
    src_path = args[0] if len(args) == 2 else '/usr/share/containers/seccomp.json'
    dst_path = args[-1]
    m = platform.machine()
    if m not in ARCH:
        raise SystemExit('seccomp_oci.py: no mapping for architecture %s' % m)
    with open(src_path) as f:
        src = json.load(f)
    prof = convert(src, *ARCH[m])
    with open(dst_path + '.tmp', 'w') as f:
        json.dump(prof, f, separators=(',', ':'))
        f.write('\n')
    import os
    os.replace(dst_path + '.tmp', dst_path)


if __name__ == '__main__':
    main()
