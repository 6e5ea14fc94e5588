#!/usr/bin/env bash
# The server's own share of the delivery latency: Courier against Debian's
# mosquitto, alternated, each at a low fixed rate, measured on the wire.
#
#   Benchmarks/mqtt/server-latency.sh [PAIRS]
#
# The load is compare.sh's (courier-load on core 1, the server or broker on
# core 0, DEVICES clients over TLS, RATE messages a second). While the
# fixed rate runs, tcpdump records loopback for CAPTURE seconds; each
# message's packet into the server (the binary provider connection's, or the
# publisher's) is paired with the next packet out to a device (a
# Notification, or a PUBLISH to a subscriber), and the script prints the
# distribution of that interval beside the load generator's end-to-end
# figures. The difference between the two is the load generator's side.
# Environment: COURIER and LOAD (the binaries; default the release builds),
# DEVICES (1000), RATE (1000), CAPTURE (4).
set -euo pipefail
cd "$(dirname "$0")/../.."
pairs=${1:-2}
courier=${COURIER:-$PWD/Benchmarks/.build/release/courier}
load=${LOAD:-$PWD/Benchmarks/.build/release/courier-load}
devices=${DEVICES:-1000}
rate=${RATE:-1000}
capture=${CAPTURE:-4}
name=server-latency.sh tools="mosquitto openssl taskset tcpdump python3" packages="mosquitto openssl util-linux tcpdump python3"
# shellcheck source=Benchmarks/mqtt/common.sh
source Benchmarks/mqtt/common.sh

# Pairs each data packet into the server with the next one out to a device.
cat > "$dir/pair.py" <<'PY'
import re, sys
kind, path = sys.argv[1], sys.argv[2]
packets = []
for line in open(path):
    m = re.match(r'(\d+\.\d+) IP 127\.0\.0\.1\.(\d+) > 127\.0\.0\.1\.(\d+): tcp (\d+)', line)
    if m and int(m[4]) > 0:
        packets.append((float(m[1]), int(m[2]), int(m[3]), int(m[4])))
if kind == 'courier':
    into = [p for p in packets if p[2] == 2195]
    out = [p for p in packets if p[1] == 5223]
else:
    senders = {}
    for p in packets:
        if p[2] == 8883: senders[p[1]] = senders.get(p[1], 0) + 1
    publisher = max(senders, key=senders.get)
    into = [p for p in packets if p[1] == publisher and p[2] == 8883]
    # A PUBLISH to a subscriber is a 79-81-byte record here; smaller ones are acknowledgements.
    out = [p for p in packets if p[1] == 8883 and p[2] != publisher and p[3] >= 79]
gaps, j = [], 0
for t, *_ in into:
    while j < len(out) and out[j][0] < t: j += 1
    if j < len(out): gaps.append((out[j][0] - t) * 1e6)
gaps.sort()
if not gaps: sys.exit(f'server-latency.sh: no {kind} packets paired')
at = lambda q: gaps[min(len(gaps) - 1, int(len(gaps) * q))]
print(f'on the wire, packet in to packet out: p50 {at(0.5):.0f} µs, p90 {at(0.9):.0f} µs, p99 {at(0.99):.0f} µs ({len(gaps)} messages)')
PY

# Records loopback while the fixed rate runs (after the connections and the load generator's settling time).
capture_during() { # name filter load-pid
  sleep $(( 6 + devices / 500 ))
  timeout "$capture" tcpdump -i lo -n -tt -q -B 65536 "$2" -w "$dir/$1.pcap" 2>/dev/null || true
  wait "$3" || { cat "$dir/load-$1.log" >&2; exit 1; }
  tcpdump -r "$dir/$1.pcap" -n -tt -q 2>/dev/null > "$dir/$1.txt"
  grep -E "^fixed rate" "$dir/load-$1.log"
  python3 "$dir/pair.py" "$1" "$dir/$1.txt"
}
seconds=$(( 12 + devices / 500 ))

for run in $(seq "$pairs"); do
  taskset -c 0 "$courier" serve --data "$dir/courier-data-$run" --config "$dir/courier.json" > "$dir/courier.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q "Courier is running" "$dir/courier.log" && break; sleep 0.1; done
  taskset -c 1 "$load" --light --data "$dir/courier-data-$run" --devices "$devices" --connect-wave 100 --rate "$rate" \
    --seconds "$seconds" --count 1000 --server-pid "$pid" > "$dir/load-courier.log" 2>&1 &
  echo "== courier, run $run"
  capture_during courier "tcp port 2195 or tcp port 5223" $!
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=

  taskset -c 0 mosquitto -c "$dir/mosquitto.conf" > "$dir/mosquitto.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8883) 2>/dev/null && break; sleep 0.1; done
  taskset -c 1 "$load" --mode mqtt --mqtt-port 8883 --mqtt-ca "$dir/ca.pem" --devices "$devices" --connect-wave 100 --rate "$rate" \
    --seconds "$seconds" --count 1000 --server-pid "$pid" > "$dir/load-mosquitto.log" 2>&1 &
  echo "== mosquitto, run $run"
  capture_during mosquitto "tcp port 8883" $!
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=
done
