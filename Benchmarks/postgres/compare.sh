#!/usr/bin/env bash
# The PostgreSQL store against SQLite, and two nodes against one
# (docs/benchmarks.md, "Several nodes on PostgreSQL"). Each run is the light
# delivery benchmark (courier-load --light: devices online at a fixed rate,
# then saturation, then the durable path with the devices offline, then the
# drain when they reconnect), on:
#   sqlite    one node on SQLite;
#   postgres  one node on PostgreSQL (its server on this machine, default
#             settings: fsync and synchronous_commit on);
#   handover  two nodes on PostgreSQL, the devices on node B, the pushes on
#             node A: every notification is handed over through the database.
# The three are alternated, PAIRS times. Besides courier-load's figures, the
# server side's CPU per notification: every courier process and every
# PostgreSQL process, over the whole load run (connections included).
#
# usage: Benchmarks/postgres/compare.sh [PAIRS]     (from the repository)
#        DEVICES (5000), RATE (5000/s), SECONDS_AT_RATE (5), COUNT (100000),
#        KINDS ("sqlite postgres handover": which runs, in that order)
# needs: PostgreSQL's server binaries (Debian's postgresql), and release
#        builds: cd Benchmarks && swift build -c release --product courier
#        && swift build -c release --product courier-load
set -euo pipefail
cd "$(dirname "$0")/../.."
pairs=${1:-2}
courier=${COURIER:-$PWD/Benchmarks/.build/release/courier}
load=${LOAD:-$PWD/Benchmarks/.build/release/courier-load}
devices=${DEVICES:-5000}
rate=${RATE:-5000}
seconds=${SECONDS_AT_RATE:-5}
count=${COUNT:-100000}
bin=${POSTGRES_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[ -x "$bin/initdb" ] || { echo "compare.sh: no PostgreSQL server binaries (apt-get install postgresql, or POSTGRES_BIN=DIR)" >&2; exit 1; }
[ -x "$courier" ] || { echo "compare.sh: no courier at $courier (cd Benchmarks && swift build -c release --product courier)" >&2; exit 1; }
[ -x "$load" ] || { echo "compare.sh: no courier-load at $load (cd Benchmarks && swift build -c release --product courier-load)" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)"

dir=$(mktemp -d)
chmod 755 "$dir"
pids=()
# PostgreSQL refuses to run as root: as the postgres user then.
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  as_postgres "$bin/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

mkdir "$dir/pg"
[ "$(id -u)" = 0 ] && chown postgres "$dir/pg"
as_postgres "$bin/initdb" -D "$dir/pg/data" -U courier --auth=trust -E UTF8 > /dev/null
as_postgres "$bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w \
  -o "-p 45432 -k $dir/pg -c listen_addresses=127.0.0.1 -c max_connections=200" start > /dev/null
postmaster=$(head -1 "$dir/pg/data/postmaster.pid")

# CPU time (clock ticks) of courier processes, and of the PostgreSQL server:
# the postmaster, its children now, and the children it has reaped.
cpu_ticks() {
  local total=0 pid
  for pid in "$@"; do total=$(( total + $(awk '{print $14 + $15}' "/proc/$pid/stat") )); done
  if [ -n "${with_postgres:-}" ]; then
    total=$(( total + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$postmaster/stat") ))
    for pid in $(pgrep -P "$postmaster"); do total=$(( total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0) )); done
  fi
  echo "$total"
}

config() { # name base-port [store-and-cluster-json]
  local p=$2
  cat <<JSON
{"network": {"production": {"binary": $p, "feedback": $((p + 1)), "http2": $((p + 2)), "device": $((p + 3)), "channels": $((p + 4))},
             "sandbox": {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}, "adminPort": 0},
 "logLevel": "warning", "qos": {"tokenRateLimit": 1000000000},
 "connections": {"maxPerAddress": 20000, "maxPerDeviceListener": $devices, "maxPerSandboxDeviceListener": 100, "maxPerListener": 50}${3:+, $3}}
JSON
}

start_node() { # name config data
  "$courier" serve --data "$3" --config "$2" > "$3.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do grep -q "Courier is running" "$3.log" 2>/dev/null && return 0; sleep 0.1; done
  echo "compare.sh: $1 did not start" >&2; cat "$3.log" >&2; exit 1
}

stop_nodes() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}

run() { # kind run
  # SQLite: the defaults, no store section (so a build from before it can be measured too: COURIER=...).
  local kind=$1 work="$dir/$1-$2" store='' device_port=40003
  mkdir "$work"
  with_postgres=
  if [ "$kind" != sqlite ]; then
    as_postgres "$bin/createdb" -h 127.0.0.1 -p 45432 -U courier "${kind}_$2"
    store="\"store\": {\"kind\": \"postgresql\", \"port\": 45432, \"database\": \"${kind}_$2\"}, \"cluster\": {\"node\": \"NODE\"}"
    with_postgres=1
  fi
  config node-a 40000 "${store/NODE/node-a}" > "$work/a.json"
  start_node node-a "$work/a.json" "$work/a"
  if [ "$kind" = handover ]; then
    cp -a "$work/a" "$work/b"
    config node-b 41000 "${store/NODE/node-b}" > "$work/b.json"
    start_node node-b "$work/b.json" "$work/b"
    device_port=41003
  fi
  local before after
  # shellcheck disable=SC2086
  before=$(cpu_ticks "${pids[@]}")
  "$load" --light --data "$work/a" --config "$work/a.json" --devices "$devices" --connect-wave 100 --rate "$rate" --seconds "$seconds" \
    --count "$count" --device-port "$device_port" --binary-port 40000 --server-pid "${pids[0]}" > "$work/load.log" 2>&1 \
    || { cat "$work/load.log" >&2; exit 1; }
  after=$(cpu_ticks "${pids[@]}")
  stop_nodes
  local notifications=$(( rate * seconds + count + devices ))
  echo "== $kind, run $2"
  grep -E "^(fixed rate|saturation|durable path|drain)" "$work/load.log" | sed -E 's/ \(in-memory path\)//'
  awk -v t=$(( after - before )) -v hz="$(getconf CLK_TCK)" -v n="$notifications" \
    'BEGIN {printf "server side (courier and PostgreSQL) CPU over the run: %.1f s, %.1f µs per notification (%d notifications)\n", t / hz, t / hz * 1e6 / n, n}'
}

for pair in $(seq "$pairs"); do
  for kind in ${KINDS:-sqlite postgres handover}; do run "$kind" "$pair"; done
done
