#!/usr/bin/env bash
# The small version of the several-hosts run, for CI: three nodes on
# PostgreSQL, each on a host of its own (hosts.sh), a few hundred devices of
# the Python device library, pushes that may be stored sent round-robin over
# the nodes, one node cut from PostgreSQL and the other nodes for a while and
# healed; every accepted push must reach its device once, or have been
# replaced while it was held (Benchmarks/cluster/partition.py), and the other
# nodes must have taken the cut node for dead. Skipped, with a message, where network
# namespaces cannot be made.
#
#   Benchmarks/cluster/ci.sh COURIER PYTHON      (from the repository, as root)
#
# Environment: DEVICES (300), RATE (300/s), PUSH_SECONDS (25), CUT_SECONDS (10).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 2 ] || { echo "usage: Benchmarks/cluster/ci.sh COURIER PYTHON" >&2; exit 2; }
export COURIER=$1
python=$2
if ! ip netns add "ci-probe-$$" 2>/dev/null; then
  echo "cluster/ci.sh: skipped: network namespaces cannot be made here (root and ip netns needed)"
  exit 0
fi
ip netns del "ci-probe-$$"
cut_seconds=${CUT_SECONDS:-10}

HOSTS_LIBRARY=1 source Benchmarks/cluster/hosts.sh
trap teardown EXIT
trap 'exit 130' INT TERM
start_hosts 3 1
echo "== 3 nodes ($NODE_HOSTS), PostgreSQL on 10.77.0.2"
ip netns exec "${prefix}load1" env PARTITION_DEBUG="${PARTITION_DEBUG:-}" "$python" Benchmarks/cluster/partition.py --data "$CLUSTER_DIR/node1" \
  --nodes "$(echo "$NODE_HOSTS" | tr ' ' ',')" --devices "${DEVICES:-300}" --rate "${RATE:-300}" --seconds "${PUSH_SECONDS:-25}" \
  > "$CLUSTER_DIR/partition.log" 2>&1 &
load=$!
until grep -q "^durable phase: [0-9]* pushes" "$CLUSTER_DIR/partition.log" 2>/dev/null; do
  kill -0 "$load" 2>/dev/null || { cat "$CLUSTER_DIR/partition.log"; echo "cluster/ci.sh: the load ended before its pushes"; exit 1; }
  sleep 0.1
done
sleep 5
echo "cutting node 2 from PostgreSQL and the other nodes for $cut_seconds s at $(date +%T.%N)"
cut_node 2
sleep "$cut_seconds"
heal_node 2
echo "healed node 2 at $(date +%T.%N)"
status=0
wait "$load" || status=$?
cat "$CLUSTER_DIR/partition.log"
# The cut must have done what it is for: the others took node 2 for dead.
if ! grep -h "nodes stopped beating" "$CLUSTER_DIR/node1.log" "$CLUSTER_DIR/node3.log" | grep -q node2; then
  echo "cluster/ci.sh: the other nodes never took node 2 for dead: the cut did not cut it"
  status=1
fi
if [ "$status" != 0 ]; then
  for k in 1 2 3; do echo "-- node $k's log (warnings and errors)"; { grep -E "warning|error|critical" "$CLUSTER_DIR/node$k.log" || true; } | tail -30; done
  # What the store still holds for a device with a push missing and not replaced, and what waits to be handed over.
  for device in $(grep -o "(device [0-9a-f]*)" "$CLUSTER_DIR/partition.log" | tr -d '()' | cut -d' ' -f2 | sort -u); do
    echo "-- held for device $device"
    in_ns "${prefix}db" runuser -u postgres -- psql -h 10.77.0.2 -U courier -d courier -Atc \
      "SELECT delivery_id, convert_from(payload, 'UTF8'), accepted_at FROM pending_notifications WHERE device_id = x'$device'::bigint" || true
  done
  echo "-- hand-overs waiting"
  in_ns "${prefix}db" runuser -u postgres -- psql -h 10.77.0.2 -U courier -d courier -Atc \
    "SELECT node_id, device_id, convert_from(payload, 'UTF8') FROM handovers" || true
  echo "-- presence"
  in_ns "${prefix}db" runuser -u postgres -- psql -h 10.77.0.2 -U courier -d courier -Atc \
    "SELECT node_id, count(*) FROM device_presence GROUP BY node_id" || true
fi
exit "$status"
