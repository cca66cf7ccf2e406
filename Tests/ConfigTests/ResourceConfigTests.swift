import Testing

@testable import Config

/// resource-audiences, introspection-endpoint, and token files under resource-access (security round four).
@Suite struct ResourceConfigTests {
    let base = ConfigTests()
    let resources = "\nresources = [\"https://a.example.com/\", \"https://b.example.com/\"]"

    @Test func resourceAudiencesNameTheAudValuesOfAResourcesTokens() throws {
        let config = try base.parse(
            base.minimal + resources
                + "\nresource-audiences = { \"https://a.example.com/\" = \"api://a\", \"https://b.example.com/\" = [\"api://b\", \"b\"] }"
                + "\nintrospection-endpoint = \"https://id.example.com/introspect\"")
        #expect(config.sessions[0].resourceAudiences == ["https://a.example.com/": ["api://a"], "https://b.example.com/": ["api://b", "b"]])
        #expect(config.sessions[0].introspectionEndpoint?.absoluteString == "https://id.example.com/introspect")
        #expect(throws: ConfigError.self) {
            try base.parse(base.minimal + resources + "\nresource-audiences = { \"https://c.example.com/\" = \"c\" }")
        }
        #expect(throws: ConfigError.self) {
            try base.parse(base.minimal + resources + "\nresource-audiences = { \"https://a.example.com/\" = [] }")
        }
    }

    @Test func tokenFilesOfASessionWithResourceAccess() throws {
        let access = "\nresource-access = { \"https://b.example.com/\" = { read-users = [\"alice\"], read-groups = [\"ops\"] } }"
        func files(_ group: String, _ mode: String) -> String {
            "\ntoken-files = [{ path = \"t\", group = \"\(group)\", mode = \"\(mode)\" }]"
        }
        // Only tokend's user reads it, or a group the resource's entry admits.
        _ = try base.parse(base.minimal + resources + access + files("0", "0600"))
        _ = try base.parse(base.minimal + resources + access + files("ops", "0640"))
        let refused = #expect(throws: ConfigError.self) {
            try base.parse(base.minimal + resources + access + files("0", "0640"))
        }
        #expect(refused?.problem.contains("https://b.example.com/") == true)
        // Without resource-access, as before.
        _ = try base.parse(base.minimal + resources + files("0", "0640"))
    }
}
