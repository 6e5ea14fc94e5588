#!/usr/bin/env bash
# Delivery: Courier against Debian's mosquitto, in one sitting, alternated.
#
#   Benchmarks/mqtt/compare.sh [PAIRS]
#
# Both sides get the same load from courier-load (release build, on core 1):
# DEVICES clients over TLS, a fixed rate of RATE messages a second for
# SECONDS seconds, then COUNT as fast as one connection sends them; the
# latency is from the sender's clock to the receiver's (one machine).
#   - Courier (core 0): `courier serve`, DEVICES light devices on the device
#     gateway, the pushes as binary frames (`courier-load --light`); each
#     notification acknowledged by its device.
#   - mosquitto (core 0): a TLS listener, DEVICES subscribers each on a topic
#     of its own at QoS 1, one publisher at QoS 1 (`courier-load --mode
#     mqtt`); each message acknowledged by its subscriber (PUBACK).
# Neither runs at real-time priority. Environment: COURIER and LOAD (the
# binaries; default the release builds), DEVICES (10000), RATE (10000),
# SECONDS_AT_RATE (10), COUNT (200000).
set -euo pipefail
cd "$(dirname "$0")/../.."
pairs=${1:-3}
courier=${COURIER:-$PWD/Benchmarks/.build/release/courier}
load=${LOAD:-$PWD/Benchmarks/.build/release/courier-load}
devices=${DEVICES:-10000}
rate=${RATE:-10000}
seconds=${SECONDS_AT_RATE:-10}
count=${COUNT:-200000}
name=compare.sh tools="mosquitto openssl taskset" packages="mosquitto openssl util-linux"
# shellcheck source=Benchmarks/mqtt/common.sh
source Benchmarks/mqtt/common.sh

wait_for() { for _ in $(seq 600); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done; echo "compare.sh: $3 did not start" >&2; cat "$2" >&2; exit 1; }
summary() { grep -E "^(fixed rate|saturation)" "$1" | sed -E 's/ \(in-memory path\)//'; }

run_courier() {
  taskset -c 0 "$courier" serve --data "$dir/courier-data" --config "$dir/courier.json" > "$dir/courier-$1.log" 2>&1 &
  pid=$!
  wait_for "Courier is running" "$dir/courier-$1.log" "courier serve"
  taskset -c 1 "$load" --light --data "$dir/courier-data" --devices "$devices" --connect-wave 100 --rate "$rate" \
    --seconds "$seconds" --count "$count" --server-pid "$pid" > "$dir/load-courier-$1.log" 2>&1 || { cat "$dir/load-courier-$1.log" >&2; exit 1; }
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=
  echo "== courier, run $1"; summary "$dir/load-courier-$1.log"
}

run_mosquitto() {
  taskset -c 0 mosquitto -c "$dir/mosquitto.conf" > "$dir/mosquitto-$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8883) 2>/dev/null && break; sleep 0.1; done
  taskset -c 1 "$load" --mode mqtt --mqtt-port 8883 --mqtt-ca "$dir/ca.pem" --devices "$devices" --connect-wave 100 --rate "$rate" \
    --seconds "$seconds" --count "$count" --server-pid "$pid" > "$dir/load-mosquitto-$1.log" 2>&1 || { cat "$dir/load-mosquitto-$1.log" >&2; exit 1; }
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=
  echo "== mosquitto $(mosquitto -h 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+\.[0-9]+'), run $1"; summary "$dir/load-mosquitto-$1.log"
}

for run in $(seq "$pairs"); do
  run_courier "$run"
  run_mosquitto "$run"
done
