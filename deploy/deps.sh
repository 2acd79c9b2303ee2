#!/usr/bin/env bash
# deploy/deps.sh -- installs the Debian packages gridpool needs to build,
# test and run the demo, only those missing, non-interactively.
set -eu
pkgs=(
    build-essential pkg-config
    nats-server libnats-dev          # NATS server and cnats
    libmsgpack-dev                   # msgpack-c
    libhiredis-dev redis-server redis-tools
    stunnel4                         # deploy/redis-tls: TLS to Redis beside each service (hiredis 0.14 has none)
    libev-dev
    libpq-dev postgresql             # libpq and a server for the private stack
    python3 python3-jsonschema python3-msgpack   # schema generator, independent validator
    python3-bcrypt                   # deploy/nats-auth: the servers' files hold bcrypt hashes
    valgrind procps                  # valgrind_test; pgrep in updown_test
    postgresql-contrib               # pgbench, the PostgreSQL reference in make bench
    faketime                         # libfaketime: clock_step_test steps the agent's date
    libyaml-dev                      # gpctl submit -f job.yaml (and job.json)
    prometheus-alertmanager curl     # alerting_test: a real Alertmanager, read over its API
    prometheus                       # prometheus_test: it scrapes every service; promtool
    systemd binutils passwd          # make deb and deploy/deb_test: systemd-analyze, objdump, useradd
    podman runc docker-compose       # make image, compose_test: docker-compose.yml validated and run
    skopeo umoci golang-github-containers-common   # the containers: pull, unpack, seccomp default
    docker-registry busybox-static   # container tests: a real registry, an image built from busybox
    iproute2 iptables containernetworking-plugins   # the containers' network: netns, firewall, CNI ptp
)
# deploy/k8s/validate: the Kubernetes API's types and validators for the
# offline manifest check (tests/unit/deploy/k8s_test.sh), from the npm registry,
# pinned by its package-lock.json.  Without npm or the registry the test
# says SKIP with the reason.
k8s_validate() {
    local d
    d=$(cd "$(dirname "$0")" && pwd)/k8s/validate
    [ -d "$d/node_modules" ] && return 0
    command -v npm >/dev/null || { echo "make deps: no npm: k8s_test will skip" >&2; return 0; }
    npm ci --prefix "$d" --no-audit --no-fund --loglevel=error >/dev/null 2>&1 ||
        echo "make deps: npm ci in $d failed: k8s_test will skip" >&2
}
k8s_validate
missing=()
for p in "${pkgs[@]}"; do
    [ "${p#\#}" = "$p" ] || continue
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "make deps: missing packages: ${missing[*]}" >&2
    echo "make deps: run 'sudo make deps' (or as root), then run make again." >&2
    exit 1
fi
echo "make deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Keep the packaged servers from starting system-wide instances: gridpool
# runs its own private ones.
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "make deps: done"
