#!/bin/bash
# Builds tokend_VERSION_amd64.deb from the release binaries.
#   packaging/deb/build.sh BINDIR OUTDIR
# BINDIR holds tokend built against the Swift runtime's shared libraries with the
# run path /usr/lib/tokend (the Makefile's deb target). It is all four programs,
# chosen by the name it runs as: the package installs it once, as /usr/sbin/tokend,
# and tokenctl, tokend-proxy and tokend-native-host as links to it, so the code they
# share is there once; and the runtime libraries once, in that private directory.
# A static runtime in each of four binaries weighed 274 MiB.
# Where the bytes go and the commands behind the figures: docs/packaging.md.
set -euo pipefail
bindir=${1:?usage: build.sh BINDIR OUTDIR}
out=${2:?usage: build.sh BINDIR OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=0.1.0-1
# What the package may not pass (issue 55's bounds): installed, in KiB (40,068 when they were set,
# docs/packaging.md), and to download, in bytes (10,088,660 then).
limit_kib=40960  # 40 MiB
limit_download=15000000
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/tokend
libdir=usr/lib/tokend
programs="usr/sbin/tokend"

install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/sbin" "$pkg/$libdir"
install -m 0755 "$bindir/tokend" "$pkg/usr/sbin/"
for name in tokenctl tokend-native-host tokend-proxy; do
    ln -s ../sbin/tokend "$pkg/usr/bin/$name"
done
for program in $programs; do
    # Linked against the shared runtime, found in /usr/lib/tokend only (no $ORIGIN, no static copy).
    # swiftc puts the toolchain's own directory first in the run path; the package's is the only one.
    chrpath -r "/$libdir" "$pkg/$program" >/dev/null
    runpath=$(readelf -d "$pkg/$program" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
    if [ "$runpath" != "/$libdir" ] || ! readelf -d "$pkg/$program" | grep -q '(NEEDED).*\[libswiftCore\.so\]'; then
        echo "$program: run path '$runpath', not /$libdir, or a static Swift runtime (build with the Makefile's deb target)" >&2
        exit 1
    fi
done

# The Swift runtime libraries the programs need, and the ones those need: each
# once, from the toolchain that built them; none that nothing needs.
runtime=$(swiftc -print-target-info | python3 -c 'import json,sys; print(json.load(sys.stdin)["paths"]["runtimeLibraryPaths"][0])')
needed() { readelf -d "$@" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u; }
todo=$(for p in $programs; do needed "$pkg/$p"; done | sort -u)
while [ -n "$todo" ]; do
    next=""
    for lib in $todo; do
        [ -e "$runtime/$lib" ] && [ ! -e "$pkg/$libdir/$lib" ] || continue
        install -m 0644 "$runtime/$lib" "$pkg/$libdir/"
        next="$next $(needed "$runtime/$lib")"
    done
    todo=$(echo $next | tr ' ' '\n' | sort -u)
done
strip --strip-unneeded --remove-section=.comment --remove-section=.note $(for p in $programs; do echo "$pkg/$p"; done) \
    "$pkg/$libdir"/*.so

# Units (the binary lives in /usr/sbin here), sysusers, configuration.
install -d "$pkg/lib/systemd/system" "$pkg/usr/lib/systemd/user" "$pkg/usr/lib/sysusers.d" "$pkg/etc/tokend"
for unit in tokend.socket tokend.service; do
    sed 's|/usr/local/bin/tokend|/usr/sbin/tokend|' "$root/systemd/$unit" > "$pkg/lib/systemd/system/$unit"
    sed 's|/usr/local/bin/tokend|/usr/sbin/tokend|' "$root/systemd/user/$unit" > "$pkg/usr/lib/systemd/user/$unit"
done
for unit in tokend-proxy.socket tokend-proxy.service; do
    sed 's|/usr/local/bin/tokend-proxy|/usr/bin/tokend-proxy|' "$root/systemd/user/$unit" > "$pkg/usr/lib/systemd/user/$unit"
done
# The desktop's sign-in notifier: a user unit of graphical-session.target, and
# an autostart entry for desktops that do not reach it.
sed 's|/usr/local/bin/tokenctl|/usr/bin/tokenctl|' "$root/systemd/user/tokend-agent.service" \
    > "$pkg/usr/lib/systemd/user/tokend-agent.service"
install -d "$pkg/etc/xdg/autostart"
install -m 0644 "$root/etc/xdg/autostart/tokend-agent.desktop" "$pkg/etc/xdg/autostart/"
chmod 0644 "$pkg"/lib/systemd/system/* "$pkg"/usr/lib/systemd/user/*
install -m 0644 "$root/systemd/tokend.sysusers.conf" "$pkg/usr/lib/sysusers.d/tokend.conf"
install -m 0644 "$root/etc/tokend/tokend.toml" "$pkg/etc/tokend/tokend.toml"

# The browser bridge: host manifests (Chromium reads /etc, Firefox /usr/lib/mozilla), extension, page helper.
install -d "$pkg/etc/chromium/native-messaging-hosts" "$pkg/usr/lib/mozilla/native-messaging-hosts" \
    "$pkg/usr/share/tokend/extension"
sed 's|@BINDIR@|/usr/bin|' "$root/web/native-host/io.tokend.bridge.chromium.json" \
    > "$pkg/etc/chromium/native-messaging-hosts/io.tokend.bridge.json"
sed 's|@BINDIR@|/usr/bin|' "$root/web/native-host/io.tokend.bridge.firefox.json" \
    > "$pkg/usr/lib/mozilla/native-messaging-hosts/io.tokend.bridge.json"
chmod 0644 "$pkg/etc/chromium/native-messaging-hosts/io.tokend.bridge.json" \
    "$pkg/usr/lib/mozilla/native-messaging-hosts/io.tokend.bridge.json"
install -m 0644 "$root"/web/extension/* "$pkg/usr/share/tokend/extension/"
install -m 0644 "$root/web/tokend-page.js" "$root/web/tokend-fetch.js" "$pkg/usr/share/tokend/"

# Manuals, completions, documentation.
install -d "$pkg/usr/share/man/man1" "$pkg/usr/share/man/man5" "$pkg/usr/share/man/man8"
gzip -9n < "$root/man/tokenctl.1" > "$pkg/usr/share/man/man1/tokenctl.1.gz"
gzip -9n < "$root/man/tokend.toml.5" > "$pkg/usr/share/man/man5/tokend.toml.5.gz"
gzip -9n < "$root/man/tokend.8" > "$pkg/usr/share/man/man8/tokend.8.gz"
gzip -9n < "$root/man/tokend-native-host.1" > "$pkg/usr/share/man/man1/tokend-native-host.1.gz"
gzip -9n < "$root/man/tokend-proxy.1" > "$pkg/usr/share/man/man1/tokend-proxy.1.gz"
install -d "$pkg/usr/share/bash-completion/completions" "$pkg/usr/share/zsh/vendor-completions" \
    "$pkg/usr/share/fish/vendor_completions.d"
# (bash completion files are sourced, not run: no #! line)
# (tokenctl is the build's tokend run by that name; the toolchain's libraries are in its run path)
ln -s "$(readlink -f "$bindir/tokend")" "$stage/tokenctl"
"$stage/tokenctl" --generate-completion-script bash | sed '1{/^#!/d}' > "$pkg/usr/share/bash-completion/completions/tokenctl"
"$stage/tokenctl" --generate-completion-script zsh > "$pkg/usr/share/zsh/vendor-completions/_tokenctl"
"$stage/tokenctl" --generate-completion-script fish > "$pkg/usr/share/fish/vendor_completions.d/tokenctl.fish"
chmod 0644 "$pkg"/usr/share/*/completions/* "$pkg"/usr/share/zsh/vendor-completions/* "$pkg"/usr/share/fish/vendor_completions.d/*
install -d "$pkg/usr/share/doc/tokend"
install -m 0644 "$here/copyright" "$pkg/usr/share/doc/tokend/copyright"
gzip -9n < "$here/changelog" > "$pkg/usr/share/doc/tokend/changelog.Debian.gz"

# Maintainer scripts, conffiles, control (Depends from the binaries' shared libraries).
install -m 0755 "$here/postinst" "$here/prerm" "$here/postrm" "$pkg/DEBIAN/"
(cd "$pkg" && find etc -type f | sort | sed 's|^|/|') > "$pkg/DEBIAN/conffiles"
mkdir -p "$stage/debian"
printf 'Source: tokend\n\nPackage: tokend\nArchitecture: any\n' > "$stage/debian/control"
# (the libraries in /usr/lib/tokend are the package's own: -S finds them there)
depends=$(cd "$stage" && dpkg-shlibdeps -O -Stokend $(for p in $programs $(cd "$pkg" && echo $libdir/*.so); do echo "-etokend/$p"; done) \
    2>/dev/null | sed -n 's/^shlibs:Depends=//p')
if [ -z "$depends" ]; then
    echo "dpkg-shlibdeps found no dependencies" >&2
    exit 1
fi
# Packed relative relocations (DT_RELR, the Makefile's DEB_SWIFTFLAGS) need glibc 2.36's loader; the
# program names the version GLIBC_ABI_DT_RELR, which dpkg-shlibdeps does not count.
if readelf -V "$pkg/usr/sbin/tokend" | grep -q GLIBC_ABI_DT_RELR; then
    depends=$(echo "$depends" | sed 's/libc6 (>= [0-9.]*)/libc6 (>= 2.36)/')
fi
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
# The bound: Foundation and ICU's data back in /usr/lib/tokend (47.7 MB), or a static runtime, fail it.
echo "installed size: $size KiB (limit $limit_kib KiB)"
if [ "$size" -gt "$limit_kib" ]; then
    echo "tokend's package is over its limit of $limit_kib KiB installed (docs/packaging.md)" >&2
    exit 1
fi
sed -e "s|@VERSION@|$version|" -e "s|@SIZE@|$size|" -e "s|@DEPENDS@|$depends|" "$here/control.in" > "$pkg/DEBIAN/control"
find "$pkg" -type d -exec chmod 0755 {} +
mkdir -p "$out"
fakeroot dpkg-deb --build -Zxz "$pkg" "$out/tokend_${version}_amd64.deb" >/dev/null
download=$(stat -c %s "$out/tokend_${version}_amd64.deb")
echo "$out/tokend_${version}_amd64.deb: $download bytes to download (limit $limit_download)"
if [ "$download" -gt "$limit_download" ]; then
    echo "tokend's package is over its limit of $limit_download bytes to download (docs/packaging.md)" >&2
    exit 1
fi
