#!/usr/bin/env bash
# CPU used each second by PostgreSQL's processes and by the `courier serve`
# nodes, in hundredths of a core (100: one core busy), until interrupted.
# Run beside measure.sh to see where a phase's CPU goes:
#
#   Benchmarks/cluster/cpu.sh > cpu.log & RATE=5000 COUNT=50000 Benchmarks/cluster/measure.sh 3 3000; kill %1
#
# Processes that start or end within a second make that second's figures wrong.
set -euo pipefail
ticks() {
  local total=0 pid
  for pid in $(pgrep "$@" || true); do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
previous_pg=$(ticks -x postgres)
previous_courier=$(ticks -f "courier serve")
while sleep 1; do
  pg=$(ticks -x postgres)
  courier=$(ticks -f "courier serve")
  echo "$(date +%T) postgresql $((pg - previous_pg)) courier $((courier - previous_courier))"
  previous_pg=$pg
  previous_courier=$courier
done
