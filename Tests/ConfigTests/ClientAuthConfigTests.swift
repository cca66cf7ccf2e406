import Foundation
import Testing
@testable import Config

/// `client-auth` with keys and assertions, `redirect-uri`, `pushed-authorization`.
@Suite struct ClientAuthConfigTests {
    let directory: String = {
        let path = NSTemporaryDirectory() + "tokend-config-keys-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        for name in ["client.key", "secret", "g.client-key"] {
            _ = FileManager.default.createFile(atPath: "\(path)/\(name)", contents: Data("x".utf8))
        }
        return path
    }()

    func session(_ keys: String, environment: [String: String] = [:]) throws(ConfigError) -> SessionSettings {
        let config = try Configuration.parse(
            """
            [sessions.g]
            token-endpoint = "https://id.example/token"
            client-id = "app"
            \(keys)
            """, file: "t.toml", environment: environment)
        return config.sessions[0]
    }

    func problem(_ keys: String, environment: [String: String] = [:]) -> ConfigError? {
        do {
            _ = try session(keys, environment: environment)
            return nil
        } catch {
            return error
        }
    }

    @Test func privateKeyJWTReadsTheKeyFileAndKeyID() throws {
        let s = try session("""
            client-auth = "private-key-jwt"
            client-key-file = "\(directory)/client.key"
            client-key-id = "k-2026"
            """)
        #expect(s.clientAuth == .privateKeyJWT)
        #expect(s.clientKeyFile == "\(directory)/client.key")
        #expect(s.clientKeyID == "k-2026")
        #expect(s.clientSecretFile == nil)
    }

    @Test func privateKeyJWTFindsTheSystemdCredential() throws {
        let s = try session(#"client-auth = "private-key-jwt""#, environment: ["CREDENTIALS_DIRECTORY": directory])
        #expect(s.clientKeyFile == "\(directory)/g.client-key")
        #expect(s.clientKeyID == nil)
    }

    @Test func privateKeyJWTWithoutAKeyIsAnError() {
        let error = problem(#"client-auth = "private-key-jwt""#)
        #expect(error?.key == "sessions.g.client-auth")
        #expect(error?.problem.contains("g.client-key") == true)
        #expect(problem("""
            client-auth = "private-key-jwt"
            client-key-file = "\(directory)/absent.key"
            """)?.key == "sessions.g.client-key-file")
    }

    @Test func aKeyForAnotherMethodIsRefused() {
        let error = problem("""
            client-auth = "none"
            client-key-file = "\(directory)/client.key"
            """)
        #expect(error?.key == "sessions.g.client-key-file")
        #expect(problem("""
            client-auth = "none"
            client-key-id = "k"
            """)?.key == "sessions.g.client-key-id")
    }

    @Test func secretJWTNeedsTheSecret() throws {
        #expect(problem(#"client-auth = "secret-jwt""#)?.key == "sessions.g.client-auth")
        let s = try session("""
            client-auth = "secret-jwt"
            client-secret-file = "\(directory)/secret"
            """)
        #expect(s.clientAuth == .secretJWT)
        #expect(s.clientSecretFile == "\(directory)/secret")
    }

    @Test(arguments: [
        "http://127.0.0.1:8765/callback", "http://[::1]:8765/cb", "http://127.0.0.1:8765/", "http://127.0.0.1:8765/a%20b",
        "http://[0:0:0:0:0:0:0:1]:8765/cb",
    ])
    func loopbackRedirectURIsAreKept(_ uri: String) throws {
        let s = try session("""
            client-auth = "none"
            redirect-uri = "\(uri)"
            """)
        #expect(s.redirectURI == uri)
    }

    @Test(arguments: [
        "http://localhost:8765/callback", "https://127.0.0.1:8765/callback", "http://127.0.0.1/callback",
        "http://app.example.com:8765/callback", "http://127.0.0.1:8765/callback?x=1", "http://127.0.0.1:0/cb",
        "http://u@127.0.0.1:8765/cb", "http://127.0.0.1:8765", "urn:ietf:wg:oauth:2.0:oob",
        // A browser resolves dot segments away, so the callback would never match.
        "http://127.0.0.1:8765/x/../cb", "http://127.0.0.1:8765/x/%2e%2E/cb", "http://127.0.0.1:8765/./cb",
    ])
    func otherRedirectURIsAreRefused(_ uri: String) {
        let error = problem("""
            client-auth = "none"
            redirect-uri = "\(uri)"
            """)
        #expect(error?.key == "sessions.g.redirect-uri")
    }

    @Test func pushedAuthorizationIsABoolean() throws {
        #expect(try session(#"client-auth = "none""#).pushedAuthorization == false)
        #expect(try session("client-auth = \"none\"\npushed-authorization = true").pushedAuthorization == true)
        #expect(problem("client-auth = \"none\"\npushed-authorization = \"yes\"")?.key == "sessions.g.pushed-authorization")
    }
}
