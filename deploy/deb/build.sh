#!/usr/bin/env bash
# deploy/deb/build.sh BUILD_DIR OUT_DIR -- the Debian package of the node
# agent, gridpool-agent_<version>_<arch>.deb, from the built binary: the
# agent, its systemd unit (and the site's NATS leaf node's), its config
# files under /etc/gridpool (conffiles: an upgrade keeps the node's), the
# leaf-node NATS config, and the maintainer scripts (the system user
# gridpool-agent).  Depends: the packages of the libraries the binary
# names (NEEDED; ldd, dpkg -S), passwd for useradd, the OCI runtime and the
# image tools the agent runs.  Prints the package's path.
set -eu
build=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
bin=$build/bin/gridpool-agent
[ -x "$bin" ] || { echo "build.sh: $bin not built (make all)" >&2; exit 1; }

version=$(sed -n 's/^#define AGENT_VERSION "\(.*\)"$/\1/p' "$top/services/agent/main.c")
arch=$(dpkg --print-architecture)

# the package owning each library the binary loads
pkg_of() {
    local p=$1 q o
    for q in "$p" "$(readlink -f "$p")" "${p#/usr}" "/usr$p"; do
        o=$(dpkg -S "$q" 2>/dev/null | head -n 1 | cut -d: -f1)
        [ -n "$o" ] && { echo "$o"; return 0; }
    done
    echo "build.sh: no package owns $p" >&2
    return 1
}
# the libraries it names itself (NEEDED), where the loader finds them
needed=$(objdump -p "$bin" | awk '$1 == "NEEDED" { print $2 }')
deps=$(for so in $needed; do ldd "$bin" | awk -v so="$so" '$1 == so && $3 ~ /^\// { print $3 }'; done |
    while read -r lib; do pkg_of "$lib"; done | sort -u | paste -sd, - | sed 's/,/, /g')
[ -n "$deps" ] || { echo "build.sh: no dependencies found for $bin" >&2; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
chmod 0755 "$root"
install -D -m 0755 "$bin" "$root/usr/bin/gridpool-agent"
strip --strip-unneeded "$root/usr/bin/gridpool-agent"
install -D -m 0644 "$here/gridpool-agent.service" "$root/lib/systemd/system/gridpool-agent.service"
install -D -m 0644 "$here/gridpool-leaf.service" "$root/lib/systemd/system/gridpool-leaf.service"
install -D -m 0644 "$here/agent.conf" "$root/etc/gridpool/agent.conf"
install -D -m 0600 "$here/agent-credentials.env" "$root/etc/gridpool/agent-credentials.env"
install -D -m 0640 "$here/leaf.env" "$root/etc/gridpool/leaf.env"
install -D -m 0644 "$top/deploy/nats/leaf.conf" "$root/usr/share/gridpool/nats/leaf.conf"
# leaf.conf includes leaf-auth.conf beside it (nats-server takes no absolute
# or $VAR include): the site's own file, provisioned in /etc/gridpool/leaf/
ln -s /etc/gridpool/leaf/auth.conf "$root/usr/share/gridpool/nats/leaf-auth.conf"
install -d -m 0750 "$root/etc/gridpool/leaf"
# the containers' seccomp profile (make builds it from containers-common's)
install -D -m 0644 "$build/seccomp.json" "$root/usr/share/gridpool/seccomp.json"
install -D -m 0644 "$here/README" "$root/usr/share/doc/gridpool-agent/README"
mkdir -p "$root/DEBIAN"
install -m 0755 "$here/postinst" "$here/prerm" "$here/postrm" "$root/DEBIAN/"
(cd "$root" && find etc -type f | sed 's|^|/|' | sort) >"$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: gridpool-agent
Version: $version
Architecture: $arch
Maintainer: gridpool <ops@gridpool.example>
Installed-Size: $size
Depends: $deps, passwd, runc (>= 1.1) | crun, skopeo, umoci, containernetworking-plugins, iptables, iproute2
Recommends: nats-server
Suggests: libnvidia-ml1
Section: admin
Priority: optional
Homepage: https://gridpool.example
Description: gridpool node agent
 Registers a GPU node with the gridpool control plane, heartbeats with
 its telemetry (NVML), renews its lease and runs the GPU jobs it is
 given, each in its own OCI container (runc or crun; images by skopeo and
 umoci), under systemd (gridpool-agent.service). gridpool-leaf.service
 runs the site's NATS leaf node (with nats-server).
CONTROL
mkdir -p "$out"
deb=$out/gridpool-agent_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
