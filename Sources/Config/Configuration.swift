#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Loopback

/// tokend's configuration, validated.
public struct Configuration: Sendable, Equatable {
    public var daemon: DaemonSettings
    public var access = AccessSettings()
    /// Who may add sessions of their own ([user-sessions]).
    public var userSessions = UserSessionSettings()
    /// Sorted by name.
    public var sessions: [SessionSettings]

    public init(daemon: DaemonSettings, sessions: [SessionSettings]) {
        self.daemon = daemon
        self.sessions = sessions
    }
}

/// Who may call what. Entries are user or group names, or numeric ids; nil
/// means "not set here". Classes nest: admins (Login, Logout) may also write
/// cookies, and cookie writers (ImportCookies) may also read.
public struct AccessSettings: Sendable, Equatable {
    /// nil: root and the user tokend runs as.
    public var adminUsers: [String]?
    public var adminGroups: [String]?
    public var cookiesWriteUsers: [String]?
    public var cookiesWriteGroups: [String]?
    public var readUsers: [String]?
    /// nil: the group tokend runs as (the socket's group under systemd).
    public var readGroups: [String]?

    public init() {}

    /// These settings where set, `base` elsewhere (a session's [access] over the global one).
    public func over(_ base: AccessSettings) -> AccessSettings {
        var merged = base
        merged.adminUsers = adminUsers ?? base.adminUsers
        merged.adminGroups = adminGroups ?? base.adminGroups
        merged.cookiesWriteUsers = cookiesWriteUsers ?? base.cookiesWriteUsers
        merged.cookiesWriteGroups = cookiesWriteGroups ?? base.cookiesWriteGroups
        merged.readUsers = readUsers ?? base.readUsers
        merged.readGroups = readGroups ?? base.readGroups
        return merged
    }
}

public struct DaemonSettings: Sendable, Equatable {
    public var socket = "/run/tokend/io.tokend.Broker"
    public var stateDirectory = "/var/lib/tokend"
    /// Where token files live; $RUNTIME_DIRECTORY (systemd) wins.
    public var runtimeDirectory = "/run/tokend"
    /// The AES-256-GCM key sealing state files (the credential tokend.state-key wins); nil: not sealed.
    public var stateKeyFile: String?
    public var socketMode: UInt32 = 0o660
    /// Connections served at once; more are answered TooManyConnections.
    public var maxConnections = 512
    /// Connections one non-admin uid may hold; nil: half of maxConnections.
    public var maxConnectionsPerUser: Int?
    /// Seconds a connection may stay without a call in progress or data.
    public var idleTimeout = 300
    /// Seconds a begun message may take to complete.
    public var frameTimeout = 10
    /// Seconds replies may stay unread (socket and write buffer full) before the connection is closed.
    public var writeTimeout = 30
    /// Forced refreshes (Refresh without staleGeneration) per minute, per user and session.
    public var forcedRefreshesPerMinute = 6
    /// trace, debug, info, notice, warning, error, critical.
    public var logLevel = "info"
    /// auto (journal under systemd, else standard error), journal or console.
    public var logTarget = "auto"
    /// This host's name in a fleet (who wrote the shared record, who holds the lock); nil: the hostname.
    public var hostID: String?
    /// A file rewritten atomically every few seconds with the metrics, for
    /// node_exporter's textfile collector; nil: none.
    public var metricsTextfile: String?
    /// A loopback address ("127.0.0.1:9464", "[::1]:9464") where GET /metrics
    /// answers; nil: none.
    public var metricsListen: MetricsListen?
    /// The TPM 2.0 that holds DPoP keys, as a tpm2-tss TCTI string; nil: /dev/tpmrm0 when present (tpmInUse).
    public var tpm: String?

    public init() {}
}

/// `metrics-listen`: a loopback IP literal and a port.
public struct MetricsListen: Sendable, Equatable {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }
}

/// One `[[sessions.NAME.token-files]]` entry.
public struct TokenFileSettings: Sendable, Equatable {
    /// Absolute, under the runtime directory.
    public var path: String
    public var group: String?
    public var mode: UInt32

    public init(path: String, group: String?, mode: UInt32) {
        self.path = path
        self.group = group
        self.mode = mode
    }
}

/// How the client authenticates to the provider (RFC 6749 §2.3, RFC 7523 §2.2):
/// the raw values are the `client-auth` settings.
public enum ClientAuth: String, Sendable, Equatable, CaseIterable {
    case basic, post, none
    case privateKeyJWT = "private-key-jwt"
    case secretJWT = "secret-jwt"

    /// Whether it needs the client secret (HS256 assertions are signed with it).
    public var usesSecret: Bool { [.basic, .post, .secretJWT].contains(self) }
}

public struct SessionSettings: Sendable, Equatable {
    public var name: String
    /// The provider's issuer: endpoints not set here come from its discovery document.
    public var issuer: String?
    /// Required unless `issuer` is set.
    public var tokenEndpoint: URL?
    public var revocationEndpoint: URL?
    public var authorizationEndpoint: URL?
    public var deviceAuthorizationEndpoint: URL?
    public var clientID: String
    /// Where the client secret is read from, already resolved (config key or
    /// `$CREDENTIALS_DIRECTORY/NAME.client-secret`); nil for none.
    public var clientSecretFile: String?
    /// The client secret itself, for a session a user added whose client tokend registered (its record is sealed).
    public var clientSecretValue: String?
    public var clientAuth: ClientAuth = .basic
    /// The private key of `private-key-jwt`, already resolved (config key or
    /// `$CREDENTIALS_DIRECTORY/NAME.client-key`); nil for other methods.
    public var clientKeyFile: String?
    /// The `kid` header of the client's assertions; nil: none is sent.
    public var clientKeyID: String?
    /// The exact loopback redirect URI browser login uses (registered at the
    /// provider); nil: a free port, `http://127.0.0.1:PORT/callback`.
    public var redirectURI: String?
    /// Push the authorization request (RFC 9126) even when the provider does not require it.
    public var pushedAuthorization = false
    public var scope: String?
    public var refreshMargin = 60
    public var minValid = 30
    public var upstreamTimeout = 10
    public var defaultLifetime = 300
    /// Origins ("https://app.example.com") whose pages may ask for tokens through the browser bridge.
    public var webOrigins: [String] = []
    /// Files tokend keeps holding the current access token.
    public var tokenFiles: [TokenFileSettings] = []
    /// Hosts (host or host:port) whose git credential requests this session answers.
    public var gitHosts: [String] = []
    /// The user name git sends with the token ("oauth2" for GitLab, "x-access-token" for GitHub).
    public var gitUsername: String?
    /// "always", "never" or "same-domain" (checked by the parser).
    public var acceptCookies: String = "always"
    /// `postgresql://USER@HOST:PORT/DB?sslmode=...`: the session is shared by a fleet through that database.
    public var sharedStore: String?
    /// The database password, already resolved (config key or
    /// `$CREDENTIALS_DIRECTORY/NAME.shared-store-password`); nil for none.
    public var sharedStorePasswordFile: String?
    /// This session's [sessions.NAME.access] table, when it has one (keys it
    /// does not set come from the global [access]).
    public var access: AccessSettings?
    /// RFC 8707 resource indicators (absolute URIs) the session serves tokens
    /// for; every login asks for all of them.
    public var resources: [String] = []
    /// "auto", "narrows" or "keeps-wide": what a refresh naming one resource
    /// (or a narrower scope) does to the provider's refresh token (checked by the parser).
    public var narrowing = "auto"
    /// Who may have tokens for a resource: users and groups by resource; a
    /// resource not named here is open to whoever may read the session.
    public var resourceAccess: [String: AccessSettings] = [:]
    /// The resources web pages (web-origins, through the browser bridge or a
    /// web view) may ask tokens for; none unless listed.
    public var webResources: [String] = []
    /// DPoP (RFC 9449): every token-endpoint request carries a proof of the session's key.
    public var dpop = false
    /// Where the DPoP key lives: "tpm", "state" or "auto" (the TPM when one is reachable, else the state).
    public var dpopKey = "auto"
    /// URLs besides the resources and the provider's userinfo endpoint that
    /// GetProof signs for, each with what is under it (proof-targets).
    public var proofTargets: [String] = []
    /// The audience values a resource's tokens carry when they are not the
    /// resource's URI (resource-audiences): how tokend reads a JWT's `aud`.
    public var resourceAudiences: [String: [String]] = [:]
    /// RFC 7662 introspection, where tokend asks which audience a token has
    /// when it is not a JWT (introspection-endpoint; else from discovery).
    public var introspectionEndpoint: URL?

    public init(name: String, tokenEndpoint: URL?, clientID: String) {
        self.name = name
        self.tokenEndpoint = tokenEndpoint
        self.clientID = clientID
    }
}

/// A configuration problem: one line naming file, key and problem.
public struct ConfigError: Error, Equatable, CustomStringConvertible {
    public let file: String
    public let key: String?
    public let problem: String

    public init(file: String, key: String?, problem: String) {
        self.file = file
        self.key = key
        self.problem = problem
    }

    public var description: String {
        if let key { return "\(file): \(key): \(problem)" }
        return "\(file): \(problem)"
    }
}

extension MetricsListen {
    /// "127.0.0.1:PORT" or "[::1]:PORT": only a loopback IP literal, so no
    /// other host can scrape it.
    public init?(parsing text: String) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (1...65535).contains(port)
        else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard Loopback.isLiteral(host) else { return nil }
        self.init(host: host, port: port)
    }
}
