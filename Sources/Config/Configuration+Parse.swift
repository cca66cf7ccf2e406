#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Loopback
import TOMLKit

extension Configuration {
    /// Reads and validates the file. `environment` supplies STATE_DIRECTORY and
    /// CREDENTIALS_DIRECTORY as systemd sets them.
    public static func load(path: String, environment: [String: String]) throws(ConfigError) -> Configuration {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8)
        else {
            throw ConfigError(file: path, key: nil, problem: "cannot be read (does it exist? is it UTF-8?)")
        }
        return try parse(text, file: path, environment: environment)
    }

    public static func parse(_ text: String, file: String, environment: [String: String]) throws(ConfigError)
        -> Configuration
    {
        let root: TOMLTable
        do {
            root = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw ConfigError(
                file: file, key: nil,
                problem: "line \(error.source.begin.line): \(error.description)")
        } catch {
            throw ConfigError(file: file, key: nil, problem: "not valid TOML")
        }
        let reader = TableReader(file: file, table: root, path: "")
        try reader.allowOnly(["daemon", "access", "sessions", "user-sessions"])
        var daemon = DaemonSettings()
        if let table = try reader.table("daemon") {
            let r = TableReader(file: file, table: table, path: "daemon")
            try r.allowOnly([
                "socket", "state-directory", "runtime-directory", "state-key-file", "socket-mode", "log-level", "log-target",
                "max-connections", "max-connections-per-user", "idle-timeout", "frame-timeout", "write-timeout", "forced-refreshes-per-minute", "host-id",
                "metrics-textfile", "metrics-listen", "tpm",
            ])
            daemon.metricsTextfile = try r.path("metrics-textfile")
            daemon.tpm = try r.tpm()
            if let listen = try r.string("metrics-listen") {
                guard let parsed = MetricsListen(parsing: listen) else {
                    throw r.problem("metrics-listen", "\"\(listen)\" is not a loopback address and port: use \"127.0.0.1:9464\" or \"[::1]:9464\"")
                }
                daemon.metricsListen = parsed
            }
            daemon.hostID = try r.string("host-id")
            if let hostID = daemon.hostID, hostID.isEmpty || hostID.utf8.count > 63 || hostID.contains(where: \.isWhitespace) {
                throw r.problem("host-id", "must be 1 to 63 characters without spaces")
            }
            daemon.frameTimeout = try r.integer("frame-timeout", in: 1...3600) ?? daemon.frameTimeout
            daemon.writeTimeout = try r.integer("write-timeout", in: 1...3600) ?? daemon.writeTimeout
            daemon.maxConnections = try r.integer("max-connections", in: 1...65536) ?? daemon.maxConnections
            daemon.maxConnectionsPerUser = try r.integer("max-connections-per-user", in: 1...65536)
            daemon.idleTimeout = try r.integer("idle-timeout", in: 1...86400) ?? daemon.idleTimeout
            daemon.forcedRefreshesPerMinute = try r.integer("forced-refreshes-per-minute", in: 1...600)
                ?? daemon.forcedRefreshesPerMinute
            daemon.stateKeyFile = try r.path("state-key-file")
            daemon.socket = try r.path("socket") ?? daemon.socket
            daemon.stateDirectory = try r.path("state-directory") ?? daemon.stateDirectory
            daemon.runtimeDirectory = try r.path("runtime-directory") ?? daemon.runtimeDirectory
            daemon.socketMode = try r.fileMode("socket-mode") ?? daemon.socketMode
            daemon.logLevel = try r.oneOf("log-level", ["trace", "debug", "info", "notice", "warning", "error", "critical"])
                ?? daemon.logLevel
            daemon.logTarget = try r.oneOf("log-target", ["auto", "journal", "console"]) ?? daemon.logTarget
        }
        if let stateDirectory = environment["STATE_DIRECTORY"]?.split(separator: ":").first {
            daemon.stateDirectory = String(stateDirectory)
        }
        if let runtime = environment["RUNTIME_DIRECTORY"]?.split(separator: ":").first {
            daemon.runtimeDirectory = String(runtime)
        }
        if daemon.socket.utf8.count > 107 {
            throw ConfigError(file: file, key: "daemon.socket", problem: "longer than 107 bytes, the limit for Unix socket paths")
        }
        var sessions: [SessionSettings] = []
        if let table = try reader.table("sessions") {
            for name in table.keys.sorted() {
                let key = "sessions.\(name)"
                guard isValidSessionName(name) else {
                    throw ConfigError(file: file, key: key, problem: "session names use letters, digits, '-', '_' and '.', start with a letter or digit, at most 64 characters")
                }
                guard let sessionTable = table[name]?.table else {
                    throw ConfigError(file: file, key: key, problem: "must be a table ([\(key)])")
                }
                var r = TableReader(file: file, table: sessionTable, path: key)
                var session = try r.session(name: name, environment: environment)
                session.tokenFiles = try r.tokenFiles(under: daemon.runtimeDirectory)
                try r.tokenFilesWithinResourceAccess(session)
                sessions.append(session)
            }
        }
        var configuration = Configuration(daemon: daemon, sessions: sessions)
        if let table = try reader.table("access") {
            configuration.access = try TableReader(file: file, table: table, path: "access").access()
        }
        if let table = try reader.table("user-sessions") {
            configuration.userSessions = try TableReader(file: file, table: table, path: "user-sessions").userSessions()
        }
        // Without sessions of its own, tokend serves only what users add.
        guard !sessions.isEmpty || configuration.userSessions.enabled else {
            throw ConfigError(
                file: file, key: "sessions",
                problem: "no session is configured: add a [sessions.default] table (or let users add their own in [user-sessions])")
        }
        return configuration
    }

    /// A-Z, a-z, 0-9: the ASCII scalars Foundation's `CharacterSet.alphanumerics` holds.
    static func isASCIIAlphanumeric(_ scalar: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
    }

    public static func isValidSessionName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, name.unicodeScalars.count <= 64,
            isASCIIAlphanumeric(first)
        else { return false }
        return name.unicodeScalars.allSatisfy {
            isASCIIAlphanumeric($0) || "-_.".unicodeScalars.contains($0)
        }
    }
}

extension TableReader {
    mutating func session(name: String, environment: [String: String]) throws(ConfigError) -> SessionSettings {
        try allowOnly([
            "issuer", "token-endpoint", "revocation-endpoint", "authorization-endpoint", "device-authorization-endpoint",
            "client-id", "client-secret-file", "client-auth", "scope", "refresh-margin", "min-valid", "upstream-timeout",
            "default-lifetime", "access", "web-origins", "accept-cookies", "git-hosts", "git-username", "token-files",
            "shared-store", "shared-store-password-file", "client-key-file", "client-key-id", "redirect-uri",
            "pushed-authorization", "resources", "narrowing", "resource-access", "dpop", "dpop-key",
            "proof-targets", "web-resources", "resource-audiences", "introspection-endpoint",
        ])
        let issuer = try url("issuer")
        if let issuer, issuer.query != nil || issuer.fragment != nil {
            throw problem("issuer", "must be a URL without query or fragment (OpenID Connect Discovery §2)")
        }
        let endpoint = try url("token-endpoint")
        guard endpoint != nil || issuer != nil else {
            throw problem("token-endpoint", "is required (or set issuer, and tokend discovers it)")
        }
        guard let clientID = try string("client-id"), !clientID.isEmpty else { throw missing("client-id") }
        var session = SessionSettings(name: name, tokenEndpoint: endpoint, clientID: clientID)
        session.issuer = try string("issuer")
        session.revocationEndpoint = try url("revocation-endpoint")
        session.authorizationEndpoint = try url("authorization-endpoint")
        session.deviceAuthorizationEndpoint = try url("device-authorization-endpoint")
        session.introspectionEndpoint = try url("introspection-endpoint")
        if let auth = try oneOf("client-auth", ClientAuth.allCases.map(\.rawValue)) {
            session.clientAuth = ClientAuth(rawValue: auth)!
        }
        session.scope = try string("scope")
        session.gitHosts = try strings("git-hosts") ?? []
        session.gitUsername = try string("git-username")
        session.acceptCookies = try oneOf("accept-cookies", ["always", "never", "same-domain"]) ?? "always"
        for origin in try strings("web-origins") ?? [] {
            guard let url = URL(string: origin), let scheme = url.scheme, ["http", "https"].contains(scheme),
                url.host != nil, url.path.isEmpty, url.query == nil, url.fragment == nil
            else {
                throw problem("web-origins", "\"\(origin)\" is not an origin: use scheme://host[:port], e.g. \"https://app.example.com\"")
            }
            session.webOrigins.append(origin)
        }
        if let table = try table("access") {
            session.access = try TableReader(file: file, table: table, path: key("access")).access()
        }
        session.refreshMargin = try integer("refresh-margin", in: 0...86400) ?? session.refreshMargin
        session.minValid = try integer("min-valid", in: 0...86400) ?? session.minValid
        session.upstreamTimeout = try integer("upstream-timeout", in: 1...300) ?? session.upstreamTimeout
        session.defaultLifetime = try integer("default-lifetime", in: 1...86400) ?? session.defaultLifetime
        if let secretFile = try path("client-secret-file") {
            guard FileManager.default.isReadableFile(atPath: secretFile) else {
                throw problem("client-secret-file", "\(secretFile) cannot be read")
            }
            session.clientSecretFile = secretFile
        } else if let credentials = environment["CREDENTIALS_DIRECTORY"] {
            let candidate = "\(credentials)/\(name).client-secret"
            if FileManager.default.isReadableFile(atPath: candidate) { session.clientSecretFile = candidate }
        }
        if let store = try string("shared-store") {
            guard let url = URLComponents(string: store), ["postgresql", "postgres"].contains(url.scheme ?? ""),
                url.host?.isEmpty == false, url.password == nil
            else {
                throw problem(
                    "shared-store",
                    "must be postgresql://USER@HOST[:PORT]/DATABASE[?sslmode=...], without a password (use shared-store-password-file)")
            }
            session.sharedStore = store
        }
        if let passwordFile = try path("shared-store-password-file") {
            guard FileManager.default.isReadableFile(atPath: passwordFile) else {
                throw problem("shared-store-password-file", "\(passwordFile) cannot be read")
            }
            session.sharedStorePasswordFile = passwordFile
        } else if session.sharedStore != nil, let credentials = environment["CREDENTIALS_DIRECTORY"] {
            let candidate = "\(credentials)/\(name).shared-store-password"
            if FileManager.default.isReadableFile(atPath: candidate) { session.sharedStorePasswordFile = candidate }
        }
        try clientKey(into: &session, environment: environment)
        if session.clientAuth.usesSecret, session.clientSecretFile == nil {
            throw problem(
                "client-auth",
                "\"\(session.clientAuth.rawValue)\" needs a client secret: set client-secret-file, provide the systemd credential \(name).client-secret, or use client-auth = \"none\" for a public client")
        }
        session.redirectURI = try loopbackRedirectURI("redirect-uri")
        session.pushedAuthorization = try bool("pushed-authorization") ?? false
        try resources(into: &session)
        try dpop(into: &session)
        return session
    }
}

extension TableReader {
    /// `token-files = [{ path = "app/token", group = "app", mode = "0640" }]`:
    /// paths relative to the runtime directory, never leaving it.
    func tokenFiles(under runtimeDirectory: String) throws(ConfigError) -> [TokenFileSettings] {
        guard let array = try typed("token-files", .array, "an array of tables")?.array else { return [] }
        var files: [TokenFileSettings] = []
        for (index, element) in array.enumerated() {
            guard let table = element.table else {
                throw problem("token-files", "entry \(index + 1) must be a table such as { path = \"app/token\" }")
            }
            let entry = TableReader(file: file, table: table, path: key("token-files[\(index)]"))
            try entry.allowOnly(["path", "group", "mode"])
            guard let path = try entry.string("path"), !path.isEmpty, !path.hasPrefix("/"),
                !path.split(separator: "/").contains(where: { $0 == ".." || $0 == "." })
            else {
                throw entry.problem("path", "must be a relative path under the runtime directory (\(runtimeDirectory)), without . or ..")
            }
            let group = try entry.string("group")
            let mode = try entry.fileMode("mode") ?? (group == nil ? 0o600 : 0o640)
            guard mode & 0o007 == 0 else {
                throw entry.problem("mode", "must give other users nothing (e.g. \"0640\" with a group): it holds the access token")
            }
            guard mode & 0o020 == 0 else {
                throw entry.problem(
                    "mode", "must not let the group write (e.g. \"0640\"): a writer could hand readers a token of its own")
            }
            files.append(TokenFileSettings(path: "\(runtimeDirectory)/\(path)", group: group, mode: mode))
        }
        return files
    }

    func access() throws(ConfigError) -> AccessSettings {
        try allowOnly([
            "admin-users", "admin-groups", "cookies-write-users", "cookies-write-groups", "read-users", "read-groups",
        ])
        var access = AccessSettings()
        access.adminUsers = try strings("admin-users")
        access.adminGroups = try strings("admin-groups")
        access.cookiesWriteUsers = try strings("cookies-write-users")
        access.cookiesWriteGroups = try strings("cookies-write-groups")
        access.readUsers = try strings("read-users")
        access.readGroups = try strings("read-groups")
        return access
    }
}

/// Reads typed values from one table, naming the full key in every error.
struct TableReader {
    let file: String
    let table: TOMLTable
    let path: String

    func key(_ name: String) -> String { path.isEmpty ? name : "\(path).\(name)" }

    func missing(_ name: String) -> ConfigError {
        ConfigError(file: file, key: key(name), problem: "is required")
    }

    func problem(_ name: String, _ problem: String) -> ConfigError {
        ConfigError(file: file, key: key(name), problem: problem)
    }

    func allowOnly(_ names: Set<String>) throws(ConfigError) {
        for name in table.keys.sorted() where !names.contains(name) {
            throw ConfigError(
                file: file, key: key(name),
                problem: nearestName(to: name, in: names).map { "unknown key; did you mean \"\($0)\"?" }
                    ?? "unknown key (known here: \(names.sorted().joined(separator: ", ")))")
        }
    }

    func typed(_ name: String, _ type: TOMLType, _ described: String) throws(ConfigError) -> TOMLValueConvertible? {
        guard let value = table[name] else { return nil }
        guard value.type == type else { throw problem(name, "must be \(described), not \(value.type)") }
        return value
    }

    func table(_ name: String) throws(ConfigError) -> TOMLTable? {
        try typed(name, .table, "a table")?.table
    }

    func string(_ name: String) throws(ConfigError) -> String? {
        try typed(name, .string, "a string")?.string
    }

    func path(_ name: String) throws(ConfigError) -> String? {
        guard let value = try string(name) else { return nil }
        guard value.hasPrefix("/") else { throw problem(name, "must be an absolute path") }
        return value
    }

    func strings(_ name: String) throws(ConfigError) -> [String]? {
        guard let array = try typed(name, .array, "an array of strings")?.array else { return nil }
        var values: [String] = []
        for element in array {
            guard let text = element.string, !text.isEmpty else {
                throw problem(name, "must be an array of user or group names (or numeric ids)")
            }
            values.append(text)
        }
        return values
    }

    func integer(_ name: String, in range: ClosedRange<Int>) throws(ConfigError) -> Int? {
        guard let value = try typed(name, .int, "an integer")?.int else { return nil }
        guard range.contains(value) else {
            throw problem(name, "must be between \(range.lowerBound) and \(range.upperBound)")
        }
        return value
    }

    func bool(_ name: String) throws(ConfigError) -> Bool? {
        try typed(name, .bool, "true or false")?.bool
    }

    func oneOf(_ name: String, _ allowed: [String]) throws(ConfigError) -> String? {
        guard let value = try string(name) else { return nil }
        guard allowed.contains(value) else {
            throw problem(name, "must be one of \(allowed.map { "\"\($0)\"" }.joined(separator: ", "))")
        }
        return value
    }

    func fileMode(_ name: String) throws(ConfigError) -> UInt32? {
        guard let value = try string(name) else { return nil }
        guard let mode = UInt32(value, radix: 8), mode <= 0o777 else {
            throw problem(name, "must be an octal mode such as \"0660\"")
        }
        return mode
    }

    /// An http(s) URL with a host; plain http only to loopback, where no
    /// network can read the tokens.
    func url(_ name: String) throws(ConfigError) -> URL? {
        guard let text = try string(name) else { return nil }
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty
        else { throw problem(name, "is not a valid URL") }
        switch scheme {
        case "https": return url
        case "http":
            guard Loopback.isLiteral(host) else {
                throw problem(name, "must use https (plain http is accepted only for 127.0.0.1 or [::1], not a name)")
            }
            return url
        default:
            throw problem(name, "must be an https URL")
        }
    }
}
