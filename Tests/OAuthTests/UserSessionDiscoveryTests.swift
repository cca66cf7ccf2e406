import Foundation
import Testing
@testable import OAuth

@Suite struct ChallengeDiscoveryTests {
    @Test func aBearerChallengeWithQuotedParameters() throws {
        let header = #"Bearer error="invalid_token", error_description="No \"token\", sorry", resource_metadata="https://mcp.example/.well-known/oauth-protected-resource/mcp", scope="files:read mcp""#
        let bearer = try #require(AuthenticationChallenge.bearer(in: [header]))
        #expect(bearer.parameters["resource_metadata"] == "https://mcp.example/.well-known/oauth-protected-resource/mcp")
        #expect(bearer.parameters["scope"] == "files:read mcp")
        #expect(bearer.parameters["error_description"] == #"No "token", sorry"#)
    }

    @Test func severalChallengesInOneHeaderAndAcrossHeaders() {
        let challenges = AuthenticationChallenge.parse([
            #"Basic realm="a, b", charset=UTF-8, Negotiate abc==, Bearer realm=api,resource_metadata="https://r/m""#,
            "DPoP algs=\"ES256 RS256\"",
        ])
        #expect(challenges.map(\.scheme) == ["basic", "negotiate", "bearer", "dpop"])
        #expect(challenges[0].parameters == ["realm": "a, b", "charset": "UTF-8"])
        #expect(challenges[1].token68 == "abc==")
        #expect(challenges[2].parameters == ["realm": "api", "resource_metadata": "https://r/m"])
        #expect(challenges[3].parameters["algs"] == "ES256 RS256")
    }

    @Test func oddTextDoesNotHideTheBearerChallenge() {
        let cases = [
            #", , Bearer RESOURCE_METADATA="https://r/m""#,
            #"Negotiate, Bearer resource_metadata = "https://r/m""#,
            #"Foo =bar, Bearer resource_metadata="https://r/m", scope="#,
            #"bearer resource_metadata="https://r/m"#,
        ]
        for header in cases {
            #expect(AuthenticationChallenge.bearer(in: [header])?.parameters["resource_metadata"] == "https://r/m", "\(header)")
        }
        #expect(AuthenticationChallenge.bearer(in: [#"Basic realm="Bearer resource_metadata=x""#]) == nil)
        #expect(AuthenticationChallenge.bearer(in: []) == nil)
    }

    @Test func theMetadataMustBeForTheResourceAsked() {
        #expect(ResourceMetadata.sameResource("https://MCP.example:443/mcp/", "https://mcp.example/mcp"))
        #expect(!ResourceMetadata.sameResource("https://mcp.example/other", "https://mcp.example/mcp"))
        #expect(!ResourceMetadata.sameResource("https://mcp.example:8443/mcp", "https://mcp.example/mcp"))
        #expect(!ResourceMetadata.sameResource("http://mcp.example/mcp", "https://mcp.example/mcp"))
        #expect(ResourceMetadata.wellKnownURLs(for: URL(string: "https://mcp.example/a/mcp?x=1")!).map(\.absoluteString) == [
            "https://mcp.example/.well-known/oauth-protected-resource/a/mcp", "https://mcp.example/.well-known/oauth-protected-resource",
        ])
        #expect(UserSessionDiscovery.serverMetadataURLs(issuer: "https://id.example/tenant/").map(\.absoluteString) == [
            "https://id.example/.well-known/oauth-authorization-server/tenant",
            "https://id.example/.well-known/openid-configuration/tenant",
            "https://id.example/tenant/.well-known/openid-configuration",
        ])
    }
}

/// Discovery against a real server on loopback (allow-loopback-http), as an MCP server and its authorization server lay it out.
@Suite struct UserSessionDiscoveryTests {
    let policy = OutboundPolicy(allowLoopbackHTTP: true)

    /// An MCP server at /mcp and its authorization server at the root; `change` alters one answer.
    static func mcpServer(_ change: @escaping @Sendable (ServedRequest, String) -> ServedResponse? = { _, _ in nil })
        throws -> LoopbackHTTPServer
    {
        try LoopbackHTTPServer { request, base in
            if let changed = change(request, base) { return changed }
            switch request.target {
            case "/mcp":
                return ServedResponse(status: 401, headers: [(
                    "WWW-Authenticate",
                    #"Bearer error="invalid_token", resource_metadata="\#(base)/.well-known/oauth-protected-resource/mcp", scope="mcp:tools""#
                )])
            case "/.well-known/oauth-protected-resource/mcp":
                return .json(#"{"resource":"\#(base)/mcp","authorization_servers":["\#(base)/"],"scopes_supported":["a","b"]}"#)
            case "/.well-known/oauth-authorization-server":
                return .json(#"""
                    {"issuer":"\#(base)/","token_endpoint":"\#(base)/token","authorization_endpoint":"\#(base)/authorize",
                     "registration_endpoint":"\#(base)/register","code_challenge_methods_supported":["S256"]}
                    """#)
            default:
                return .json(#"{"error":"not_found"}"#, status: 404)
            }
        }
    }

    func discover(_ server: LoopbackHTTPServer, issuer: String? = nil, scope: String? = nil, policy: OutboundPolicy? = nil)
        async throws -> DiscoveredServer
    {
        try await UserSessionDiscovery.discover(
            issuer: issuer, resources: [server.base + "/mcp"], scope: scope, policy: policy ?? self.policy, timeout: .seconds(60))
    }

    @Test func fromTheResourcesChallenge() async throws {
        let server = try Self.mcpServer()
        defer { server.stop() }
        let found = try await discover(server)
        #expect(found.issuer == server.base + "/")
        #expect(found.resources == [server.base + "/mcp"])
        #expect(found.scope == "mcp:tools")
        #expect(found.registrationEndpoint?.absoluteString == server.base + "/register")
        #expect(found.metadata.tokenEndpoint?.absoluteString == server.base + "/token")
        #expect(server.served.map(\.target) == ["/mcp", "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server"])
        #expect(try await discover(server, scope: "mine").scope == "mine")
    }

    @Test func fromTheWellKnownPathWhenThereIsNoChallenge() async throws {
        let server = try Self.mcpServer { request, base in
            switch request.target {
            case "/mcp": .json("{}", status: 405)
            case "/.well-known/oauth-protected-resource/mcp": .json("{}", status: 404)
            case "/.well-known/oauth-protected-resource": .json(#"{"resource":"\#(base)/mcp/","authorization_servers":["\#(base)/"],"scopes_supported":["a","b"]}"#)
            default: nil
            }
        }
        defer { server.stop() }
        let found = try await discover(server)
        #expect(found.scope == "a b")
        #expect(found.resources == [server.base + "/mcp/"])
    }

    @Test func anIssuerGivenIsReadDirectlyAndFallsBackToOpenID() async throws {
        let server = try Self.mcpServer { request, base in
            switch request.target {
            case "/.well-known/oauth-authorization-server/tenant": .json("{}", status: 404)
            case "/.well-known/openid-configuration/tenant": .json("{}", status: 404)
            case "/tenant/.well-known/openid-configuration":
                .json(#"{"issuer":"\#(base)/tenant","token_endpoint":"\#(base)/token","authorization_endpoint":"\#(base)/a"}"#)
            default: nil
            }
        }
        defer { server.stop() }
        let found = try await discover(server, issuer: server.base + "/tenant", scope: "openid")
        #expect(found.issuer == server.base + "/tenant")
        #expect(found.registrationEndpoint == nil)
        #expect(found.scope == "openid")
        #expect(!server.served.contains { $0.target == "/mcp" })
    }

    @Test(arguments: [
        ("/.well-known/oauth-protected-resource/mcp", #"{"resource":"https://elsewhere.example/mcp","authorization_servers":["x"]}"#,
         "resource-metadata", "RFC 9728 §3.3"),
        ("/.well-known/oauth-protected-resource/mcp", #"{"resource":"BASE/mcp"}"#, "resource-metadata", "no authorization_servers"),
        ("/.well-known/oauth-protected-resource/mcp", "not json", "resource-metadata", "not a JSON object"),
        ("/.well-known/oauth-authorization-server", #"{"issuer":"https://other.example/","token_endpoint":"BASE/token"}"#,
         "server-metadata", "names issuer"),
        ("/.well-known/oauth-authorization-server",
         #"{"issuer":"BASE/","token_endpoint":"BASE/token","code_challenge_methods_supported":["plain"]}"#, "server-metadata", "S256"),
        ("/.well-known/oauth-authorization-server", #"{"issuer":"BASE/"}"#, "server-metadata", "no token_endpoint"),
    ])
    func aServerThatDoesNotConformSaysWhichStep(_ path: String, _ body: String, _ step: String, _ said: String) async throws {
        let server = try Self.mcpServer { request, base in
            request.target == path ? .json(body.replacingOccurrences(of: "BASE", with: base)) : nil
        }
        defer { server.stop() }
        let failure = await #expect(throws: DiscoveryFailed.self) { try await discover(server) }
        #expect(failure?.step == step)
        #expect(failure?.url == server.base + path)
        #expect(failure?.status == 200)
        #expect(failure?.reason.contains(said) == true, "\(failure?.reason ?? "")")
    }

    @Test func missingMetadataNamesTheURLAndStatus() async throws {
        let server = try Self.mcpServer { request, _ in
            request.target.hasPrefix("/.well-known/") ? .json("{}", status: 404) : nil
        }
        defer { server.stop() }
        let failure = await #expect(throws: DiscoveryFailed.self) { try await discover(server) }
        #expect(failure?.step == "resource-metadata")
        #expect(failure?.status == 404)
        #expect(failure?.url == server.base + "/.well-known/oauth-protected-resource/mcp")
    }

    @Test func metadataPointingAtForbiddenAddressesIsRefused() async throws {
        let cases: [(String, String, String)] = [
            ("/mcp", #"Bearer resource_metadata="http://169.254.169.254/latest/meta-data""#, "169.254.169.254"),
            ("/mcp", #"Bearer resource_metadata="https://[fd00:ec2::254]/""#, "fd00:ec2::254"),
        ]
        for (path, challenge, address) in cases {
            let server = try Self.mcpServer { request, _ in
                request.target == path ? ServedResponse(status: 401, headers: [("WWW-Authenticate", challenge)]) : nil
            }
            defer { server.stop() }
            let refused = await #expect(throws: AddressRefused.self) { try await discover(server) }
            #expect(refused?.address == address)
            #expect(server.served.count == 1)
        }
        let pointing = try Self.mcpServer { request, base in
            request.target == "/.well-known/oauth-protected-resource/mcp"
                ? .json(#"{"resource":"\#(base)/mcp","authorization_servers":["https://169.254.169.254/"]}"#) : nil
        }
        defer { pointing.stop() }
        let refused = await #expect(throws: AddressRefused.self) {
            try await discover(pointing, policy: OutboundPolicy(allowLoopbackHTTP: true, patterns: ["https://*"]))
        }
        #expect(refused?.address == "169.254.169.254")
    }

    @Test func anIssuerOutsideThePatternsIsRefused() async throws {
        let server = try Self.mcpServer()
        defer { server.stop() }
        let refused = await #expect(throws: AddressRefused.self) {
            try await UserSessionDiscovery.discover(
                issuer: "https://idp.elsewhere.example", resources: [], scope: nil,
                policy: OutboundPolicy(patterns: ["https://idp.corp.example/*"]), timeout: .seconds(60))
        }
        #expect(refused?.reason.contains("[user-sessions] issuers") == true)
        let noResource = await #expect(throws: DiscoveryFailed.self) {
            try await UserSessionDiscovery.discover(issuer: nil, resources: [], scope: nil, policy: policy, timeout: .seconds(60))
        }
        #expect(noResource?.step == "challenge")
        #expect(server.acceptedCount == 0)
    }
}
