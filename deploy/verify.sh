#!/usr/bin/env bash
# Checks deploy/courier.service with systemd-analyze verify, its ExecStart
# pointed at the given courier binary (the unit names /usr/local/bin/courier).
#   deploy/verify.sh PATH-TO-COURIER
set -euo pipefail
courier=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|/usr/local/bin/courier|$courier|" "$(dirname "$0")/courier.service" > "$dir/courier.service"
# verify prints what is wrong and exits non-zero on an error; warnings fail too.
out=$(systemd-analyze verify "$dir/courier.service" 2>&1) || { echo "$out"; exit 1; }
if [ -n "$out" ]; then echo "$out"; exit 1; fi
echo "deploy/courier.service: systemd-analyze verify found nothing"
