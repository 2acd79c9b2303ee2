#!/usr/bin/env bash
# deb_test.sh -- the node agent's Debian package (deploy/deb, `make
# deb`), against real services (run under tests/harness/with-stack.sh):
#
#   1. it builds, with the control fields, files and conffiles a node
#      needs; its Depends are the packages of the libraries the agent
#      names, all installable here;
#   2. systemd-analyze verify finds nothing in either unit (and does find a
#      planted typo);
#   3. it installs in an empty root (dpkg --root, the maintainer scripts
#      run against that root): the system user gridpool-agent, the
#      credentials readable by its group only, dpkg says installed;
#   4. the unit's own ExecStart, run from that root as gridpool-agent with
#      the unit's EnvironmentFile and the node's ids in agent.conf,
#      registers the node with the registry of the test stack;
#   5. purged: its files and its user are gone, nothing else.
# test-tags: pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 10000"
D=$GP_STACK_DIR
TOP=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

if [ "$(id -u)" != 0 ] || ! command -v dpkg-deb >/dev/null; then
    echo "1..0 # SKIP needs root and dpkg-deb"
    exit 0
fi
chmod 0755 "$tmp"                      # the agent's user walks into the root
on_fail() {
    echo "# agent log:"; tail -n 12 "$tmp/agent.log" 2>/dev/null | sed 's/^/#   /'
}
tap_on_fail=on_fail

# ---- 1. the package -----------------------------------------------------------------
deb=$(bash "$TOP/deploy/deb/build.sh" "$B" "$tmp/out")
st_=$?
f() { dpkg-deb -f "$deb" "$1"; }
[ $st_ -eq 0 ] && [ "$(f Package)" = gridpool-agent ] && [ -n "$(f Version)" ] &&
    [ "$(f Architecture)" = "$(dpkg --print-architecture)" ]
st_=$?
ok "deploy/deb/build.sh: $(basename "$deb") ($(stat -c %s "$deb" 2>/dev/null) bytes)" $st_
dpkg-deb -c "$deb" | awk '{ print $1, $2, $6 }' >"$tmp/contents"
grep -q '^-rwxr-xr-x root/root ./usr/bin/gridpool-agent$' "$tmp/contents" &&
    grep -q ' ./lib/systemd/system/gridpool-agent.service$' "$tmp/contents" &&
    grep -q ' ./lib/systemd/system/gridpool-leaf.service$' "$tmp/contents" &&
    grep -q ' ./usr/share/gridpool/nats/leaf.conf$' "$tmp/contents" &&
    grep -q '^-rw------- root/root ./etc/gridpool/agent-credentials.env$' "$tmp/contents" &&
    dpkg-deb -I "$deb" conffiles | sort | tr '\n' ' ' | grep -qx \
        '/etc/gridpool/agent-credentials.env /etc/gridpool/agent.conf /etc/gridpool/leaf.env '
ok "... the agent, both units, the leaf's NATS config; its three files under /etc/gridpool are conffiles" $?
dpkg-deb -c "$deb" >"$tmp/contents-full"
grep -q ' ./usr/share/gridpool/nats/leaf-auth.conf -> /etc/gridpool/leaf/auth.conf$' "$tmp/contents-full" &&
    grep -q '^include "leaf-auth.conf"$' "$TOP/deploy/nats/leaf.conf" &&
    grep -q '^drwxr-x--- root/root .* ./etc/gridpool/leaf/$' "$tmp/contents-full"
ok "... leaf.conf's include leaf-auth.conf is a link to the site's /etc/gridpool/leaf/auth.conf (nats-auth site), in a folder closed to others" $?
missing=""
for alt in $(f Depends | tr -d ' ' | tr ',' ' '); do     # "a(>=1)|b": one of them
    one=
    for p in $(echo "$alt" | tr '|' ' '); do
        dpkg -s "${p%%(*}" >/dev/null 2>&1 && one=1
    done
    [ -n "$one" ] || missing="$missing $alt"
done
f Depends | grep -q 'libnats' && f Depends | grep -q 'libev' && [ -z "$missing" ]
st_=$?
ok "... Depends: $(f Depends) (installed here:${missing:- all})" $st_

# ---- 2. the units ----------------------------------------------------------------------
R=$tmp/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" "$R/etc"
touch "$R/var/lib/dpkg/status"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\n' >"$R/etc/group"
printf 'root:*:19000:0:99999:7:::\n' >"$R/etc/shadow"
printf 'root:*::\n' >"$R/etc/gshadow"
V=$tmp/verify                        # the package's files, with systemd's own targets
mkdir -p "$V"
dpkg-deb -x "$deb" "$V"
cp /lib/systemd/system/*.target /lib/systemd/system/*.slice "$V/lib/systemd/system/" 2>/dev/null
install -D "$(command -v nats-server)" "$V/usr/bin/nats-server"    # Recommends: the leaf's server
out=$(systemd-analyze verify --man=no --root="$V" /lib/systemd/system/gridpool-agent.service \
      /lib/systemd/system/gridpool-leaf.service 2>&1)
st_=$?
[ $st_ -eq 0 ] && [ -z "$out" ]
st_=$?
ok "systemd-analyze verify: both units clean${out:+ ($out)}" $st_
sed 's/^Restart=on-failure/Restart=on-failur/' "$V/lib/systemd/system/gridpool-agent.service" \
    >"$V/lib/systemd/system/typo.service"
out=$(systemd-analyze verify --man=no --root="$V" /lib/systemd/system/typo.service 2>&1)
echo "$out" | grep -q 'restart specifier'
ok "... and it finds a planted typo (Restart=on-failur)" $?
u() { sed -n "s/^$1=//p" "$V/lib/systemd/system/gridpool-agent.service"; }
[ -z "$(u User)" ] && [ "$(u Restart)" = on-failure ] && [ -z "$(u EnvironmentFile)" ] &&
    [ "$(u LoadCredential)" = nats:/etc/gridpool/agent-credentials.env ]
ok "... the agent's unit: root (it maps the containers' ids), restarted on failure, its identity by LoadCredential= (not in its environment)" $?
dpkg-deb -f "$deb" Depends | grep -q 'runc (>= 1.1) | crun, skopeo, umoci, containernetworking-plugins, iptables' &&
    dpkg-deb -c "$deb" | grep -q ' ./usr/share/gridpool/seccomp.json$'
ok "... it depends on an OCI runtime, skopeo and umoci, and ships the containers' seccomp profile" $?

# ---- 3. installed in an empty root -------------------------------------------------------------
dpkg --root="$R" --force-script-chrootless --force-depends --log=/dev/null -i "$deb" \
    >"$tmp/dpkg.out" 2>&1
st_=$?
uid=$(awk -F: '$1 == "gridpool-agent" { print $3 }' "$R/etc/passwd")
gid=$(awk -F: '$1 == "gridpool-agent" { print $3 }' "$R/etc/group")
[ $st_ -eq 0 ] && dpkg --root="$R" -s gridpool-agent 2>/dev/null | grep -q '^Status: install ok installed'
st_=$?
ok "dpkg --root: installed in an empty root (its dependencies are the host's)" $st_
[ -n "$uid" ] && [ "$uid" -gt 0 ] && [ -n "$gid" ] &&
    [ "$(stat -c '%a %u %g' "$R/etc/gridpool/agent-credentials.env")" = "600 0 0" ] &&
    [ "$(stat -c '%a %u %g' "$R/etc/gridpool/leaf.env")" = "640 0 $gid" ] &&
    [ "$(stat -c '%a %u %g' "$R/etc/gridpool/leaf")" = "750 0 $gid" ] &&
    grep -q '^gridpool-agent:.*:/usr/sbin/nologin$' "$R/etc/passwd"
ok "... postinst: the leaf's user gridpool-agent ($uid:$gid, no login); the agent's credentials 0600 root, the leaf's 0640, its folder 0750" $?
ldd "$R/usr/bin/gridpool-agent" | grep -q 'not found'
[ $? -ne 0 ]
ok "... the installed agent finds every library it loads" $?

# ---- 4. the unit's command registers the node -------------------------------------------------
spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
$G create tenant op --kind operator >/dev/null && $G create site s0042 --tenant op --region r1 >/dev/null
st_=$?
ok "the operator creates site s0042 (the node is registered at a site the control plane knows)" $st_
conf=$R/etc/gridpool/agent.conf
sed -i -e 's/^GP_SITE=.*/GP_SITE=s0042/' -e 's/^GP_NODE=.*/GP_NODE=s0042-n01/' \
    -e "s|^GP_NATS_URL=.*|GP_NATS_URL=$GP_NATS_URL|" -e 's/^GP_GPU_BACKEND=.*/GP_GPU_BACKEND=sim/' "$conf"
grep -E '^GP_NATS_(USER|PASSWORD)=' "$D/gp.env" >>"$R/etc/gridpool/agent-credentials.env"
exec_start=$(u ExecStart | sed "s| /| $R/|g; s|^/|$R/|")
# As systemd runs it: root, a clean environment, the credential in
# $CREDENTIALS_DIRECTORY/nats (LoadCredential=nats:...).
creds=$tmp/creds
mkdir -p "$creds" && chmod 0700 "$creds"
printf 'a line without an equals sign\n' >"$creds/nats"
timeout 10 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin CREDENTIALS_DIRECTORY="$creds" $exec_start \
    >"$tmp/bad-creds.log" 2>&1
st_=$?
[ $st_ -eq 78 ] && grep -q "credentials $creds/nats" "$tmp/bad-creds.log"
ok "the unit's ExecStart reads its LoadCredential= file: a malformed one stops it (exit $st_)" $?
install -m 0600 "$R/etc/gridpool/agent-credentials.env" "$creds/nats"
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin CREDENTIALS_DIRECTORY="$creds" $exec_start \
    >"$tmp/agent.log" 2>&1 &
agent=$!
pids+=("$agent")
for _ in $(seq 1 100); do
    $G get nodes -o json 2>/dev/null | grep -q '"id":"s0042-n01"' && break
    sleep 0.1
done
$G get nodes -o json 2>/dev/null | grep -q '"id":"s0042-n01"'
st_=$?
ok "the unit's ExecStart from that root, as $(ps -o user= -p "$agent" 2>/dev/null): node s0042-n01 registered" $st_
! tr '\0' '\n' <"/proc/$agent/environ" | grep -q '^GP_NATS'
ok "... its NATS identity is not in its environment" $?
kill -TERM "$agent" 2>/dev/null
wait "$agent" 2>/dev/null

# ---- 5. purged -------------------------------------------------------------------------------
dpkg --root="$R" --force-script-chrootless --force-depends --log=/dev/null --purge gridpool-agent \
    >"$tmp/purge.out" 2>&1
st_=$?
left=$(cd "$R" && find . -type f ! -path './var/lib/dpkg/*' ! -name '*-' | sort | tr '\n' ' ')
[ $st_ -eq 0 ] && [ ! -e "$R/usr/bin/gridpool-agent" ] && [ ! -e "$R/etc/gridpool" ] &&
    ! grep -q '^gridpool-agent:' "$R/etc/passwd" &&
    [ "$left" = "./etc/group ./etc/gshadow ./etc/passwd ./etc/shadow " ]
ok "purged: its files, conffiles and user are gone (left: $left; the shadow tools' backups aside)" $?
tap_end
