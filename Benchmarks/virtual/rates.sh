#!/usr/bin/env bash
# Pushes to a virtual device beside the same runs to a real device
# (docs/virtual-devices.md, docs/benchmarks.md "Virtual devices"), with the
# server on core 0 and the load on core 1, ROUNDS times alternated:
#   binary   courier-load --mode binary-raw --count N (expiration 0) to
#            - a virtual token (taken at once),
#            - the load device's token, offline (each expires: the ratchet's binary figure),
#            - the load device's token, connected (it reads and acknowledges each);
#   h2       Benchmarks/h2load/compare.sh, Courier alone, one and eight
#            connections: VIRTUAL=1, the demo device offline, CONNECTED=1.
#
# usage: Benchmarks/virtual/rates.sh        (from the repository)
#        ROUNDS=3 COUNT=2000000 REQUESTS=200000 ...
# needs: release builds in Benchmarks/.build/release (cd Benchmarks &&
#        swift build -c release --product courier-load && swift build -c release --product courier),
#        h2load (Debian nghttp2-client), openssl
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
count=${COUNT:-2000000}
requests=${REQUESTS:-200000}
bins=${BINS:-Benchmarks/.build/release}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
cat > "$work/binary.json" <<JSON
{"logLevel": "warning", "qos": {"tokenRateLimit": 1000000000}, "network": {"adminPort": 0,
 "production": {"binary": 43195, "feedback": 43196, "http2": 43197, "device": 43223, "channels": 43198},
 "sandbox": {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}}}
JSON

serve() {
  rm -rf "$work/data"
  taskset -c 0 "$bins/courier" serve --data "$work/data" --config "$work/binary.json" > "$work/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q "Courier is running" "$work/serve.log" && return 0; sleep 0.1; done
  cat "$work/serve.log" >&2
  return 1
}
stop() { kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=; }
rate() { sed -n 's/.*all handled in [0-9.]* s (\([0-9]*\)\/s).*/\1/p' | tail -1; }

binary() { # kind
  serve
  local out extra=()
  case "$1" in
    virtual)
      local token
      token=$(openssl rand -hex 32)
      "$bins/courier" virtual add --data "$work/data" --app com.example.demo "$token" > /dev/null
      extra=(--token "$token") ;;
    connected) extra=(--connected) ;;
    offline) ;;
  esac
  out=$(taskset -c 1 "$bins/courier-load" --mode binary-raw --data "$work/data" --binary-port 43195 --device-port 43223 --count "$count" "${extra[@]}" 2>&1) || true
  stop
  echo "binary $1: $(echo "$out" | rate)/s$(echo "$out" | sed -n 's/^connected device: \(.*\)/; the device: \1/p')"
}

h2() { # kind
  local env=()
  case "$1" in
    virtual) env=(VIRTUAL=1) ;;
    connected) env=(CONNECTED=1) ;;
    offline) ;;
  esac
  env "${env[@]}" FIT_CONFIG=1 ONLY=courier COURIER="$bins/courier" SERVER_CPU=0 LOAD_CPU=1 Benchmarks/h2load/compare.sh "$requests" 2>&1 |
    sed -n "s/^courier \(c=[0-9]*\) m=100: /h2 $1 \1: /p"
}

for round in $(seq "$rounds"); do
  echo "round $round"
  for kind in virtual offline connected; do binary "$kind"; done
  for kind in virtual offline connected; do h2 "$kind"; done
done
