# tests/harness/lib.sh -- process and port helpers shared by the harness
# scripts (stack.sh, redis_cluster.sh); sourced, not run.  A script sets
# HARNESS_NAME to prefix its messages.

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {   # port, seconds
    local i
    for ((i = 0; i < $2 * 20; i++)); do
        (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "${HARNESS_NAME:-harness}: port $1 did not open" >&2
    return 1
}

stop_pidfile() {    # file: TERM, up to 5 s, then KILL
    local f=$1 pid i
    [ -f "$f" ] || return 0
    pid=$(cat "$f" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}
