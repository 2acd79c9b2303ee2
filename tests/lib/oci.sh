# oci.sh -- what the container tests share (sourced after lib.sh): a test
# image built from Debian's busybox-static with umoci, and a real registry
# (Debian's docker-registry) on a free loopback port, stopped at exit.
#
#   oci_image DIR        an OCI layout at DIR, tag "t": /bin/busybox and its
#                        applets, /etc/passwd, CMD /bin/sh (made once; kept)
#   oci_registry         starts a registry; sets OCI_REG (127.0.0.1:PORT)
#   oci_push DIR REF     pushes DIR:t to REF on OCI_REG (plain HTTP)

oci_image() {
    local d=$1 w
    [ -f "$d/index.json" ] && return 0
    w=$(mktemp -d "${TMPDIR:-/tmp}/gp-oci.XXXXXX") || return 1
    rm -rf "$d.tmp"
    umoci init --layout "$d.tmp" && umoci new --image "$d.tmp:t" &&
        umoci unpack --image "$d.tmp:t" "$w/b" >/dev/null &&
        mkdir -p "$w/b/rootfs/bin" "$w/b/rootfs/etc" &&
        cp /bin/busybox "$w/b/rootfs/bin/busybox" &&
        for a in $(/bin/busybox --list); do
            [ "$a" = busybox ] || ln -sf busybox "$w/b/rootfs/bin/$a"
        done &&
        printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' \
            >"$w/b/rootfs/etc/passwd" &&
        printf 'root:x:0:\nnogroup:x:65534:\n' >"$w/b/rootfs/etc/group" &&
        umoci repack --image "$d.tmp:t" "$w/b" >/dev/null &&
        umoci config --image "$d.tmp:t" --config.cmd /bin/sh --config.env GP_IMAGE_ENV=from-image &&
        umoci gc --layout "$d.tmp" && mv "$d.tmp" "$d"
    local rc=$?
    rm -rf "$w"
    return $rc
}

oci_registry() {
    local port
    port=$(free_port)
    mkdir -p "$D/registry"
    cat >"$D/registry.yml" <<CONF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $D/registry
http:
  addr: 127.0.0.1:$port
CONF
    spawn registry-oci docker-registry serve "$D/registry.yml"
    wait_port "$port" 10 || return 1
    OCI_REG=127.0.0.1:$port
}

oci_push() {
    skopeo copy --quiet --dest-tls-verify=false "oci:$1:t" "docker://$OCI_REG/$2" >/dev/null
}
