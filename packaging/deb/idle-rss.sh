#!/bin/bash
# tokend's resident memory when idle: one session (the integration tests'
# minimal configuration, its token endpoint not reachable), 10 s after its
# socket answers; VmRSS from /proc.
#   packaging/deb/idle-rss.sh TOKEND        (LD_LIBRARY_PATH as the binary needs it)
set -euo pipefail
tokend=${1:?usage: idle-rss.sh TOKEND}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
install -m 0600 /dev/null "$dir/client-secret"
echo secret > "$dir/client-secret"
cat > "$dir/tokend.toml" <<TOML
[daemon]
socket = "$dir/sock"
state-directory = "$dir/state"
[sessions.default]
token-endpoint = "http://127.0.0.1:9/o/token/"
client-id = "tokend-test"
client-secret-file = "$dir/client-secret"
TOML
"$tokend" --config "$dir/tokend.toml" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -S "$dir/sock" ] && break; sleep 0.1; done
[ -S "$dir/sock" ] || { cat "$dir/log" >&2; exit 1; }
sleep 10
grep -E '^(VmRSS|RssAnon|RssFile)' "/proc/$pid/status"
