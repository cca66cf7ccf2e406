import Foundation
import Testing
@testable import Config

/// `dpop`, `dpop-key` and `[daemon] tpm`.
@Suite struct DPoPConfigTests {
    func parse(_ session: String, daemon: String = "") throws(ConfigError) -> Configuration {
        try Configuration.parse(
            """
            [daemon]
            \(daemon)
            [sessions.g]
            token-endpoint = "https://id.example/token"
            client-id = "app"
            client-auth = "none"
            \(session)
            """, file: "t.toml", environment: [:])
    }

    func problem(_ session: String, daemon: String = "") -> ConfigError? {
        do {
            _ = try parse(session, daemon: daemon)
            return nil
        } catch {
            return error
        }
    }

    @Test func offByDefaultAndAutoWhenOn() throws {
        #expect(try parse("").sessions[0].dpop == false)
        let on = try parse("dpop = true").sessions[0]
        #expect(on.dpop && on.dpopKey == "auto")
        #expect(try parse("dpop = true\ndpop-key = \"tpm\"").sessions[0].dpopKey == "tpm")
        #expect(try parse("dpop = true\ndpop-key = \"state\"").sessions[0].dpopKey == "state")
    }

    @Test func keyStorageIsOneOfThree() {
        #expect(problem("dpop = true\ndpop-key = \"disk\"")?.key == "sessions.g.dpop-key")
        #expect(problem("dpop-key = \"tpm\"")?.problem.contains("set dpop = true") == true)
    }

    /// Hosts sharing a grant would have to share its key.
    @Test func sharedStoreIsRefused() {
        let error = problem("dpop = true\nshared-store = \"postgresql://tokend@db.example/tokend\"")
        #expect(error?.key == "sessions.g.dpop")
        #expect(error?.problem.contains("shared-store") == true)
        #expect(problem("shared-store = \"postgresql://tokend@db.example/tokend\"") == nil)
    }

    @Test func tpmIsATCTIString() throws {
        #expect(try parse("", daemon: "tpm = \"swtpm:host=127.0.0.1,port=2321\"").daemon.tpm == "swtpm:host=127.0.0.1,port=2321")
        #expect(try parse("").daemon.tpm == nil)
        #expect(problem("", daemon: "tpm = \"\"")?.key == "daemon.tpm")
        #expect(problem("", daemon: "tpm = \"device: /dev/tpm0\"")?.key == "daemon.tpm")
        #expect(problem("", daemon: "tpm = \":x\"")?.key == "daemon.tpm")
    }
}
