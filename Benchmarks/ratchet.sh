#!/usr/bin/env bash
# The ratchet: every hot path of two builds, alternated in one sitting, so
# that a change is judged against a fixed baseline (d1dfeba) and not only
# against its predecessor, where steps each "within the noise" add up.
#
#   Benchmarks/ratchet.sh BASE [HEAD]        (from the repository)
#
# BASE and HEAD (default: the work tree's HEAD commit) are checked out as git
# worktrees under .build-ratchet/<commit> and built there (release:
# `courier` and `courier-load` of the Benchmarks package), once; a build
# already there is reused. HEAD "." is this work tree as it is, with its own
# release builds (`cd Benchmarks && swift build -c release --product
# courier-load && swift build -c release --product courier`), for a change
# not committed yet. Then ROUNDS rounds (default 3), each running
# BASE then HEAD (HEAD then BASE in even rounds), every server pinned to core 0
# and its load to core 1:
#   binary       courier-load --mode binary-raw --count 2000000: notifications/s
#   h2 c=1, c=8  Benchmarks/h2load/compare.sh (ONLY=courier, 200,000 requests):
#                requests/s and the server's CPU µs per request
#   durable c=1, c=8   the same with EXPIRATION in 2100 (committed before 200)
#   delivery     courier-load --light --devices 10000 --connect-wave 100
#                --rate 10000 --seconds 10 --count 200000: p99 at 10,000/s,
#                saturation (notifications/s), and the server's memory per
#                idle device connection (KiB) once they are connected
# and prints one line per figure: each build's values (one per round), the
# medians' ratio HEAD/BASE, and each build's spread ((max - min) / median).
# For CPU, p99 and memory lower is better; for the rates higher.
#
# Environment: ROUNDS (3), SKIP (figures to leave out, e.g. "delivery"),
# KEEP=1 keeps each run's logs in .build-ratchet/logs.
# Needs: git, taskset, h2load (Debian nghttp2-client), openssl; loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
[ $# -ge 1 ] || { echo "usage: Benchmarks/ratchet.sh BASE [HEAD]" >&2; exit 2; }
rounds=${ROUNDS:-3}
skip=${SKIP:-}
for tool in git taskset h2load openssl; do
  command -v "$tool" >/dev/null || { echo "ratchet.sh: needs $tool (apt-get install nghttp2-client openssl util-linux)" >&2; exit 1; }
done
base=$(git rev-parse --short "$1^{commit}")
if [ "${2:-}" = . ]; then head=worktree; else head=$(git rev-parse --short "${2:-HEAD}^{commit}"); fi
root=$repo/.build-ratchet
logs=$root/logs
mkdir -p "$root" "$logs"
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

# A release build of `commit` in its worktree: its binaries' folder.
build() {
  local commit=$1 tree=$root/$1
  if [ ! -d "$tree" ]; then git worktree add --detach "$tree" "$commit" >/dev/null 2>&1; fi
  if [ ! -x "$tree/Benchmarks/.build/release/courier-load" ] || [ ! -x "$tree/Benchmarks/.build/release/courier" ]; then
    echo "building $commit (release) in $tree ..." >&2
    (cd "$tree/Benchmarks" && swift build -c release --product courier-load >"$logs/build-$commit.log" 2>&1 &&
      swift build -c release --product courier >>"$logs/build-$commit.log" 2>&1) ||
      { echo "ratchet.sh: the build of $commit failed; see $logs/build-$commit.log" >&2; exit 1; }
  fi
  echo "$tree/Benchmarks/.build/release"
}

bins_base=$(build "$base")
if [ "$head" = worktree ]; then
  bins_head=$repo/Benchmarks/.build/release
  for binary in courier courier-load; do
    [ -x "$bins_head/$binary" ] || { echo "ratchet.sh: no $bins_head/$binary: build it first (see the top of this file)" >&2; exit 1; }
  done
else
  bins_head=$(build "$head")
fi

wait_for() { for _ in $(seq 600); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done; echo "ratchet.sh: $3 did not start" >&2; cat "$2" >&2; return 1; }

# Each figure's values: $work/<figure>.<commit>, one per line.
record() { echo "$3" >> "$work/$1.$2"; }

serve() { # bins config log: starts courier serve on core 0 with a fresh data directory
  rm -rf "$work/data"
  # An older build knows fewer keys: its copy of the configuration leaves them out (its defaults).
  local fitted=$2.$(basename "$(dirname "$(dirname "$(dirname "$1")")")")
  [ -f "$fitted" ] || { cp "$2" "$fitted" && python3 Benchmarks/fit-config.py "$1/courier" "$fitted"; }
  taskset -c 0 "$1/courier" serve --data "$work/data" --config "$fitted" > "$3" 2>&1 &
  pid=$!
  wait_for "Courier is running" "$3" "courier serve"
}
stop() { kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=; }

cat > "$work/binary.json" <<JSON
{"logLevel": "warning", "qos": {"tokenRateLimit": 1000000000}, "network": {"adminPort": 0,
 "production": {"binary": 43195, "feedback": 43196, "http2": 43197, "device": 43223, "channels": 43198},
 "sandbox": {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}}}
JSON
# The delivery runs' configuration (Benchmarks/faults/device-flood.sh uses it too).
cp Benchmarks/delivery.json "$work/delivery.json"

run_binary() { # commit bins
  serve "$2" "$work/binary.json" "$work/serve.log"
  local out
  out=$(taskset -c 1 "$2/courier-load" --mode binary-raw --data "$work/data" --binary-port 43195 --device-port 43223 --count 2000000 2>&1) || true
  stop
  echo "$out" >> "$logs/binary-$1.log"
  record binary "$1" "$(echo "$out" | sed -n 's/.*all handled in [0-9.]* s (\([0-9]*\)\/s).*/\1/p' | tail -1)"
}

run_h2() { # commit bins
  local out line c
  for mode in h2 durable; do
    if [ "$mode" = durable ]; then export EXPIRATION=4102444800; else unset EXPIRATION; fi
    out=$(FIT_CONFIG=1 ONLY=courier COURIER="$2/courier" SERVER_CPU=0 LOAD_CPU=1 Benchmarks/h2load/compare.sh 200000 2>&1) || { echo "$out" >&2; return 1; }
    echo "$out" >> "$logs/h2-$1.log"
    for c in 1 8; do
      line=$(echo "$out" | grep "^courier c=$c ")
      record "$mode-c$c-rate" "$1" "$(echo "$line" | sed -n 's/.*: \([0-9.]*\) req\/s.*/\1/p')"
      record "$mode-c$c-cpu" "$1" "$(echo "$line" | sed -n 's/.*server CPU \([0-9.]*\) µs\/request.*/\1/p')"
    done
  done
  unset EXPIRATION
}

run_delivery() { # commit bins
  serve "$2" "$work/delivery.json" "$work/serve.log"
  local out
  out=$(taskset -c 1 "$2/courier-load" --light --data "$work/data" --device-port 44223 --binary-port 44195 \
    --devices 10000 --connect-wave 100 --rate 10000 --seconds 10 --count 200000 --server-pid "$pid" 2>&1) || true
  stop
  echo "$out" >> "$logs/delivery-$1.log"
  record delivery-p99 "$1" "$(echo "$out" | grep '^fixed rate' | sed -n 's/.*p99 \([0-9.]*\) ms.*/\1/p' | head -1)"
  record delivery-saturation "$1" "$(echo "$out" | grep '^saturation' | sed -n 's/.*(\([0-9]*\)\/s).*/\1/p' | head -1)"
  record memory-per-device "$1" "$(echo "$out" | sed -n 's/.*: \([0-9.]*\) KiB per connection.*/\1/p' | head -1)"
}

runs=(binary h2 delivery)
for round in $(seq "$rounds"); do
  order=("$base:$bins_base" "$head:$bins_head")
  [ $((round % 2)) -eq 0 ] && order=("$head:$bins_head" "$base:$bins_base")
  for entry in "${order[@]}"; do
    commit=${entry%%:*} bins=${entry#*:}
    for figure in "${runs[@]}"; do
      case " $skip " in *" $figure "*) continue ;; esac
      echo "round $round: $figure, $commit" >&2
      "run_$figure" "$commit" "$bins"
    done
  done
done

# One line per figure: values, the medians' ratio and the spreads.
summary() { # figure
  [ -f "$work/$1.$base" ] || return 0
  python3 - "$1" "$work/$1.$base" "$work/$1.$head" "$base" "$head" <<'PY'
import statistics, sys
figure, base_file, head_file, base, head = sys.argv[1:]
def values(path):
    return [float(v) for v in open(path).read().split() if v]
b, h = values(base_file), values(head_file)
def spread(v):
    return (max(v) - min(v)) / statistics.median(v) * 100 if v and statistics.median(v) else float("nan")
def show(v):
    return " ".join(f"{x:g}" for x in v) or "-"
ratio = statistics.median(h) / statistics.median(b) if b and h and statistics.median(b) else float("nan")
print(f"{figure:<22} {base}: {show(b):<32} {head}: {show(h):<32} ratio {ratio:.3f}   spread {spread(b):.0f}% / {spread(h):.0f}%")
PY
}
echo "ratchet $base -> $head, $rounds rounds ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores)"
for figure in binary h2-c1-rate h2-c1-cpu h2-c8-rate h2-c8-cpu durable-c1-rate durable-c1-cpu durable-c8-rate durable-c8-cpu \
  delivery-p99 delivery-saturation memory-per-device; do
  summary "$figure"
done
