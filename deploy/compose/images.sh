#!/usr/bin/env bash
# deploy/compose/images.sh BUILD_DIR -- the images docker-compose.yml
# names, assembled here from the built programs, the engines installed on
# this machine and the libraries they load, each a root filesystem given
# to `podman import` under the name a registry would give it:
#
#   gridpool:0.1.0    build/bin's programs (make bins), curl for the health
#                     check, the user gridpool (10001); what deploy/Dockerfile
#                     builds, without a registry to pull debian:12 from
#   nats:2.9-alpine   nats-server, wget (its health check)
#   redis:7           redis-server, redis-cli
#   postgres:15       PostgreSQL 15 and an entrypoint that does what the
#                     official image's does with POSTGRES_PASSWORD and
#                     POSTGRES_DB on an empty volume
#
# For machines that reach no image registry (these; CI).  Where one is
# reached, `make image` builds gridpool:0.1.0 from deploy/Dockerfile
# instead, and the engines are pulled.  podman settings: CONTAINERS_CONF
# and CONTAINERS_STORAGE_CONF as the caller has them.
set -eu
build=$1
top=$(cd "$(dirname "$0")/../.." && pwd)
case "$build" in /*) ;; *) build=$top/$build ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# put ROOT FILE...: each file and every library it loads, at their paths
put() {
    local root=$1 f lib
    shift
    for f in "$@"; do
        mkdir -p "$root$(dirname "$f")"
        cp -L "$f" "$root$f"
        for lib in $(ldd "$f" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }'); do
            [ -e "$root$lib" ] && continue
            mkdir -p "$root$(dirname "$lib")"
            cp -L "$lib" "$root$lib"
        done
    done
}
# base ROOT: the few files every image has
base() {
    mkdir -p "$1/etc" "$1/tmp" "$1/usr/local/bin"
    chmod 1777 "$1/tmp"
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$1/etc/passwd"
    printf 'root:x:0:\n' >"$1/etc/group"
    printf 'hosts: files dns\n' >"$1/etc/nsswitch.conf"
    put "$1" /lib/x86_64-linux-gnu/libnss_files.so.2 /lib/x86_64-linux-gnu/libnss_dns.so.2 2>/dev/null || true
}
# import ROOT NAME CHANGE...
import() {
    local root=$1 name=$2 c args=()
    shift 2
    for c in "$@"; do args+=(--change "$c"); done
    tar -C "$root" -cf "$work/img.tar" .
    podman import "${args[@]}" "$work/img.tar" "$name" >/dev/null 2>"$work/import.err" || { cat "$work/import.err" >&2; exit 1; }
    rm -f "$work/img.tar"
    echo "$name"
}

# ---- gridpool ------------------------------------------------------------------------
r=$work/gridpool
base "$r"
for b in "$build"/bin/*; do
    put "$r" "$b"
    mv "$r$b" "$r/usr/local/bin/"
done
put "$r" /usr/bin/curl
printf 'gridpool:x:10001:10001::/nonexistent:/usr/sbin/nologin\n' >>"$r/etc/passwd"
printf 'gridpool:x:10001:\n' >>"$r/etc/group"
import "$r" gridpool:0.1.0 'USER 10001:10001' 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    'ENV GP_HTTP_HOST=0.0.0.0' 'ENV GP_HTTP_PORT=9100' 'EXPOSE 9100'

# ---- nats --------------------------------------------------------------------------
r=$work/nats
base "$r"
put "$r" "$(command -v nats-server)" /usr/bin/wget
ln -s "$(command -v nats-server)" "$r/usr/local/bin/nats-server"
mkdir -p "$r/data"
import "$r" nats:2.9-alpine 'ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/bin' \
    'CMD ["nats-server"]'

# ---- redis ---------------------------------------------------------------------------
r=$work/redis
base "$r"
put "$r" /usr/bin/redis-server /usr/bin/redis-cli
mkdir -p "$r/data"
import "$r" redis:7 'ENV PATH=/usr/local/bin:/usr/bin:/bin' 'WORKDIR /data' 'CMD ["redis-server"]'

# ---- postgres ----------------------------------------------------------------------------
r=$work/postgres
pg=/usr/lib/postgresql/15
base "$r"
put "$r" "$pg"/bin/postgres "$pg"/bin/initdb "$pg"/bin/pg_isready /bin/dash /usr/bin/setpriv \
    /bin/mkdir /bin/chown /bin/chmod /bin/cat /bin/rm
cp -a "$pg/lib" "$r$pg/"
mkdir -p "$r/usr/share/postgresql" "$r/usr/share/zoneinfo/Etc"
cp -a /usr/share/postgresql/15 "$r/usr/share/postgresql/"
cp -L /usr/share/zoneinfo/UTC "$r/usr/share/zoneinfo/UTC"
cp -L /usr/share/zoneinfo/Etc/UTC "$r/usr/share/zoneinfo/Etc/UTC"
ln -s dash "$r/bin/sh"
printf 'postgres:x:999:999::/var/lib/postgresql:/bin/sh\n' >>"$r/etc/passwd"
printf 'postgres:x:999:\n' >>"$r/etc/group"
mkdir -p "$r/var/lib/postgresql/data" "$r/var/run/postgresql"
cat >"$r/usr/local/bin/docker-entrypoint.sh" <<'SH'
#!/bin/sh
# What the official image's entrypoint does, in short: an empty $PGDATA is
# initialised with POSTGRES_USER (postgres) and POSTGRES_PASSWORD, gets
# POSTGRES_DB, and takes password logins from anywhere; then postgres runs
# as the user postgres.
set -e
export PGDATA=${PGDATA:-/var/lib/postgresql/data}
as_pg() { setpriv --reuid=999 --regid=999 --clear-groups "$@"; }
mkdir -p "$PGDATA" /var/run/postgresql
chown 999:999 "$PGDATA" /var/run/postgresql
chmod 0700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    echo "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}" >/tmp/pwfile
    chown 999:999 /tmp/pwfile
    as_pg initdb -D "$PGDATA" -U "${POSTGRES_USER:-postgres}" --pwfile=/tmp/pwfile \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-locale >/dev/null
    rm -f /tmp/pwfile
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ -n "${POSTGRES_DB:-}" ] && [ "$POSTGRES_DB" != postgres ]; then
        echo "CREATE DATABASE \"$POSTGRES_DB\";" | as_pg postgres --single -D "$PGDATA" postgres >/dev/null
    fi
fi
[ "$1" = postgres ] && shift
exec setpriv --reuid=999 --regid=999 --clear-groups postgres -D "$PGDATA" -c listen_addresses='*' "$@"
SH
chmod 755 "$r/usr/local/bin/docker-entrypoint.sh"
import "$r" postgres:15 "ENV PATH=/usr/local/bin:$pg/bin:/usr/bin:/bin" 'ENV TZ=UTC' \
    'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' 'CMD ["postgres"]'
