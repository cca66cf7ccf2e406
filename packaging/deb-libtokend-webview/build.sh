#!/bin/bash
# Builds libtokend-webview1, libtokend-webview-dev and gir1.2-tokendwebview-1
# (VERSION_amd64.deb) from libtokend-webview-1's build tree (make webview-c).
#   packaging/deb-libtokend-webview/build.sh TREE OUTDIR     (TREE: webview/.build-c)
set -euo pipefail
tree=${1:?usage: build.sh TREE OUTDIR}
out=${2:?usage: build.sh TREE OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
upstream=0.1.0
version=$upstream-1
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=usr/lib/$multiarch
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# Common to the three: the copyright and the changelog, the control file.
package() {  # NAME SECTION DEPENDS DESCRIPTION(first line) DESCRIPTION(body, file)
    local name=$1 pkg=$stage/$1
    install -d "$pkg/DEBIAN" "$pkg/usr/share/doc/$name"
    install -m 0644 "$root/packaging/deb/copyright" "$pkg/usr/share/doc/$name/copyright"
    gzip -9n < "$here/changelog" > "$pkg/usr/share/doc/$name/changelog.Debian.gz"
    {
        echo "Package: $name"
        echo "Source: libtokend-webview"
        echo "Version: $version"
        echo "Architecture: amd64"
        echo "Multi-Arch: same"
        echo "Maintainer: tokend developers <tokend@lists.example.org>"
        echo "Installed-Size: $(du -sk --exclude=DEBIAN "$pkg" | cut -f1)"
        echo "Depends: $3"
        [ -n "${6:-}" ] && echo "$6"
        echo "Section: $2"
        echo "Priority: optional"
        echo "Homepage: https://tokend.example.org/"
        echo "Description: $4"
        cat "$here/$5"
    } > "$pkg/DEBIAN/control"
    find "$pkg" -type d -exec chmod 0755 {} +
    fakeroot dpkg-deb --build -Zxz "$pkg" "$out/${name}_${version}_amd64.deb" >/dev/null
    echo "$out/${name}_${version}_amd64.deb"
}

mkdir -p "$out" "$stage/debian"
printf 'Source: libtokend-webview\n\nPackage: libtokend-webview1\nArchitecture: any\n' > "$stage/debian/control"

# libtokend-webview1: the library and its two backends (the Swift core, one build per WebKitGTK API).
lib=$stage/libtokend-webview1
install -d "$lib/$libdir/tokend-webview-1" "$lib/DEBIAN"
install -m 0644 "$tree/lib/libtokend-webview.so.1" "$lib/$libdir/"
install -m 0644 "$tree"/lib/tokend-webview-1/libtokend-webview-{6,4.1}.so "$lib/$libdir/tokend-webview-1/"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$lib/$libdir/libtokend-webview.so.1" \
    "$lib/$libdir"/tokend-webview-1/*.so
# The cores' limit: each is the Swift core with the runtime and FoundationEssentials inside, and no
# more. Foundation, FoundationInternationalization or ICU's data in one (a DateFormatter, a FileHandle
# is enough to bring them) would make it 58 MB; the build fails instead (figures: webview/lib/README.md).
limit=$((16 << 20))
for core in "$lib/$libdir"/tokend-webview-1/*.so; do
    name=tokend-webview-1/$(basename "$core")
    # (grep reads all of nm's output: with -q, nm's SIGPIPE would fail the pipeline under pipefail)
    if nm "$tree/lib/$name" | grep -E ' (icudt[0-9]+_dat|\$s10Foundation|\$s31FoundationInternationalization|\$s13_FoundationICU)' >/dev/null; then
        echo "$name links Foundation, FoundationInternationalization or ICU: the core is on FoundationEssentials only" >&2
        exit 1
    fi
    size=$(stat -c %s "$core")
    echo "$name: $size bytes stripped (limit $limit)"
    if [ "$size" -gt "$limit" ]; then
        echo "$name is over the limit of 16 MiB" >&2
        exit 1
    fi
done
echo "libtokend-webview 1 libtokend-webview1 (>= $upstream)" > "$lib/DEBIAN/shlibs"
echo "activate-noawait ldconfig" > "$lib/DEBIAN/triggers"
chmod 0644 "$lib/DEBIAN/shlibs" "$lib/DEBIAN/triggers"
# A backend is loaded only into a process that has its WebKitGTK already (the library checks),
# so the package needs neither WebKitGTK: of its files' dependencies it names GLib (the library's)
# and those of the Swift runtime inside the backends (libc, libstdc++, libgcc).
depends=$(cd "$stage" && dpkg-shlibdeps -O -elibtokend-webview1/$libdir/libtokend-webview.so.1 \
    -elibtokend-webview1/$libdir/tokend-webview-1/libtokend-webview-6.so \
    -elibtokend-webview1/$libdir/tokend-webview-1/libtokend-webview-4.1.so 2>/dev/null \
    | sed -n 's/^shlibs:Depends=//p' | tr ',' '\n' | sed 's/^ *//' \
    | grep -E '^(libc6|libglib2\.0-0|libstdc\+\+6|libgcc-s1)( |$)' | paste -sd, | sed 's/,/, /g')
package libtokend-webview1 libs "$depends" \
    "tokend as the native side of any GTK app's web view" description-lib \
    "Enhances: libwebkitgtk-6.0-4, libwebkit2gtk-4.1-0"

# libtokend-webview-dev: header, pkg-config file (tokend-webview-1), the .so link, the GIR XML.
dev=$stage/libtokend-webview-dev
install -d "$dev/usr/include/tokend-webview-1" "$dev/$libdir/pkgconfig" "$dev/usr/share/gir-1.0"
install -m 0644 "$root/webview/lib/tokend-webview.h" "$dev/usr/include/tokend-webview-1/"
ln -s libtokend-webview.so.1 "$dev/$libdir/libtokend-webview.so"
sed -e "s|@PREFIX@|/usr|" -e "s|@LIBDIR@|\${prefix}/lib/$multiarch|" "$root/webview/lib/tokend-webview-1.pc.in" \
    > "$dev/$libdir/pkgconfig/tokend-webview-1.pc"
install -m 0644 "$tree/share/gir-1.0/TokendWebView-1.gir" "$dev/usr/share/gir-1.0/"
chmod 0644 "$dev/$libdir/pkgconfig/tokend-webview-1.pc"
package libtokend-webview-dev libdevel \
    "libtokend-webview1 (= $version), gir1.2-tokendwebview-1 (= $version), libglib2.0-dev" \
    "tokend as the native side of a web view - development files" description-dev

# gir1.2-tokendwebview-1: the typelib (namespace TokendWebView, version 1).
gir=$stage/gir1.2-tokendwebview-1
install -d "$gir/$libdir/girepository-1.0"
install -m 0644 "$tree/lib/girepository-1.0/TokendWebView-1.typelib" "$gir/$libdir/girepository-1.0/"
package gir1.2-tokendwebview-1 introspection "libtokend-webview1 (= $version), gir1.2-glib-2.0" \
    "tokend as the native side of a web view - GObject introspection data" description-gir
