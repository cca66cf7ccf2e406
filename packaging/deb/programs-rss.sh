#!/bin/bash
# The resident memory of each program of an unpacked package, as docs/packaging.md
# reports it: tokend idle (idle-rss.sh's configuration, 10 s after its socket
# answers), tokenctl's peak for --help and for `status` against that tokend, the
# native host 2 s after it starts, and tokend-proxy 2 s after it first answers.
#   dpkg-deb -x .build/deb/tokend_*.deb /tmp/x
#   packaging/deb/programs-rss.sh /tmp/x [RUNS]
# (The package's programs find their libraries in /usr/lib/tokend; here
# LD_LIBRARY_PATH points at the unpacked copy.)
set -euo pipefail
root=$(cd "${1:?usage: programs-rss.sh UNPACKED-ROOT [RUNS]}" && pwd)
runs=${2:-5}
export LD_LIBRARY_PATH=$root/usr/lib/tokend
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$dir"' EXIT
kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status"; }

echo "tokend idle (VmRSS kB): $(for _ in $(seq "$runs"); do
    "$here/idle-rss.sh" "$root/usr/sbin/tokend" | sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p'; done | tr '\n' ' ')"

# One tokend for the clients below, configured as idle-rss.sh's.
. "$here/idle-session.sh"
idle_session "$dir"
"$root/usr/sbin/tokend" --config "$dir/tokend.toml" >"$dir/log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do [ -S "$dir/sock" ] && break; sleep 0.1; done
[ -S "$dir/sock" ] || { cat "$dir/log" >&2; exit 1; }

peak() { for _ in $(seq "$runs"); do /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -n 1; done | tr '\n' ' '; }
echo "tokenctl --help (peak kB): $(peak "$root/usr/bin/tokenctl" --help)"
echo "tokenctl status (peak kB): $(peak "$root/usr/bin/tokenctl" status --socket "$dir/sock")"

host=""
for _ in $(seq "$runs"); do
    sleep 60 | TOKEND_SOCKET=$dir/sock "$root/usr/bin/tokend-native-host" chrome-extension://eidjeejmieedlnhkabcigeekkgfpheoa/ &
    pid=$!
    sleep 2
    host="$host $(kb "$pid")"
    kill "$pid"
done
echo "tokend-native-host idle (VmRSS kB):$host"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
proxy=""
for _ in $(seq "$runs"); do
    "$root/usr/bin/tokend-proxy" --socket "$dir/sock" --listen "tcp:127.0.0.1:$port" --upstream http://127.0.0.1:9 \
        >/dev/null 2>&1 &
    pid=$!
    until curl -so /dev/null "http://127.0.0.1:$port/"; do sleep 0.1; done
    sleep 2
    proxy="$proxy $(kb "$pid")"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done
echo "tokend-proxy idle (VmRSS kB):$proxy"
