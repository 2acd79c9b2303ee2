#!/usr/bin/env bash
# reserve_cluster_test.sh -- the scheduler's GPU reservation test
# (reserve_test.c: all or nothing, health, fencing, the two-connection
# race, reconcile and rebuild after FLUSHALL) against a real 3-master Redis
# Cluster (tests/harness/redis_cluster.sh, in the stack folder so the
# stack's teardown stops it too): every script call's keys share the site's
# shard tag, so each call goes to one master; FLUSHALL reaches all three.
# Run by tests/run.sh through with-stack.sh.
# test-tags: pass=san (tests/run.sh)
set -u
D=$GP_STACK_DIR
"$GP_HARNESS/redis_cluster.sh" start "$D" >/dev/null || { echo "not ok - redis cluster did not start"; exit 1; }
set -a
# shellcheck disable=SC1091
. "$D/cluster.env"
set +a
"$GP_BUILD/test/integration/scheduler/reserve_test"
rc=$?
read -r P1 P2 P3 <<<"$GP_CLUSTER_PORTS"
k1=$(redis-cli -p "$P1" dbsize); k2=$(redis-cli -p "$P2" dbsize); k3=$(redis-cli -p "$P3" dbsize)
echo "# keys per master after the test: $k1 $k2 $k3"
exit $rc
