#!/usr/bin/env bash
# Release packages that run where no Swift is installed (docs/packages.md):
#
#   deploy/package.sh [OUT-DIR]          (default: .build-package/out)
#
# Builds the commit checked out (a `git archive` of HEAD: changes not
# committed are not in it, and `courier --version` names that commit) in
# release, with the Swift runtime and Foundation linked in
# (`--static-swift-stdlib`), strips it, checks that `ldd` names no Swift
# library, and makes:
#   courier-<version>-linux-<machine>.tar.gz   the binary, LICENSE, README.md,
#                                              courier.service
#   courier_<version>_<arch>.deb               /usr/bin/courier, the systemd
#       unit, /etc/courier/courier.json (a conffile), a `courier` system user
#       made at install, data in /var/lib/courier; `dpkg --purge` removes all
# with dpkg-deb alone. The build folder (.build-package/build) is kept, so a
# second run builds only what changed. deploy/test-package.sh tests both on
# a bare Debian.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=$(realpath -m "${1:-$repo/.build-package/out}")
for tool in git dpkg-deb dpkg strip ldd; do
  command -v "$tool" >/dev/null || { echo "package.sh: needs $tool" >&2; exit 1; }
done
commit=$(git rev-parse --short=12 HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "package.sh: packaging commit $commit; the changes not committed are not in the package" >&2
fi
version=$(sed -n 's/^ *static let number = "\(.*\)"$/\1/p' Sources/courier/Version.swift)
[ -n "$version" ] || { echo "package.sh: no version in Sources/courier/Version.swift" >&2; exit 1; }
arch=$(dpkg --print-architecture)
machine=$(uname -m)

# The commit's files, with the commit written into `courier --version`.
src=$repo/.build-package/src
rm -rf "$src"
mkdir -p "$src" "$out"
git archive HEAD | tar -x -C "$src"
sed -i "s/^\( *static let commit = \).*/\1\"$commit\"/" "$src/Sources/courier/Version.swift"
build=(swift build -c release --product courier --static-swift-stdlib --scratch-path "$repo/.build-package/build")
echo "package.sh: building courier $version ($commit), release, Swift runtime linked in ..." >&2
(cd "$src" && "${build[@]}" >&2)
binary="$(cd "$src" && "${build[@]}" --show-bin-path)/courier"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
strip -o "$stage/courier" "$binary"
chmod 0755 "$stage/courier"
# Nothing of Swift may be left to load from the system.
libraries=$(ldd "$stage/courier")
if grep -Eiq 'swift|libFoundation|libdispatch|libBlocksRuntime|not found' <<<"$libraries"; then
  echo "package.sh: the binary still needs libraries this package does not carry:" >&2
  echo "$libraries" >&2
  exit 1
fi
"$stage/courier" --version | grep -q "$commit" || { echo "package.sh: courier --version does not name $commit" >&2; exit 1; }

# The tarball.
name=courier-$version-linux-$machine
mkdir "$stage/$name"
cp "$stage/courier" LICENSE README.md deploy/courier.service "$stage/$name/"
tar -C "$stage" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"

# The Debian package. Its dependencies: the packages of the libraries the binary loads.
root=$stage/deb
install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/courier" "$root/usr/share/doc/courier"
install -m 0755 "$stage/courier" "$root/usr/bin/courier"
sed -e 's|^ExecStart=.*|ExecStart=/usr/bin/courier serve --config /etc/courier/courier.json|' \
  -e '/^# Courier as a systemd service/,/^#   journalctl -u courier/c\# Courier as a systemd service, installed by its Debian package (enabled and\n# started at install). The start-up banner (admin token, demo commands) is in\n# the journal: journalctl -u courier' \
  deploy/courier.service > "$root/lib/systemd/system/courier.service"
grep -q '^ExecStart=/usr/bin/courier serve --config /etc/courier/courier.json$' "$root/lib/systemd/system/courier.service"
cat > "$root/etc/courier/courier.json" <<'JSON'
{
  "dataDirectory": "/var/lib/courier"
}
JSON
install -m 0644 LICENSE "$root/usr/share/doc/courier/copyright"
install -m 0644 README.md "$root/usr/share/doc/courier/README.md"
depends=$(awk '$3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$libraries" |
  while read -r library; do dpkg -S "$(realpath "$library")" 2>/dev/null || dpkg -S "$library"; done |
  cut -d: -f1 | sort -u | paste -sd, | sed 's/,/, /g')
[ -n "$depends" ] || { echo "package.sh: found no package for the binary's libraries" >&2; exit 1; }
size=$(du -sk "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: courier
Version: $version
Architecture: $arch
Maintainer: Courier <courier@localhost>
Installed-Size: $size
Depends: $depends, passwd
Section: net
Priority: optional
Description: self-hosted Apple Push Notification service
 Courier speaks APNs' provider APIs (the legacy binary API and its feedback
 service, the HTTP/2 API with certificate and token trust) and delivers to
 devices over its own TLS device protocol, with an admin API, an inbox of
 what was sent, fault injection and a web console.
CONTROL
echo /etc/courier/courier.json > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    if ! getent passwd courier >/dev/null; then
        useradd --system --user-group --home-dir /var/lib/courier --no-create-home --shell /usr/sbin/nologin courier
    fi
    install -d -o courier -g courier -m 0750 /var/lib/courier
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload
        systemctl enable courier.service >/dev/null 2>&1 || true
        systemctl restart courier.service || true
    fi
fi
SCRIPT
cat > "$root/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl stop courier.service || true
    if [ "$1" = remove ]; then systemctl disable courier.service >/dev/null 2>&1 || true; fi
fi
SCRIPT
cat > "$root/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = purge ]; then
    # The data (certificates, keys, the database) goes only with a purge.
    rm -rf /var/lib/courier
    if getent passwd courier >/dev/null; then userdel courier; fi
    if getent group courier >/dev/null; then groupdel courier; fi
fi
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
SCRIPT
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
dpkg-deb --build --root-owner-group "$root" "$out/courier_${version}_${arch}.deb" >/dev/null
echo "$out/$name.tar.gz"
echo "$out/courier_${version}_${arch}.deb"
