#!/usr/bin/env bash
# HTTP/2 provider API throughput: h2load against Courier (JWT trust, every
# request checked) and, in the same run, against nginx answering 200 to the
# same request over TLS and HTTP/2: the ceiling of this machine; and against
# h2-floor (Benchmarks/H2Floor), the same answer from a server on Courier's
# own stack (swift-nio-ssl, swift-nio-http2) with Courier's settings: its
# floor, with NIO's stream multiplexer (floor-mux) and with the frames taken
# on the connection as Courier takes them (floor-conn).
#
# usage: Benchmarks/h2load/compare.sh [REQUESTS]        (from the repository)
#        EXPIRATION=<unix time> ... : apns-expiration (default 0); one in the
#        future makes every push durable (committed before its 200: the
#        demo device is not connected)
#        ONLY=courier ... : Courier alone (builds compared before and after)
#        LIVE_ACTIVITY=1 ... : Live Activity updates (push type liveactivity to
#        the app's .push-type.liveactivity topic) to an update token the demo
#        device asked for, and then disconnected
#        UNINSTALLED=1 ... : pushes to the demo app's token after the demo
#        device reported the app removed (each answered 410 Unregistered)
#        VIRTUAL=1 ... : pushes to a virtual device (a random token of Apple's
#        format registered to the demo app: docs/virtual-devices.md)
#        CONNECTED=1 ... : the demo device stays connected (courier device run),
#        reading and acknowledging every push
#        SERVER_CPU=0 LOAD_CPU=1 ... : the server pinned to one core and
#        h2load to another (Benchmarks/ratchet.sh)
# needs: h2load (Debian nghttp2-client), nginx, openssl; a release build:
#        swift build -c release --product courier; for the floor,
#        cd Benchmarks && swift build -c release --product h2-floor
#        (H2FLOOR=path; left out, with a line saying so, when not built)
set -euo pipefail
cd "$(dirname "$0")/../.."
requests=${1:-200000}
courier=${COURIER:-.build/release/courier}
work=$(mktemp -d)
trap 'kill $(cat "$work"/*.pid 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT

# Courier on fixed ports, without the per-token rate limit (h2load repeats one token).
cat > "$work/courier.json" <<JSON
{
  "network": {
    "production": { "binary": 42195, "feedback": 42196, "http2": 42197, "device": 45223, "channels": 45198 },
    "sandbox": { "binary": 52195, "feedback": 52196, "http2": 52197, "device": 55223, "channels": 55198 },
    "adminPort": 0
  },
  "qos": { "tokenRateLimit": 1000000000 },
  "logLevel": "warning"
}
JSON
# FIT_CONFIG=1: an older build's copy leaves out the keys it does not know (Benchmarks/fit-config.py).
[ -n "${FIT_CONFIG:-}" ] && python3 Benchmarks/fit-config.py "$courier" "$work/courier.json"
server_pin=() load_pin=()
[ -n "${SERVER_CPU:-}" ] && server_pin=(taskset -c "$SERVER_CPU")
[ -n "${LOAD_CPU:-}" ] && load_pin=(taskset -c "$LOAD_CPU")
"${server_pin[@]}" "$courier" serve --data "$work/data" --config "$work/courier.json" > "$work/courier.log" 2>&1 &
echo $! > "$work/courier.pid"
for _ in $(seq 100); do grep -q "Courier is running" "$work/courier.log" && break; sleep 0.1; done

# The demo team's key and the demo device's token, as the banner gives them;
# the JWT made with openssl as Apple documents it.
TEAM_ID=$(sed -n 's/^TEAM_ID=//p' "$work/courier.log")
AUTH_KEY_ID=$(sed -n 's/^AUTH_KEY_ID=//p' "$work/courier.log")
DEVICE_TOKEN=$(sed -n 's/^DEVICE_TOKEN=//p' "$work/courier.log")
TOKEN_KEY_FILE_NAME="$work/data/demo/AuthKey_${AUTH_KEY_ID}.p8"
JWT_HEADER=$(printf '{ "alg": "ES256", "kid": "%s" }' "${AUTH_KEY_ID}" | openssl base64 -e -A | tr -- '+/' '-_' | tr -d =)
JWT_CLAIMS=$(printf '{ "iss": "%s", "iat": %d }' "${TEAM_ID}" "$(date +%s)" | openssl base64 -e -A | tr -- '+/' '-_' | tr -d =)
JWT_SIGNED=$(printf "${JWT_HEADER}.${JWT_CLAIMS}" | openssl dgst -binary -sha256 -sign "${TOKEN_KEY_FILE_NAME}" | openssl base64 -e -A | tr -- '+/' '-_' | tr -d =)
JWT="${JWT_HEADER}.${JWT_CLAIMS}.${JWT_SIGNED}"
printf '{"aps":{"alert":"benchmark"}}' > "$work/payload.json"
topic=com.example.demo push_type=alert token=$DEVICE_TOKEN
if [ -n "${LIVE_ACTIVITY:-}" ]; then
  "$courier" device run --identity "$work/data/demo/device" --app com.example.demo --port 45223 --live-activities 1 > "$work/device.log" 2>&1 &
  echo $! > "$work/device.pid"
  for _ in $(seq 100); do grep -q "^live activity" "$work/device.log" && break; sleep 0.1; done
  token=$(sed -n 's/^live activity [0-9]* token //p' "$work/device.log")
  kill "$(cat "$work/device.pid")" && rm "$work/device.pid"
  [ -n "$token" ] || { echo "the demo device got no Live Activity token:" >&2; cat "$work/device.log" >&2; exit 1; }
  topic=com.example.demo.push-type.liveactivity push_type=liveactivity
  printf '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}' > "$work/payload.json"
fi
if [ -n "${VIRTUAL:-}" ]; then
  # A virtual device (docs/virtual-devices.md): a random token of Apple's format, registered to the demo app.
  token=$(openssl rand -hex 32)
  "$courier" virtual add --data "$work/data" --app com.example.demo "$token" > "$work/virtual.log" 2>&1 ||
    { echo "the virtual token was not registered:" >&2; cat "$work/virtual.log" >&2; exit 1; }
fi
if [ -n "${CONNECTED:-}" ]; then
  # The demo device connected through the runs, reading (and acknowledging) every notification.
  "$courier" device run --identity "$work/data/demo/device" --app com.example.demo --port 45223 > /dev/null 2> "$work/device.log" &
  echo $! > "$work/device.pid"
  for _ in $(seq 100); do grep -q "connected" "$work/device.log" && break; sleep 0.1; done
fi
if [ -n "${UNINSTALLED:-}" ]; then
  "$courier" device uninstall --identity "$work/data/demo/device" --app com.example.demo --port 45223 > "$work/device.log" 2>&1 ||
    { echo "the demo device could not report the app removed:" >&2; cat "$work/device.log" >&2; exit 1; }
fi

# nginx: TLS 1.3, HTTP/2, 200 for every POST /3/device/..., one worker per core.
mkdir -p "$work/nginx"
cat > "$work/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  server {
    listen 127.0.0.1:48443 ssl http2;
    ssl_certificate $work/data/pki/server.pem;
    ssl_certificate_key $work/data/pki/server-key.pem;
    http2_max_concurrent_streams 1000;
    keepalive_requests 100000000;
    location /3/device/ { return 200; }
  }
}
CONF
[ "${ONLY:-}" = courier ] || nginx -c "$work/nginx.conf" -p "$work/nginx"

# h2-floor, both ways, each pinned as Courier is.
floor=${H2FLOOR:-Benchmarks/.build/release/h2-floor}
floors=()
if [ "${ONLY:-}" != courier ]; then
  if [ -x "$floor" ]; then
    for mode in multiplexer connection; do
      port=$([ "$mode" = multiplexer ] && echo 48444 || echo 48445)
      "${server_pin[@]}" "$floor" --data "$work/data" --port "$port" --mode "$mode" > "$work/floor-$mode.log" 2>&1 &
      echo $! > "$work/floor-$mode.pid"
      for _ in $(seq 100); do grep -q "listening" "$work/floor-$mode.log" && break; sleep 0.1; done
      floors+=("$mode:$port")
    done
  else
    echo "h2-floor not built ($floor): the floor left out (cd Benchmarks && swift build -c release --product h2-floor)"
  fi
fi

# CPU time (user + system, clock ticks) of the processes whose pids are given.
cpu_ticks() {
  local total=0 pid
  for pid in "$@"; do
    total=$(( total + $(awk '{print $14 + $15}' "/proc/$pid/stat") ))
  done
  echo "$total"
}
server_pids() { # name
  case "$1" in
    courier) cat "$work/courier.pid" ;;
    floor-mux) cat "$work/floor-multiplexer.pid" ;;
    floor-conn) cat "$work/floor-connection.pid" ;;
    *) pgrep -f "nginx: worker process" | tr '\n' ' ' ;;
  esac
}

run() { # name url connections
  local out
  local threads=$(( $3 < $(nproc) ? $3 : $(nproc) ))
  local pids before after
  pids=$(server_pids "$1")
  # shellcheck disable=SC2086
  before=$(cpu_ticks $pids)
  out=$("${load_pin[@]}" h2load -n "$requests" -c "$3" -m 100 -t "$threads" -d "$work/payload.json" --log-file "$work/$1-$3.tsv" \
    -H "apns-topic: $topic" -H "apns-expiration: ${EXPIRATION:-0}" -H "apns-push-type: $push_type" \
    -H "authorization: bearer $JWT" "$2/3/device/$token")
  # shellcheck disable=SC2086
  after=$(cpu_ticks $pids)
  local rps ok percentiles cpu
  rps=$(echo "$out" | sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p')
  ok=$(echo "$out" | sed -n 's/^status codes: \([0-9]*\) 2xx, [0-9]* 3xx, \([0-9]*\) 4xx.*/\1 2xx, \2 4xx/p')
  # h2load's log: start (µs), status, µs until the response ended. p50 and p99 from it.
  percentiles=$(cut -f3 "$work/$1-$3.tsv" | sort -n | awk '{a[NR]=$1} END {printf "p50 %.2f ms, p99 %.2f ms", a[int(NR*0.50)]/1000, a[int(NR*0.99)]/1000}')
  # The server's CPU time per request, in microseconds (steadier than the rate on a shared machine).
  cpu=$(awk -v t=$(( after - before )) -v hz="$(getconf CLK_TCK)" -v n="$requests" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
  echo "$1 c=$3 m=100: $rps req/s, $percentiles, server CPU $cpu µs/request, $ok of $requests"
}
sleep 0.5
for c in 1 8; do
  run courier "https://127.0.0.1:42197" "$c"
  [ "${ONLY:-}" = courier ] || run nginx "https://127.0.0.1:48443" "$c"
  for entry in "${floors[@]}"; do
    name=floor-mux
    [ "${entry%%:*}" = connection ] && name=floor-conn
    run "$name" "https://127.0.0.1:${entry##*:}" "$c"
  done
done
