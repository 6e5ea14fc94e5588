#!/usr/bin/env bash
# schemathesis (PyPI) against a real `courier serve` and the OpenAPI document
# it serves (docs/admin-api.md), for a bounded number of examples per
# operation: no 5xx, no answer outside the schema. .ci/run runs it.
#   Tests/Admin/schemathesis.sh PATH-TO-COURIER PATH-TO-SCHEMATHESIS [EXAMPLES]
set -euo pipefail
courier=$1
schemathesis=$2
examples=${3:-25}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
cat > "$dir/config.json" <<JSON
{"network": {"adminPort": 0,
  "production": {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0},
  "sandbox": {"binary": 0, "feedback": 0, "http2": 0, "device": 0, "channels": 0}},
 "logLevel": "warning"}
JSON
"$courier" serve --data "$dir/data" --config "$dir/config.json" > "$dir/out" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q "Courier is running" "$dir/out" && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/out"; exit 1; }
  sleep 0.1
done
line=$(grep "^Admin API: " "$dir/out")
url=$(echo "$line" | sed -E 's/^Admin API: (http:[^ ]+) .*/\1/')
token=$(echo "$line" | sed -E 's/.*\(token: ([0-9a-f]+)\).*/\1/')
# A wait without a timeout waits 30 s: the generated waits get 1 s.
cat > "$dir/schemathesis.toml" <<TOML
[[operations]]
include-path = "/v1/inbox/wait"
parameters = { timeout = 1 }
# The inbox's event stream never ends by design (the console's live tail):
# ConsoleTests and the browser tests read it.
[[operations]]
include-path = "/v1/inbox/stream"
enabled = false
# An imported key's p8 must be a real P-256 key, which no schema can say:
# schema-valid text that is not one is rightly 422.
[[operations]]
include-path-regex = "^/v1/teams/.*/keys$"
checks = { positive_data_acceptance = { expected-statuses = ["2XX", "401", "403", "404", "409", "422"] } }
TOML
echo "schemathesis against $url"
"$schemathesis" --config-file "$dir/schemathesis.toml" run "$url/openapi.json" --url "$url" -H "Authorization: Bearer $token" \
  --checks all --max-examples "$examples" --seed 20261125 --workers 1 --request-timeout 60
