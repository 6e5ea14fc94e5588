#!/usr/bin/env bash
# Another device's delivery with and without a device flooding KeepAlives
# (Benchmarks/faults/device-flood.py), alternated in one sitting:
#
#   Benchmarks/faults/device-flood.sh COURIER_BIN_DIR [ROUNDS]
#
# COURIER_BIN_DIR holds release builds of `courier` and `courier-load`
# (Benchmarks/.build/release). Each round runs the delivery load twice, once
# alone and once with the flooder started 8 s in (the order swapped every
# other round): `courier serve` on core 0, `courier-load --light --devices
# 1000 --connect-wave 100 --rate 10000 --seconds 20 --count 100000` on core 1,
# the flooder unpinned (at nice 19 unless NICE says otherwise) for 20 s.
# Prints each run's p99 at 10,000/s and the flooder's counts, then the medians.
# Loopback only; needs taskset and python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
bins=$1
rounds=${2:-4}
# The flooder stands for a device elsewhere: by default it runs at the lowest
# priority, so that its own CPU (a core, reconnecting as fast as it can) does
# not take the two cores from the server and the load; NICE=0 shares them.
niceness=${NICE:-19}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

run() { # flood: yes or no; prints the p99 in ms
  rm -rf "$work/data"
  taskset -c 0 "$bins/courier" serve --data "$work/data" --config Benchmarks/delivery.json > "$work/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q "Courier is running" "$work/serve.log" && break; sleep 0.1; done
  local flooder=
  if [ "$1" = yes ]; then
    (sleep 8 && exec nice -n "$niceness" python3 Benchmarks/faults/device-flood.py "$work/data/demo/device" 44223 20 > "$work/flood.log" 2>&1) &
    flooder=$!
  fi
  local out
  out=$(taskset -c 1 "$bins/courier-load" --light --data "$work/data" --device-port 44223 --binary-port 44195 \
    --devices 1000 --connect-wave 100 --rate 10000 --seconds 20 --count 100000 2>&1) || true
  [ -n "$flooder" ] && { kill "$flooder" 2>/dev/null; pkill -f device-flood.py 2>/dev/null || true; wait "$flooder" 2>/dev/null || true; }
  kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=
  if [ "$1" = yes ]; then echo "  flooder: $(tail -1 "$work/flood.log")" >&2; fi
  echo "$out" | grep '^fixed rate' | sed -n 's/.*p99 \([0-9.]*\) ms.*/\1/p' | head -1
}

for round in $(seq "$rounds"); do
  order=(no yes)
  [ $((round % 2)) -eq 0 ] && order=(yes no)
  for flood in "${order[@]}"; do
    p99=$(run "$flood")
    echo "round $round, flood $flood: p99 $p99 ms"
    echo "$p99" >> "$work/$flood"
  done
done
python3 - "$work/no" "$work/yes" <<'PY'
import statistics, sys
without, with_ = ([float(v) for v in open(p).read().split() if v] for p in sys.argv[1:])
print(f"median p99 without the flood {statistics.median(without):.2f} ms, with it {statistics.median(with_):.2f} ms "
      f"(difference {statistics.median(with_) - statistics.median(without):+.2f} ms, {len(without)} runs each)")
PY
