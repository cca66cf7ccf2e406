#!/bin/bash
# Builds tokend-webview_VERSION_amd64.deb from the static-stdlib release binary.
#   packaging/deb-webview/build.sh BINDIR OUTDIR
set -euo pipefail
bindir=${1:?usage: build.sh BINDIR OUTDIR}
out=${2:?usage: build.sh BINDIR OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=0.1.0-1
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/tokend-webview

install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/share/man/man1" "$pkg/usr/share/doc/tokend-webview"
install -m 0755 "$bindir/tokend-webview" "$pkg/usr/bin/"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$pkg/usr/bin/tokend-webview"
gzip -9n < "$root/man/tokend-webview.1" > "$pkg/usr/share/man/man1/tokend-webview.1.gz"
install -m 0644 "$root/packaging/deb/copyright" "$pkg/usr/share/doc/tokend-webview/copyright"
gzip -9n < "$here/changelog" > "$pkg/usr/share/doc/tokend-webview/changelog.Debian.gz"

mkdir -p "$stage/debian"
printf 'Source: tokend-webview\n\nPackage: tokend-webview\nArchitecture: any\n' > "$stage/debian/control"
depends=$(cd "$stage" && dpkg-shlibdeps -O -e tokend-webview/usr/bin/tokend-webview 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@SIZE@|$size|" -e "s|@DEPENDS@|$depends|" "$here/control.in" > "$pkg/DEBIAN/control"
find "$pkg" -type d -exec chmod 0755 {} +
mkdir -p "$out"
fakeroot dpkg-deb --build -Zxz "$pkg" "$out/tokend-webview_${version}_amd64.deb" >/dev/null
echo "$out/tokend-webview_${version}_amd64.deb"
