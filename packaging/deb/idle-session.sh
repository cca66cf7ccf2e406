# Sourced by idle-rss.sh and programs-rss.sh: the one-session configuration they
# measure tokend with (the integration tests' minimal one; its token endpoint is
# not reachable, so nothing is logged in and nothing refreshes).
#   idle_session DIR     writes DIR/tokend.toml and DIR/client-secret
idle_session() {
    install -m 0600 /dev/null "$1/client-secret"
    echo secret > "$1/client-secret"
    cat > "$1/tokend.toml" <<TOML
[daemon]
socket = "$1/sock"
state-directory = "$1/state"
[sessions.default]
token-endpoint = "http://127.0.0.1:9/o/token/"
client-id = "tokend-test"
client-secret-file = "$1/client-secret"
TOML
}
