#!/usr/bin/env bash
# Tests the release packages (deploy/package.sh) on a bare Debian: a system
# made with debootstrap into a folder (minbase: no Swift, no compiler, no
# curl), entered with chroot. Needs root.
#
#   deploy/test-package.sh DEB TARBALL
#
# The Debian package installs (the `courier` user, /var/lib/courier),
# `courier --version` names its commit, `ldd` finds every library and none
# of Swift; `courier serve` starts as the unit starts it (user courier,
# /etc/courier/courier.json); the banner's curl command, run from outside,
# is answered 200 and its notification reaches `courier device run`; the
# package is purged and nothing of it is left. Then the tarball's binary
# runs there too: its version, and a server that starts and stops.
#
# Environment: DEBIAN_SUITE (bookworm), DEBIAN_MIRROR
# (http://deb.debian.org/debian). The system is kept in
# .build-package/debian and reused by the next run.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: deploy/test-package.sh DEB TARBALL" >&2; exit 2; }
deb=$(realpath "$1")
tarball=$(realpath "$2")
cd "$(dirname "$0")/.."
repo=$PWD
fail() { echo "test-package.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot)"
for tool in curl openssl; do command -v "$tool" >/dev/null || fail "needs $tool"; done
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

root=$repo/.build-package/debian
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ ! -x "$root/usr/bin/dpkg" ]; then
  echo "test-package.sh: debootstrap $suite (minbase) into $root ..." >&2
  rm -rf "$root.new"
  debootstrap --variant=minbase "$suite" "$root.new" "$mirror" >"$repo/.build-package/debootstrap.log" 2>&1 ||
    fail "debootstrap failed; see .build-package/debootstrap.log"
  mv "$root.new" "$root"
fi
# What an installed Debian has and a folder debootstrap made does not: the
# loopback names (the demo device's identity names localhost).
[ -s "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
for tool in swift swiftc cc gcc clang curl; do
  if chroot "$root" sh -c "command -v $tool" >/dev/null 2>&1; then fail "the bare system has $tool"; fi
done

work=$(mktemp -d)
server=
device_pid=
cleanup() {
  if [ -n "$server" ]; then kill -TERM -- "-$server" 2>/dev/null || true; fi
  if [ -n "$device_pid" ]; then kill -TERM -- "-$device_pid" 2>/dev/null || true; fi
  umount -l "$root/dev" 2>/dev/null || true
  umount -l "$root/proc" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
# What an earlier run that failed may have left.
chroot "$root" dpkg --purge courier >/dev/null 2>&1 || true
rm -rf "$root"/opt/courier-* "$root/tmp/courier-tarball"

# Waits (60 s at most) until FILE has a line matching PATTERN.
wait_for() {
  local file=$1 pattern=$2
  for _ in $(seq 600); do
    if grep -q -- "$pattern" "$file" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "--- $file" >&2
  cat "$file" >&2
  fail "no line '$pattern' in 60 s"
}

# Starts a command in the bare system in its own process group: `server` is its id.
start() {
  local log=$1
  shift
  setsid chroot "$root" "$@" >"$log" 2>&1 &
  server=$!
}

stop() {
  kill -TERM -- "-$server"
  wait "$server" || true
  server=
}

# The Debian package.
cp "$deb" "$root/tmp/courier.deb"
chroot "$root" dpkg -i /tmp/courier.deb >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i failed"; }
chroot "$root" getent passwd courier >/dev/null || fail "no courier user after the install"
[ "$(chroot "$root" stat -c %U:%G:%a /var/lib/courier)" = courier:courier:750 ] || fail "/var/lib/courier is not courier's (0750)"
version=$(chroot "$root" courier --version)
echo "test-package.sh: installed: $version" >&2
grep -Eq '^courier [0-9.]+ \(commit [0-9a-f]{12}\)$' <<<"$version" || fail "courier --version printed '$version'"
libraries=$(chroot "$root" ldd /usr/bin/courier)
if grep -Eiq 'swift|not found' <<<"$libraries"; then echo "$libraries" >&2; fail "ldd: a library is missing or of Swift"; fi

start "$work/serve.log" runuser -u courier -- courier serve --config /etc/courier/courier.json
wait_for "$work/serve.log" "Courier is running"
grep -q "^  courier device run --identity /var/lib/courier/demo/device" "$work/serve.log" || fail "the banner's device command is not 'courier device run'"
setsid chroot "$root" runuser -u courier -- courier device run --identity /var/lib/courier/demo/device --app com.example.demo >"$work/device.log" 2>&1 &
device_pid=$!
wait_for "$work/device.log" "token"
# The banner's curl recipe, run from outside with the data directory's paths seen from there.
sed -n '/^TEAM_ID=/,/^curl -v/p' "$work/serve.log" | sed "s#'/var/lib/courier/#'$root/var/lib/courier/#g" >"$work/curl.sh"
grep -q '^curl -v' "$work/curl.sh" || fail "no curl command in the banner"
bash "$work/curl.sh" >"$work/curl.out" 2>"$work/curl.err" || { cat "$work/curl.err" >&2; fail "the banner's curl command failed"; }
grep -q '< HTTP/2 200' "$work/curl.err" || { cat "$work/curl.err" >&2; fail "the push was not answered 200"; }
wait_for "$work/device.log" "Hello from curl"
kill -TERM -- "-$device_pid" 2>/dev/null || true
wait "$device_pid" 2>/dev/null || true
device_pid=
stop
grep -q "Courier stopped" "$work/serve.log" || fail "courier serve did not stop on SIGTERM"

chroot "$root" dpkg --purge courier >"$work/purge.log" 2>&1 || { cat "$work/purge.log" >&2; fail "dpkg --purge failed"; }
for path in /usr/bin/courier /lib/systemd/system/courier.service /etc/courier /var/lib/courier /usr/share/doc/courier; do
  [ ! -e "$root$path" ] || fail "$path is left after the purge"
done
if chroot "$root" getent passwd courier >/dev/null; then fail "the courier user is left after the purge"; fi
if chroot "$root" getent group courier >/dev/null; then fail "the courier group is left after the purge"; fi

# The tarball.
tar -xzf "$tarball" -C "$root/opt"
binary=$(cd "$root" && ls opt/courier-*/courier)
chroot "$root" "/$binary" --version | grep -q "$version" || fail "the tarball's courier --version differs from the package's"
for file in LICENSE README.md courier.service; do [ -f "$root/$(dirname "$binary")/$file" ] || fail "the tarball has no $file"; done
start "$work/tarball.log" "/$binary" serve --data /tmp/courier-tarball
wait_for "$work/tarball.log" "Courier is running"
stop
rm -rf "$root"/opt/courier-* "$root/tmp/courier-tarball" "$root/tmp/courier.deb"
echo "test-package.sh: the package and the tarball work on a bare Debian $suite" >&2
