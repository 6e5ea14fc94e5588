#!/usr/bin/env bash
# Delivery over several nodes on hosts of their own (hosts.sh): devices spread
# over the nodes and over each load host's source addresses, pushes spread
# round-robin over the nodes (so N-1 in N are handed over to another node),
# at a fixed rate and then as fast as they are taken (courier-load --mode
# cluster); each node's memory per device connection; then, with CUT=K, a
# phase of pushes that may be stored during which node K is cut from
# PostgreSQL and the other nodes for CUT_SECONDS and healed (every accepted
# push counted at its device).
#
#   Benchmarks/cluster/measure.sh NODES DEVICES      (from the repository, as root)
#
# Environment: LOADS (1: load generator hosts, each a process with its share
# of the devices, under its descriptor limit), RATE (10000/s), SECONDS_AT_RATE
# (5), COUNT (100000), CUT (node to cut: none), CUT_SECONDS (30),
# DURABLE_SECONDS (CUT_SECONDS + 20), KILL (node to SIGKILL in that phase
# instead), and hosts.sh's (COURIER, SOURCES, NODE_TIMEOUT, HEARTBEAT, DIRECT:
# false hands pushes over through PostgreSQL only).
# Needs: release builds (cd Benchmarks && swift build -c release --product
# courier && swift build -c release --product courier-load), and what
# hosts.sh needs.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: Benchmarks/cluster/measure.sh NODES DEVICES" >&2; exit 2; }
nodes=$1 devices=$2
loads=${LOADS:-1}
rate=${RATE:-10000}
seconds=${SECONDS_AT_RATE:-5}
count=${COUNT:-100000}
cut_seconds=${CUT_SECONDS:-30}
load=${LOAD:-$PWD/Benchmarks/.build/release/courier-load}
[ -x "$load" ] || { echo "measure.sh: no courier-load at $load (cd Benchmarks && swift build -c release --product courier-load)" >&2; exit 1; }
[ $((devices % (nodes * loads))) = 0 ] || { echo "measure.sh: DEVICES must be a multiple of NODES x LOADS" >&2; exit 2; }

HOSTS_LIBRARY=1 source Benchmarks/cluster/hosts.sh
trap teardown EXIT
trap 'exit 130' INT TERM
start_hosts "$nodes" "$loads"
node_list=$(echo "$NODE_HOSTS" | tr ' ' ',')
echo "== $nodes nodes ($NODE_HOSTS), $devices devices from $loads load hosts, PostgreSQL on 10.77.0.2"

rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
declare -A before
for k in $(seq "$nodes"); do before[$k]=$(rss "$(node_pid "$k")"); done

durable=0
if [ -n "${CUT:-}${KILL:-}" ]; then durable=${DURABLE_SECONDS:-$((cut_seconds + 20))}; fi
per_load=$((devices / loads))
load_pids=()
for j in $(seq "$loads"); do
  sources_var=LOAD_SOURCES_$j
  (ulimit -n "$(ulimit -Hn)"; exec ip netns exec "${prefix}load$j" "$load" --mode cluster --data "$CLUSTER_DIR/node1" \
    --config "$CLUSTER_DIR/node1.json" --devices "$per_load" --first-device $(((j - 1) * per_load)) --nodes "$node_list" \
    --sources "${!sources_var}" --device-port 40003 --binary-port 40000 --connect-wave 100 --rate $((rate / loads)) \
    --seconds "$seconds" --count $((count / loads)) --durable-seconds "$durable" --latency-file "$CLUSTER_DIR/latency$j") \
    > "$CLUSTER_DIR/load$j.log" 2>&1 &
  load_pids+=($!)
done

# Memory per device connection on each node, once every load host connected its devices.
for j in $(seq "$loads"); do
  until grep -q "^connected and registered" "$CLUSTER_DIR/load$j.log" 2>/dev/null; do
    kill -0 "${load_pids[$((j - 1))]}" 2>/dev/null || { cat "$CLUSTER_DIR/load$j.log" >&2; exit 1; }
    sleep 0.2
  done
done
sleep 2
for k in $(seq "$nodes"); do
  after=$(rss "$(node_pid "$k")")
  awk -v k="$k" -v b="${before[$k]}" -v a="$after" -v n=$((devices / nodes)) \
    'BEGIN {printf "node %d: %d KiB before, %d KiB with %d device connections: %.1f KiB per connection\n", k, b, a, n, (a - b) / n}'
done

if [ "$durable" != 0 ]; then
  until grep -q "^durable phase: [0-9]* pushes" "$CLUSTER_DIR/load1.log" 2>/dev/null; do
    kill -0 "${load_pids[0]}" 2>/dev/null || break
    sleep 0.1
  done
  sleep 5
  if [ -n "${CUT:-}" ]; then
    echo "cutting node $CUT from PostgreSQL and the other nodes at $(date +%s) for $cut_seconds s"
    cut_node "$CUT"
    sleep "$cut_seconds"
    heal_node "$CUT"
    echo "healed node $CUT at $(date +%s)"
  else
    echo "killing node $KILL (SIGKILL) at $(date +%s)"
    kill_node "$KILL"
  fi
fi

status=0
for pid in "${load_pids[@]}"; do wait "$pid" || status=$?; done
for j in $(seq "$loads"); do echo "-- load host $j"; cat "$CLUSTER_DIR/load$j.log"; done
# How each node handed pushes over (courier_handovers_total) and gave its inbox entries
# to the others (courier_inbox_shared_total), and its CPU time.
for k in $(seq "$nodes"); do
  [ "$k" = "${KILL:-}" ] && continue
  page=$(in_ns "${prefix}node$k" curl -s --cacert "$CLUSTER_DIR/node1/pki/ca.pem" "https://$(node_address "$k"):8080/metrics")
  counts=$(awk '/^courier_handovers_total/ {sub(/courier_handovers_total/, ""); printf "%s ", $0}' <<< "$page")
  entries=$(awk '/^courier_inbox_shared_total/ {sub(/courier_inbox_shared_total/, ""); printf "%s ", $0}' <<< "$page")
  cpu=$(awk '{printf "%.1f", ($14 + $15) / 100}' "/proc/$(node_pid "$k")/stat")
  echo "node $k: hand-overs ${counts:-none}; inbox entries given ${entries:-none}; CPU ${cpu} s"
done
# PostgreSQL's CPU time: its postmaster, the backends it reaped, and those still running.
postmaster=$(head -1 "$CLUSTER_DIR/pg/data/postmaster.pid" 2>/dev/null || true)
if [ -n "$postmaster" ] && [ -r "/proc/$postmaster/stat" ]; then
  pg_cpu=$(awk '{t += $14 + $15 + $16 + $17} END {print t}' "/proc/$postmaster/stat")
  for child in $(pgrep -P "$postmaster"); do
    pg_cpu=$((pg_cpu + $(awk '{print $14 + $15}' "/proc/$child/stat" 2>/dev/null || echo 0)))
  done
  echo "PostgreSQL: CPU $(awk -v t="$pg_cpu" 'BEGIN {printf "%.1f", t / 100}') s"
fi
for k in $(seq "$nodes"); do
  if grep -qiE "error|warning" "$CLUSTER_DIR/node$k.log"; then
    echo "-- node $k's log (warnings and errors, first 20)"; grep -iE "error|warning" "$CLUSTER_DIR/node$k.log" | head -20
  fi
done
exit "$status"
