#!/usr/bin/env bash
# redis_acl_test.sh -- Redis least privilege (deploy/redis-acl), refused by
# Redis itself: each service's ACL user reaches its own key families and
# nothing else, never a @dangerous command, never with a wrong password;
# the services of the stack log in as their own users; with the
# production ACL (no --test) a connection without a user is refused and
# the health user may only PING.
# test-tags: pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
top=$(cd "$(dirname "$0")/../../.." && pwd)

rc() {        # user cmd...: one command as a user of the stack's Redis
    local u=$1; shift
    redis-cli --no-auth-warning -p "$GP_REDIS_PORT" --user "gridpool_$u" \
        --pass "$(cat "$D/redis-acl/$u.pw")" "$@" 2>&1
}

# ---- each user: its own keys, not another's, no dangerous command ------------------------
declare -A own=([registry]='gp:{7}:node:n1' [scheduler]='gp:{7}:res:n1' [metering]='gp:{7}:m:x'
                [recovery]='gp:recovery:x')
declare -A foreign=([registry]='gp:{7}:res:n1' [scheduler]='gp:{7}:m:x' [metering]='gp:{7}:node:n1'
                    [recovery]='gp:{7}:seen')
for u in registry scheduler metering recovery; do
    out=$(rc "$u" HSET "${own[$u]}" f 1)
    [ "$out" = 1 ] || [ "$out" = 0 ]
    ok "$u writes its own key ${own[$u]} ($out)" $?
    out=$(rc "$u" HSET "${foreign[$u]}" f 1)
    case "$out" in NOPERM*) st=0 ;; *) st=1 ;; esac
    ok "$u is refused another service's key ${foreign[$u]} by Redis (${out:0:60})" $st
    out=$(rc "$u" FLUSHALL)
    case "$out" in NOPERM*) st=0 ;; *) st=1 ;; esac
    ok "$u is refused FLUSHALL (${out:0:60})" $st
    out=$(rc "$u" KEYS '*')
    case "$out" in NOPERM*) st=0 ;; *) st=1 ;; esac
    ok "$u is refused KEYS (${out:0:60})" $st
done
out=$(redis-cli --no-auth-warning -p "$GP_REDIS_PORT" --user gridpool_registry --pass wrong PING 2>&1)
case "$out" in *WRONGPASS*) st=0 ;; *) st=1 ;; esac
ok "a wrong password is refused (${out:0:60})" $st
out=$(rc recovery SUBSCRIBE gp 2>&1 | head -n 1)
case "$out" in NOPERM*) st=0 ;; *) st=1 ;; esac
ok "no user has pub/sub channels (${out:0:60})" $st

# ---- the services log in as themselves --------------------------------------------------------
redis-cli -p "$GP_REDIS_PORT" ACL LOG RESET >/dev/null       # forget the probes' refusals
spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0
spawn recovery "$B/bin/gridpool-recovery" --config "$D/gp.env" --http-port 0
spawn metering "$B/bin/gridpool-metering" --config "$D/gp.env" --http-port 0
users=
for _ in $(seq 1 100); do
    users=$(redis-cli -p "$GP_REDIS_PORT" CLIENT LIST | grep -o 'user=[a-z_]*' | sort -u | tr '\n' ' ')
    case "$users" in *gridpool_metering*gridpool_recovery*gridpool_registry*) break ;; esac
    sleep 0.1
done
case "$users" in *gridpool_metering*gridpool_recovery*gridpool_registry*) st=0 ;; *) st=1 ;; esac
ok "registry, recovery and metering are connected as their own users ($users)" $st
sleep 1
denied=$(redis-cli -p "$GP_REDIS_PORT" ACL LOG | grep -A1 '^object$' | grep -v '^object$\|^--' | tr '\n' ' ')
[ -z "$denied" ]
ok "their own work met no ACL refusal (refused: ${denied:-nothing})" $?

# ---- the production ACL: nothing unauthenticated --------------------------------------------
"$top/deploy/redis-acl" init "$D/strict" >/dev/null
[ "$(stat -c %a "$D/strict/users.acl") $(stat -c %a "$D/strict/registry.pw")" = "600 600" ]
ok "users.acl and the password files are 0600" $?
p=$(free_port)
redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --aclfile "$D/strict/users.acl" \
    --daemonize yes --pidfile "$D/pids/strict-redis.pid" --dir "$D/strict" \
    --logfile "$D/strict/redis.log" >/dev/null
wait_port "$p" 10
out=$(redis-cli -p "$p" PING 2>&1)
case "$out" in *NOAUTH*) st=0 ;; *) st=1 ;; esac
ok "without a user, Redis refuses (${out:0:60})" $st
out=$(redis-cli --no-auth-warning -p "$p" --user gridpool_health --pass x PING 2>&1)
[ "$out" = PONG ]
ok "the health user may PING ($out)" $?
out=$(redis-cli --no-auth-warning -p "$p" --user gridpool_health --pass x GET k 2>&1)
case "$out" in NOPERM*) st=0 ;; *) st=1 ;; esac
ok "... and nothing else (${out:0:60})" $st
out=$(redis-cli --no-auth-warning -p "$p" --user gridpool_scheduler \
    --pass "$(cat "$D/strict/scheduler.pw")" HSET 'gp:{1}:grant:n' a 1 2>&1)
[ "$out" = 1 ]
ok "the scheduler's user works there ($out)" $?
grep -q "^GP_REDIS_USER=gridpool_scheduler$" "$D/strict/scheduler.env" &&
    grep -q "^GP_REDIS_PASSWORD=$(cat "$D/strict/scheduler.pw")$" "$D/strict/scheduler.env"
ok "scheduler.env holds its user and password (compose's env_file)" $?
tap_end
