#!/usr/bin/env bash
# What virtual devices cost (docs/virtual-devices.md): the server's memory
# and the store's size with N virtual tokens registered (default 1,000,000,
# in requests of 100,000 through `courier virtual add`), and a start that
# loads them all, against a start with none.
#
# usage: Benchmarks/virtual/memory.sh [N]        (from the repository)
#        SERVER_CPU=0 LOAD_CPU=1 ... : the server pinned to one core, the rest to another
# needs: a release build (swift build -c release --product courier), python3
set -euo pipefail
cd "$(dirname "$0")/../.."
count=${1:-1000000}
courier=${COURIER:-.build/release/courier}
work=$(mktemp -d)
trap 'kill $(cat "$work"/*.pid 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
server_pin=() load_pin=()
[ -n "${SERVER_CPU:-}" ] && server_pin=(taskset -c "$SERVER_CPU")
[ -n "${LOAD_CPU:-}" ] && load_pin=(taskset -c "$LOAD_CPU")
cat > "$work/courier.json" <<JSON
{
  "network": {
    "production": { "binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0 },
    "sandbox": { "binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0 },
    "adminPort": 0
  },
  "logLevel": "warning"
}
JSON

start() {
  local started=$(date +%s.%N)
  "${server_pin[@]}" "$courier" serve --data "$work/data" --config "$work/courier.json" > "$work/courier.log" 2>&1 &
  echo $! > "$work/courier.pid"
  for _ in $(seq 600); do grep -q "Courier is running" "$work/courier.log" && break; sleep 0.1; done
  grep -q "Courier is running" "$work/courier.log" || { cat "$work/courier.log" >&2; exit 1; }
  echo "$(date +%s.%N) - $started" | bc
}
stop() {
  kill "$(cat "$work/courier.pid")"
  while kill -0 "$(cat "$work/courier.pid")" 2>/dev/null; do sleep 0.1; done
  rm "$work/courier.pid"
}
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$(cat "$work/courier.pid")/status"; }
size() { du -k "$work/data/courier.sqlite"* | awk '{s += $1} END {print s}'; }

start > /dev/null
stop
seconds=$(start)
sleep 1
empty=$(rss)
empty_size=$(size)
echo "a start with no virtual token: ${seconds} s to 'running', ${empty} KiB resident, store ${empty_size} KiB"

python3 - "$work" "$count" <<'PY'
import secrets, sys
work, count = sys.argv[1], int(sys.argv[2])
per = 100_000
for part in range((count + per - 1) // per):
    with open(f"{work}/tokens-{part:03d}.txt", "w") as file:
        for _ in range(min(per, count - part * per)):
            file.write(secrets.token_hex(32) + "\n")
PY
began=$(date +%s.%N)
for file in "$work"/tokens-*.txt; do
  "${load_pin[@]}" "$courier" virtual add --data "$work/data" --app com.example.demo --file "$file" > /dev/null
done
added=$(echo "$(date +%s.%N) - $began" | bc)
sleep 1
after=$(rss)
echo "registered $count in $added s (requests of 100,000): ${after} KiB resident ($(( (after - empty) * 1024 / count )) bytes a token more than at the empty start), store $(size) KiB ($(( ($(size) - empty_size) * 1024 / count )) bytes a token)"

stop
seconds=$(start)
sleep 1
loaded=$(rss)
echo "a start that loads them: ${seconds} s to 'running', ${loaded} KiB resident ($(( (loaded - empty) * 1024 / count )) bytes a token more than the empty start)"
# One of them, pushed to after the restart: taken (HTTP 200).
first=$(head -1 "$work/tokens-000.txt")
port=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ports"]["http2.production"])' "$work/data/ports.json")
status=$(curl -s -o /dev/null -w '%{http_code}' --http2 --cacert "$work/data/pki/ca.pem" --cert "$work/data/demo/com.example.demo.pem" \
  --key "$work/data/demo/com.example.demo-key.pem" -H 'apns-topic: com.example.demo' -d '{"aps":{"alert":"hi"}}' "https://localhost:$port/3/device/$first")
echo "a push to the first token after the restart: HTTP $status"
stop
