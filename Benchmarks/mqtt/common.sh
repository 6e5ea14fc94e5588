# Shared by compare.sh and server-latency.sh, which source it once they have
# set name, courier, load, devices, tools (the commands they need) and
# packages (Debian's packages that have them). Checks those, and writes into
# a new temporary directory, $dir (removed on exit, with the server whose
# pid is in $pid): the broker's certificate from a CA of its own (ca.pem),
# mosquitto.conf (a TLS listener on 8883, persistence off) and courier.json
# (the defaults but for room for $devices devices on one listener and no
# token rate limit).
for tool in $tools; do
  command -v "$tool" >/dev/null || { echo "$name: needs $tool (apt-get install $packages)" >&2; exit 1; }
done
[ -x "$courier" ] || { echo "$name: no courier at $courier (cd Benchmarks && swift build -c release --product courier)" >&2; exit 1; }
[ -x "$load" ] || { echo "$name: no courier-load at $load (cd Benchmarks && swift build -c release --product courier-load)" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)"

dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
  -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
  -keyout "$dir/broker-key.pem" -out "$dir/broker.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$dir/san.ext"
openssl x509 -req -in "$dir/broker.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -CAcreateserial -days 2 \
  -extfile "$dir/san.ext" -out "$dir/broker.pem" 2>/dev/null
chmod 644 "$dir"/*.pem
cat > "$dir/mosquitto.conf" <<CONF
listener 8883 127.0.0.1
cafile $dir/ca.pem
certfile $dir/broker.pem
keyfile $dir/broker-key.pem
allow_anonymous true
persistence false
set_tcp_nodelay true
max_queued_messages 100000
log_type error
user $(id -un)
CONF

cat > "$dir/courier.json" <<JSON
{"logLevel": "warning", "qos": {"tokenRateLimit": 1000000000},
 "connections": {"maxPerAddress": 20000, "maxPerDeviceListener": $devices, "maxPerSandboxDeviceListener": 100, "maxPerListener": 50}}
JSON
