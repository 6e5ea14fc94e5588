#!/usr/bin/env bash
# The node's limits (docs/benchmarks.md, "The node's limits"): DEVICES
# devices (19,000 by default: this machine's descriptor limit, 20,000, less
# the listeners and a reserve) on the device library — its back-off and
# jitter as shipped — connected to one node, 200 at a time; then the node is
# restarted (SIGTERM, and started again on the same data directory at once).
# Prints the time from the first device losing its connection to the last one
# connected again, the node's restart time, and the TLS handshakes the node
# saw fail meanwhile (courier_tls_handshake_failures_total).
#
# usage: Benchmarks/limits/restart.sh [DEVICES]       (from the repository)
#        KILL=1: the node is killed with SIGKILL instead of SIGTERM
# needs: release builds (cd Benchmarks && swift build -c release --product
#        courier && swift build -c release --product courier-load), curl
set -euo pipefail
cd "$(dirname "$0")/../.."
devices=${1:-19000}
courier=${COURIER:-$PWD/Benchmarks/.build/release/courier}
load=${LOAD:-$PWD/Benchmarks/.build/release/courier-load}
signal=TERM
[ "${KILL:-0}" = 1 ] && signal=KILL
[ -x "$courier" ] || { echo "restart.sh: no courier at $courier" >&2; exit 1; }
[ -x "$load" ] || { echo "restart.sh: no courier-load at $load" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
server=
loader=
cleanup() {
  [ -n "$server" ] && kill -TERM "$server" 2>/dev/null || true
  [ -n "$loader" ] && kill -TERM "$loader" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] && cp "$work/courier.log" "$KEEP" 2>/dev/null; rm -rf "$work"
}
trap cleanup EXIT

# Room for every device on the production device listener.
cat > "$work/config.json" <<JSON
{"qos": {"tokenRateLimit": 1000000000}, "logLevel": "warning", "network": {"adminPort": 28080},
 "connections": {"maxPerAddress": 20000, "maxPerDeviceListener": $devices, "maxPerSandboxDeviceListener": 100, "maxPerListener": 50}}
JSON
start_server() {
  : > "$work/courier.log"
  taskset -c 0 "$courier" serve --data "$work/data" --config "$work/config.json" > "$work/courier.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do grep -q "Courier is running" "$work/courier.log" && return 0; sleep 0.05; done
  echo "restart.sh: the server did not start: $(cat "$work/courier.log")" >&2
  exit 1
}
start_server
grep "^Connections:" "$work/courier.log"

taskset -c 1 "$load" --mode restart --data "$work/data" --devices "$devices" --connect-wave 200 > "$work/load.log" 2>&1 &
loader=$!
until grep -q "restart the server now" "$work/load.log"; do
  kill -0 "$loader" 2>/dev/null || { cat "$work/load.log" >&2; exit 1; }
  sleep 0.5
done
grep "^connected" "$work/load.log"
rss=$(awk '/VmRSS/ {print $2}' "/proc/$server/status")
echo "server memory with $devices devices connected: $rss KiB"

stopped=$(date +%s.%N)
kill -"$signal" "$server"
wait "$server" || true
start_server
echo "server restarted (SIG$signal, then started again) in $(echo "$(date +%s.%N) - $stopped" | bc) s"
wait "$loader"
loader=
grep "^restart:" "$work/load.log"
echo "handshake failures on the restarted node: $(curl -s http://127.0.0.1:28080/metrics | awk '/^courier_tls_handshake_failures_total/ {sum += $2} END {print sum + 0}')"
