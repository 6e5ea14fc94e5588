#!/usr/bin/env bash
# Binary-raw pushes to a virtual token, two builds alternated (three rounds),
# the server on core 0 and the load on core 1: BASE and HEAD are commits whose
# release builds Benchmarks/ratchet.sh made under .build-ratchet/<commit>.
# usage: Benchmarks/virtual/pair.sh BASE HEAD        (from the repository)
set -e
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
cat > $work/c.json <<JSON
{"logLevel": "warning", "qos": {"tokenRateLimit": 1000000000}, "network": {"adminPort": 0,
 "production": {"binary": 43195, "feedback": 43196, "http2": 43197, "device": 43223, "channels": 43198},
 "sandbox": {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}}}
JSON
for round in 1 2 3; do
for c in "$1" "$2"; do
  b=.build-ratchet/$c/Benchmarks/.build/release
  rm -rf $work/data
  taskset -c 0 $b/courier serve --data $work/data --config $work/c.json > $work/s.log 2>&1 &
  pid=$!
  for i in $(seq 300); do grep -q "Courier is running" $work/s.log && break; sleep 0.1; done
  t=$(openssl rand -hex 32)
  $b/courier virtual add --data $work/data --app com.example.demo $t > /dev/null
  r=$(taskset -c 1 $b/courier-load --mode binary-raw --data $work/data --binary-port 43195 --device-port 43223 --count 2000000 --token $t 2>&1 | sed -n 's/.*(\([0-9]*\)\/s).*/\1/p' | tail -1)
  kill $pid; wait $pid 2>/dev/null || true
  echo "$round $c $r"
done; done
rm -rf $work
