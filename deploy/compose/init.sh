#!/usr/bin/env bash
# deploy/compose/init.sh [DIR] -- the compose stack's NATS identities
# (deploy/nats-auth) and Redis users (deploy/redis-acl: DIR/redis/), once,
# before `docker-compose up`: DIR/auth/ (default
# build/compose/auth) holds auth.conf (the server's authorization block,
# mounted into the nats container), service-<name>.env (each service's
# identity, its env_file) and sim.env; DIR/scheduler-secret.env the key of
# tenant secrets (the scheduler's alone); DIR/gpctl.env is the operator's, for
# gpctl on this host (NATS published on 127.0.0.1:4222).  PostgreSQL:
# DIR/pg/<service>.env, each service's conninfo as its own role
# gridpool_<service> with a random password (its migrate one-shot sets it
# on the role), and DIR/pg/migrator.env, the superuser's, for the one-shots
# alone.  Run again, it keeps the identities and passwords it made
# (nats-auth keeps its list).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$top/build/compose}
mkdir -p "$dir"
"$top/deploy/nats-auth" init "$dir/auth" --url nats://nats:4222 >/dev/null
"$top/deploy/nats-auth" sim "$dir/auth" >/dev/null
chmod 0644 "$dir/auth/auth.conf"       # read by the nats container's user
# Redis's ACL users: redis/users.acl for the server (hashes only, read by
# the redis container's user), redis/<service>.env each service's env_file
"$top/deploy/redis-acl" init "$dir/redis"
chmod 0755 "$dir/redis"
chmod 0644 "$dir/redis/users.acl"
# the key tenant secrets are encrypted under: the scheduler's env_file
# alone, made once (a new key would leave the stored secrets unreadable)
if [ ! -s "$dir/scheduler-secret.env" ]; then
    ( umask 077 && printf 'GP_SECRET_KEY=%s\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
        >"$dir/scheduler-secret.env" )
fi
# each service's PostgreSQL login, made once
mkdir -p "$dir/pg"
for s in registry scheduler recovery metering billing alerting; do
    [ -s "$dir/pg/$s.env" ] && continue
    ( umask 077 && printf 'GP_PG_CONNINFO=postgresql://gridpool_%s:%s@postgres:5432/gridpool\n' "$s" \
        "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$dir/pg/$s.env" )
done
( umask 077 && printf 'GP_PG_MIGRATE_CONNINFO=postgresql://postgres:gridpool@postgres:5432/gridpool\n' \
    >"$dir/pg/migrator.env" )
sed 's|^GP_NATS_URL=.*|GP_NATS_URL=nats://127.0.0.1:4222|' "$dir/auth/admin.env" >"$dir/gpctl.env"
chmod 0600 "$dir/gpctl.env"
echo "$dir/auth"
