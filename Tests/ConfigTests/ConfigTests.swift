import Foundation
import Testing
@testable import Config

@Suite struct ConfigTests {
    let secret: String = {
        let path = NSTemporaryDirectory() + "tokend-config-secret"
        _ = FileManager.default.createFile(atPath: path, contents: Data("s".utf8))
        return path
    }()

    func parse(_ text: String, environment: [String: String] = [:]) throws(ConfigError) -> Configuration {
        try Configuration.parse(text, file: "t.toml", environment: environment)
    }

    var minimal: String {
        """
        [sessions.default]
        token-endpoint = "https://id.example/token"
        client-id = "app"
        client-secret-file = "\(secret)"
        """
    }

    @Test func exampleConfigurationIsValid() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../etc/tokend/tokend.toml").path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let directory = (secret as NSString).deletingLastPathComponent
        try Data("s".utf8).write(to: URL(fileURLWithPath: directory + "/default.client-secret"))
        let config = try parse(text, environment: ["CREDENTIALS_DIRECTORY": directory])
        #expect(config.daemon.logTarget == "auto")
        #expect(config.sessions.map(\.name) == ["default"])
    }

    @Test func issuerMakesTheTokenEndpointOptional() throws {
        let config = try parse("""
            [sessions.default]
            issuer = "https://id.example.com/realms/x"
            device-authorization-endpoint = "https://id.example.com/device"
            client-id = "cli"
            client-auth = "none"
            """)
        let session = try #require(config.sessions.first)
        #expect(session.issuer == "https://id.example.com/realms/x")
        #expect(session.tokenEndpoint == nil)
        #expect(session.deviceAuthorizationEndpoint?.absoluteString == "https://id.example.com/device")
        #expect(session.clientSecretFile == nil)
    }

    @Test func withoutIssuerTheTokenEndpointIsRequired() {
        #expect(throws: ConfigError(
            file: "t.toml", key: "sessions.default.token-endpoint",
            problem: "is required (or set issuer, and tokend discovers it)"))
        {
            try parse("""
                [sessions.default]
                client-id = "cli"
                client-auth = "none"
                """)
        }
        #expect(throws: ConfigError.self) {
            try parse("""
                [sessions.default]
                issuer = "http://id.example.com"
                client-id = "cli"
                client-auth = "none"
                """)
        }
    }

    @Test func webOriginsAndAcceptPolicy() throws {
        let config = try parse(minimal + "\nweb-origins = [\"https://app.example.com\", \"http://127.0.0.1:8080\"]\naccept-cookies = \"same-domain\"")
        #expect(config.sessions[0].webOrigins == ["https://app.example.com", "http://127.0.0.1:8080"])
        #expect(config.sessions[0].acceptCookies == "same-domain")
        #expect(throws: ConfigError.self) { try parse(minimal + "\nweb-origins = [\"https://app.example.com/path\"]") }
        #expect(throws: ConfigError.self) { try parse(minimal + "\naccept-cookies = \"sometimes\"") }
    }

    @Test func sharedStoreAndHostID() throws {
        let directory = (secret as NSString).deletingLastPathComponent
        try Data("pw".utf8).write(to: URL(fileURLWithPath: directory + "/default.shared-store-password"))
        let config = try parse(
            "[daemon]\nhost-id = \"app-3\"\n" + minimal + "\nshared-store = \"postgresql://tokend@db.internal/tokend?sslmode=verify-full\"",
            environment: ["CREDENTIALS_DIRECTORY": directory])
        #expect(config.daemon.hostID == "app-3")
        #expect(config.sessions[0].sharedStore == "postgresql://tokend@db.internal/tokend?sslmode=verify-full")
        #expect(config.sessions[0].sharedStorePasswordFile == directory + "/default.shared-store-password")
        // No password in the URL (it would end up in logs and status), no other scheme.
        #expect(throws: ConfigError.self) { try parse(minimal + "\nshared-store = \"postgresql://u:pw@db/tokend\"") }
        #expect(throws: ConfigError.self) { try parse(minimal + "\nshared-store = \"mysql://u@db/tokend\"") }
        #expect(throws: ConfigError.self) { try parse("[daemon]\nhost-id = \"two words\"\n" + minimal) }
    }

    @Test func sessionAccessOverridesOnlyTheKeysItSets() throws {
        let text = """
            [access]
            cookies-write-users = ["web"]
            read-groups = ["staff"]
            \(minimal)
            [sessions.default.access]
            read-users = ["kiosk"]
            """
        let config = try parse(text)
        #expect(config.access.cookiesWriteUsers == ["web"] && config.access.readUsers == nil)
        let own = try #require(config.sessions.first?.access)
        let merged = own.over(config.access)
        #expect(merged.readUsers == ["kiosk"] && merged.readGroups == ["staff"] && merged.cookiesWriteUsers == ["web"])
        #expect(throws: ConfigError.self) { try parse(minimal + "\n[sessions.default.access]\nwrite-users = []\n") }
    }

    @Test func appliesDefaultsAndStateDirectoryFromSystemd() throws {
        let config = try parse(minimal, environment: ["STATE_DIRECTORY": "/var/lib/x:/var/lib/y"])
        #expect(config.daemon.stateDirectory == "/var/lib/x")
        #expect(config.daemon.socketMode == 0o660)
        let session = try #require(config.sessions.first)
        #expect(session.refreshMargin == 60 && session.minValid == 30 && session.upstreamTimeout == 10)
        #expect(session.clientAuth == .basic)
    }

    @Test func findsTheSecretInTheCredentialsDirectory() throws {
        let directory = (secret as NSString).deletingLastPathComponent
        try Data("s".utf8).write(to: URL(fileURLWithPath: directory + "/work.client-secret"))
        let config = try parse(
            """
            [sessions.work]
            token-endpoint = "https://id.example/token"
            client-id = "app"
            """, environment: ["CREDENTIALS_DIRECTORY": directory])
        #expect(config.sessions.first?.clientSecretFile == directory + "/work.client-secret")
    }

    @Test(arguments: [
        ("[daemon]\nsocket-mod = \"0600\"", "daemon.socket-mod", "unknown key"),
        ("[daemon]\nsocket = 5", "daemon.socket", "must be a string"),
        ("[sessions.default]\nclient-id = \"a\"\nclient-auth = \"none\"", "sessions.default.token-endpoint", "is required"),
        ("[sessions.default]\ntoken-endpoint = \"not a url\"\nclient-id = \"a\"", "sessions.default.token-endpoint", "not a valid URL"),
        ("[sessions.default]\ntoken-endpoint = \"http://id.example/t\"\nclient-id = \"a\"", "sessions.default.token-endpoint", "https"),
        ("[sessions.default]\ntoken-endpoint = \"https://id.example/t\"\nclient-id = \"a\"", "sessions.default.client-auth", "needs a client secret"),
        ("[sessions.default]\ntoken-endpoint = \"https://id.example/t\"\nclient-id = \"a\"\nclient-auth = \"none\"\nmin-valid = -1", "sessions.default.min-valid", "between"),
        ("[sessions.\"bad name\"]\ntoken-endpoint = \"https://id.example/t\"", "sessions.bad name", "session names"),
        ("[daemon]\n", "sessions", "no session"),
        ("[daemon\n", nil, "line 1"),
    ] as [(String, String?, String)])
    func refusesBadConfigurationNamingTheKey(_ text: String, _ key: String?, _ problem: String) {
        do {
            _ = try parse(text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.key == key)
            #expect(error.problem.contains(problem), "\(error)")
            #expect(error.description.hasPrefix("t.toml: "))
        }
    }
}

@Suite struct SecurityConfigTests {
    let base = ConfigTests()

    @Test func tokenFilesMayGiveOtherUsersNothing() throws {
        for mode in ["0644", "0604", "0641", "0666"] {
            #expect(throws: ConfigError.self) {
                try base.parse(base.minimal + "\ntoken-files = [{ path = \"t\", group = \"0\", mode = \"\(mode)\" }]")
            }
        }
        let config = try base.parse(base.minimal + "\ntoken-files = [{ path = \"t\", group = \"0\", mode = \"0640\" }]")
        #expect(config.sessions[0].tokenFiles.first?.mode == 0o640)
    }

    /// A group that may write a token file could hand its readers a token of its own.
    @Test func tokenFilesMayNotBeGroupWritable() throws {
        for mode in ["0660", "0620", "0760"] {
            #expect(throws: ConfigError.self) {
                try base.parse(base.minimal + "\ntoken-files = [{ path = \"t\", group = \"0\", mode = \"\(mode)\" }]")
            }
        }
    }

    @Test func plainHTTPOnlyToALoopbackLiteral() throws {
        let plain = { (host: String) in
            base.minimal.replacingOccurrences(of: "https://id.example/token", with: "http://\(host)/token")
        }
        _ = try base.parse(plain("127.0.0.1:8000"))
        _ = try base.parse(plain("[::1]:8000"))
        #expect(throws: ConfigError.self) { try base.parse(plain("127.attacker.example")) }
        #expect(throws: ConfigError.self) { try base.parse(plain("localhost:8000")) }
    }
}
