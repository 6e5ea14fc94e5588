#!/usr/bin/env bash
# Several hosts on one machine: PostgreSQL and N Courier nodes, each in a
# network namespace of its own, and load generators in namespaces of their
# own, all on one bridge that lives in a namespace too. Every address is one
# this script makes inside its namespaces (10.77.0.0/16); nothing is sent
# anywhere else, and the machine's own namespace is not touched. Everything
# is removed when the script ends, also when it is interrupted.
#
#   Benchmarks/cluster/hosts.sh NODES LOADS COMMAND [ARGS...]   (from the repository)
#
# starts the hosts, runs COMMAND (in the machine's namespace, with the
# variables below exported and the functions below available to a sourced
# script: `source` this file with HOSTS_LIBRARY=1 to use them directly), and
# tears everything down when it returns. The hosts:
#   crdb      10.77.0.2     PostgreSQL on port 5432 (user courier, trust)
#   crnodeK   10.77.0.1K    node K (1..NODES): courier serve, ports 40000-40004
#             (production binary, feedback, http2, device, channels), admin
#             8080 (HTTPS, the server certificate names every node's address)
#   crloadJ   10.77.1J.1-S  load generator J (1..LOADS), with SOURCES addresses
# Exported: CLUSTER_DIR (the nodes' data and logs), CLUSTER_NODES, NODE_HOSTS
# ("10.77.0.11 10.77.0.12 ..."), LOAD_NAMESPACES, LOAD_SOURCES_<J>.
# Functions: in_ns NS CMD... (runs CMD in namespace NS), cut_node K / heal_node K
# (the node's host loses / regains every route to PostgreSQL and the other
# nodes: blackhole routes in its namespace, so its packets to them are
# dropped; its devices and providers still reach it), node_pid K,
# kill_node K (SIGKILL), start_node K.
#
# Environment: COURIER (Benchmarks/.build/release/courier), SOURCES (4),
# DEVICES_PER_NODE (20000: the device listener's limit), NODE_TIMEOUT (5 s,
# cluster.nodeTimeout), HEARTBEAT (1 s), DIRECT (true: cluster.directHandOver),
# POSTGRES_BIN (Debian's newest).
# Needs: root (ip netns), iproute2, PostgreSQL's server binaries, runuser.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
courier=${COURIER:-$PWD/Benchmarks/.build/release/courier}
sources=${SOURCES:-4}
bin=${POSTGRES_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
prefix=c$(( $$ % 100000 ))
bridge_ns=${prefix}net

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# The namespaces made so far, for the teardown.
made=()
node_pids=()

teardown() {
  local pid ns
  for pid in "${node_pids[@]}"; do [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true; done
  if [ -n "${CLUSTER_DIR:-}" ] && [ -f "$CLUSTER_DIR/pg/data/postmaster.pid" ]; then
    in_ns "${prefix}db" runuser -u postgres -- "$bin/pg_ctl" -D "$CLUSTER_DIR/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  # Whatever still runs in a namespace (a load generator, say) ends with it.
  for ns in "${made[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  [ -n "${CLUSTER_DIR:-}" ] && [ -z "${KEEP:-}" ] && rm -rf "$CLUSTER_DIR"
  return 0
}

# A host: its namespace, a veth pair whose other end is on the bridge, its addresses.
add_host() { # name address...
  local ns=${prefix}$1; shift
  ip netns add "$ns"; made+=("$ns")
  ip link add "$ns-e" type veth peer name eth0 netns "$ns"
  ip link set "$ns-e" netns "$bridge_ns"
  in_ns "$bridge_ns" ip link set "$ns-e" master br0 up
  in_ns "$ns" ip link set lo up
  in_ns "$ns" ip link set eth0 up
  local address
  for address in "$@"; do in_ns "$ns" ip addr add "$address/16" dev eth0; done
}

node_address() { echo "10.77.0.$((10 + $1))"; }

node_config() { # K
  local addresses="" other
  for other in $(seq "$CLUSTER_NODES"); do addresses="$addresses${addresses:+, }\"$(node_address "$other")\""; done
  cat <<JSON
{"network": {"host": "$(node_address "$1")", "serverIPAddresses": [$addresses],
             "production": {"binary": 40000, "feedback": 40001, "http2": 40002, "device": 40003, "channels": 40004},
             "sandbox": {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0},
             "adminHost": "$(node_address "$1")", "adminPort": 8080},
 "logLevel": "warning", "qos": {"tokenRateLimit": 1000000000}, "inbox": {"capacity": ${INBOX_CAPACITY:-10000}},
 "connections": {"maxPerAddress": 20000, "maxPerDeviceListener": ${DEVICES_PER_NODE:-20000}, "maxPerSandboxDeviceListener": 100, "maxPerListener": 200},
 "store": {"kind": "postgresql", "host": "10.77.0.2", "port": 5432, "database": "courier", "user": "courier"},
 "cluster": {"node": "node$1", "nodeTimeout": ${NODE_TIMEOUT:-5}, "heartbeatInterval": ${HEARTBEAT:-1}, "directHandOver": ${DIRECT:-true}}}
JSON
}

start_node() { # K: in its namespace, with the first node's data (its CA and keys) when there is one
  local k=$1 data=$CLUSTER_DIR/node$1
  node_config "$k" > "$CLUSTER_DIR/node$k.json"
  if [ "$k" != 1 ] && [ ! -d "$data" ]; then cp -a "$CLUSTER_DIR/node1" "$data"; fi
  (ulimit -n "$(ulimit -Hn)"; exec ip netns exec "${prefix}node$k" "$courier" serve --data "$data" --config "$CLUSTER_DIR/node$k.json") \
    >> "$CLUSTER_DIR/node$k.log" 2>&1 &
  node_pids[$k]=$!
  local _
  for _ in $(seq 600); do
    grep -q "Courier is running" "$CLUSTER_DIR/node$k.log" 2>/dev/null && return 0
    kill -0 "${node_pids[$k]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "hosts.sh: node $k did not start" >&2; cat "$CLUSTER_DIR/node$k.log" >&2; return 1
}

node_pid() { echo "${node_pids[$1]}"; }
kill_node() { kill -KILL "${node_pids[$1]}"; wait "${node_pids[$1]}" 2>/dev/null || true; }

# The node's host loses (add) or regains (del) every route to PostgreSQL and to the other nodes.
blackhole() { # add|del K
  local change=$1 k=$2 other
  in_ns "${prefix}node$k" ip route "$change" blackhole 10.77.0.2/32
  for other in $(seq "$CLUSTER_NODES"); do
    [ "$other" = "$k" ] || in_ns "${prefix}node$k" ip route "$change" blackhole "$(node_address "$other")/32"
  done
}
cut_node() { blackhole add "$1"; }
heal_node() { blackhole del "$1"; }

start_hosts() { # NODES LOADS
  local nodes=$1 loads=$2 k j s
  command -v ip >/dev/null || { echo "hosts.sh: needs iproute2 (ip)" >&2; return 1; }
  [ -x "$bin/initdb" ] || { echo "hosts.sh: no PostgreSQL server binaries (apt-get install postgresql, or POSTGRES_BIN=DIR)" >&2; return 1; }
  [ -x "$courier" ] || { echo "hosts.sh: no courier at $courier (cd Benchmarks && swift build -c release --product courier)" >&2; return 1; }
  ip netns add "$bridge_ns" 2>/dev/null || { echo "hosts.sh: cannot make network namespaces here (root and ip netns needed)" >&2; return 1; }
  made+=("$bridge_ns")
  in_ns "$bridge_ns" ip link add br0 type bridge
  in_ns "$bridge_ns" ip link set br0 up
  export CLUSTER_DIR CLUSTER_NODES=$nodes
  CLUSTER_DIR=$(mktemp -d)
  chmod 755 "$CLUSTER_DIR"

  add_host db 10.77.0.2
  mkdir "$CLUSTER_DIR/pg"
  chown postgres "$CLUSTER_DIR/pg" 2>/dev/null || true
  as_postgres "$bin/initdb" -D "$CLUSTER_DIR/pg/data" -U courier --auth=trust -E UTF8 > /dev/null
  echo "host all all 10.77.0.0/16 trust" >> "$CLUSTER_DIR/pg/data/pg_hba.conf"
  in_ns "${prefix}db" runuser -u postgres -- "$bin/pg_ctl" -D "$CLUSTER_DIR/pg/data" -l "$CLUSTER_DIR/pg/log" -w \
    -o "-p 5432 -k $CLUSTER_DIR/pg -c listen_addresses=10.77.0.2 -c max_connections=400" start > /dev/null
  in_ns "${prefix}db" runuser -u postgres -- "$bin/createdb" -h 10.77.0.2 -p 5432 -U courier courier

  NODE_HOSTS=""
  for k in $(seq "$nodes"); do
    add_host "node$k" "$(node_address "$k")"
    NODE_HOSTS="$NODE_HOSTS $(node_address "$k")"
  done
  export NODE_HOSTS=${NODE_HOSTS# }
  # The first node makes the data (CA, keys, schema); the others start from a copy.
  for k in $(seq "$nodes"); do start_node "$k"; done

  LOAD_NAMESPACES=""
  for j in $(seq "$loads"); do
    local addresses=()
    for s in $(seq "$sources"); do addresses+=("10.77.$((10 + j)).$s"); done
    add_host "load$j" "${addresses[@]}"
    LOAD_NAMESPACES="$LOAD_NAMESPACES ${prefix}load$j"
    export "LOAD_SOURCES_$j=$(IFS=,; echo "${addresses[*]}")"
  done
  export LOAD_NAMESPACES=${LOAD_NAMESPACES# }
}

if [ -z "${HOSTS_LIBRARY:-}" ]; then
  [ $# -ge 3 ] || { echo "usage: Benchmarks/cluster/hosts.sh NODES LOADS COMMAND [ARGS...]" >&2; exit 2; }
  nodes=$1 loads=$2; shift 2
  trap teardown EXIT
  trap 'exit 130' INT TERM
  start_hosts "$nodes" "$loads"
  export -f in_ns node_address
  "$@"
fi
