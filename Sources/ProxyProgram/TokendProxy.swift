import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import TokendInterface

/// `tokend-proxy`: a local HTTP/1.1 proxy to one upstream that puts the
/// session's access token and cookies on every request, so that programs
/// nobody wants to change (curl, shell scripts, any HTTP library) use
/// tokend's session without glue.
struct TokendProxy: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokend-proxy",
        abstract: "Forward HTTP requests to one upstream with the session's token and cookies.",
        discussion: """
            On a 401 the proxy asks tokend to refresh (naming the token that was refused) and retries \
            once; bodies up to --buffer-limit are kept for that retry, larger ones stream through. \
            On a Unix socket only this user's processes are served (others get 403): run one proxy per \
            user, as that user, and tokend's own access policy decides whether that user gets a token. \
            No web page may use the proxy: a request whose Host is not the address it listens on gets \
            421, one with another origin's Origin or a Sec-Fetch-Site other than same-origin or none \
            gets 403.
            """,
        version: Release.version)

    @Option(help: "The tokend session (default: default).")
    var session: String?
    @Option(help: ArgumentHelp(
        "The resource (RFC 8707) the token is for: one of the session's resources, or \"upstream\" for the --upstream URL as given.",
        discussion: "An MCP server takes only tokens for its own URI: --resource upstream, with that URL in the session's resources."))
    var resource: String?
    @Option(help: "A scope narrower than the session's, space-separated.")
    var scope: String?
    @Option(help: "tokend's socket (default: $TOKEND_SOCKET, else /run/tokend/io.tokend.Broker).")
    var socket: String?
    @Option(help: "Where to listen: unix:PATH, or tcp:127.0.0.1:PORT (any local user can then use it).")
    var listen: String?
    @Option(help: "The upstream base URL, e.g. https://api.example.com (http only to 127.0.0.1 or [::1]).")
    var upstream: String
    @Option(help: "The Unix socket's mode (octal).")
    var mode: String = "0600"
    @Option(help: "Request bodies up to this many bytes are kept so that a 401 can be retried.")
    var bufferLimit: Int = 1 << 20
    @Option(help: "Bytes of request bodies kept across all connections; beyond, bodies stream through.")
    var bodyBudget: Int = 16 << 20
    @Option(help: "Seconds a request body may stall before the client gets 408 and the connection closes.")
    var bodyTimeout: Int = 30
    @Option(help: "Seconds a request head may take, from the connection's start or the previous answer (408 after).")
    var headerTimeout: Int = 10
    @Option(help: "Connections served at once; one more gets 503 and is closed.")
    var maxConnections: Int = 256
    @Option(help: "On TCP, connections one local user's programs are served at once (default: half of --max-connections).")
    var maxConnectionsPerUser: Int?
    @Option(help: "Seconds the upstream may take to accept a connection, to take the next request bytes, to start its answer, or between its answer's bytes (504 after); an event stream's bytes are bound by --stream-idle-timeout instead.")
    var timeout: Int = 60
    @Option(help: ArgumentHelp(
        "Seconds an event stream (text/event-stream: MCP's streamable HTTP, server-sent events) may stay silent between its bytes before it is closed.",
        discussion: "A stream that sends is never cut; one that has said nothing for this long is closed, and its client reconnects."))
    var streamIdleTimeout: Int = 300
    @Option(help: ArgumentHelp(
        "Who may use the proxy on TCP: own (this user's programs, and those of its /etc/subuid range) or all (every local user).",
        discussion: "Default: own for a session a user added, all for one tokend.toml configures. A session a user added is served to its owner only, whatever this says. On a Unix socket only this user is served."))
    var peers: PeerRule.Setting?
    @Option(help: "Idle upstream connections kept for the next requests (all together).")
    var keepalive: Int = 64
    @Option(help: "Seconds an idle upstream connection is kept.")
    var keepaliveTimeout: Int = 60
    @Option(help: "Seconds exchanges under way have to finish after SIGTERM or SIGINT.")
    var stopTimeout: Int = 10
    @Flag(help: "The upstream's Set-Cookie goes to the client, not to tokend's cookie jar.")
    var passCookies = false

    func validate() throws {
        guard bufferLimit >= 0, bodyBudget >= 0 else { throw ValidationError("--buffer-limit and --body-budget must be 0 or more") }
        guard [bodyTimeout, headerTimeout, timeout, streamIdleTimeout, keepaliveTimeout].allSatisfy((1...86_400).contains) else {
            throw ValidationError(
                "--body-timeout, --header-timeout, --timeout, --stream-idle-timeout and --keepalive-timeout must be 1 to 86400 seconds")
        }
        guard (0...86_400).contains(stopTimeout) else { throw ValidationError("--stop-timeout must be 0 to 86400 seconds") }
        guard (0...65_536).contains(keepalive) else { throw ValidationError("--keepalive must be 0 to 65536") }
        guard (1...65_536).contains(maxConnections) else { throw ValidationError("--max-connections must be 1 to 65536") }
        if let maxConnectionsPerUser, !(1...maxConnections).contains(maxConnectionsPerUser) {
            throw ValidationError("--max-connections-per-user must be 1 to --max-connections")
        }
    }

    func run() async throws {
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        var logger = Logger(label: "tokend-proxy")
        logger.logLevel = .info
        guard let base = Upstream(upstream) else {
            throw ValidationError("--upstream must be an https URL (or http to 127.0.0.1 or [::1]): \(upstream)")
        }
        let address: ListenAddress
        if let listen {
            guard let parsed = ListenAddress(listen, mode: mode) else {
                throw ValidationError("--listen must be unix:PATH or tcp:127.0.0.1:PORT (loopback only): \(listen)")
            }
            address = parsed
        } else if let inherited = ListenAddress.systemd() {
            address = inherited
        } else {
            throw ValidationError("--listen is required (or start tokend-proxy from a systemd socket)")
        }
        let proxy = Proxy(
            upstream: base, session: session, resource: resource == "upstream" ? upstream : resource, scope: scope,
            tokendSocket: socket, bufferLimit: bufferLimit, bodyBudget: bodyBudget,
            bodyTimeout: .seconds(Int64(bodyTimeout)), headerTimeout: .seconds(Int64(headerTimeout)),
            maxConnections: maxConnections, timeout: .seconds(Int64(timeout)), streamIdleTimeout: .seconds(Int64(streamIdleTimeout)),
            peers: peers, keepalive: keepalive,
            keepaliveTimeout: .seconds(Int64(keepaliveTimeout)), stopTimeout: .seconds(Int64(stopTimeout)), passCookies: passCookies,
            maxConnectionsPerUser: maxConnectionsPerUser ?? max(1, maxConnections / 2), logger: logger)
        do {
            try await proxy.run(on: address)
        } catch let refused as ListenRefused {
            throw ValidationError(
                "the socket systemd passed is bound to \(refused.address), which other hosts can reach: they would get "
                    + "the session's token; bind it to a loopback address (ListenStream=127.0.0.1:PORT or [::1]:PORT) "
                    + "or to a path")
        }
    }
}

/// tokend-proxy, as its program runs it (Sources/tokend-proxy/main.swift, and the multi-call tokend).
public func runTokendProxy() async { await TokendProxy.main() }
