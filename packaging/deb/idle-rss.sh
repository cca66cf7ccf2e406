#!/bin/bash
# tokend's resident memory when idle: one session (the integration tests'
# minimal configuration, its token endpoint not reachable), 10 s after its
# socket answers; VmRSS from /proc.
#   packaging/deb/idle-rss.sh TOKEND        (LD_LIBRARY_PATH as the binary needs it)
set -euo pipefail
tokend=${1:?usage: idle-rss.sh TOKEND}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
. "$(dirname "$0")/idle-session.sh"
idle_session "$dir"
"$tokend" --config "$dir/tokend.toml" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -S "$dir/sock" ] && break; sleep 0.1; done
[ -S "$dir/sock" ] || { cat "$dir/log" >&2; exit 1; }
sleep 10
grep -E '^(VmRSS|RssAnon|RssFile)' "/proc/$pid/status"
