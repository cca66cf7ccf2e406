import Foundation
import Testing
import Varlink
@testable import OAuth

/// RFC 7591 registration against a real server on loopback.
@Suite struct ClientRegistrationTests {
    let policy = OutboundPolicy(allowLoopbackHTTP: true)
    let redirect = "http://127.0.0.1:38111/callback"

    func register(_ server: LoopbackHTTPServer, policy: OutboundPolicy? = nil) async throws -> RegisteredClient {
        try await ClientRegistration.register(
            at: URL(string: server.base + "/register")!, redirectURI: redirect, clientName: "tokend (alice)", scope: "mcp:tools",
            policy: policy ?? self.policy, timeout: .seconds(60))
    }

    @Test func aPublicClientIsRegistered() async throws {
        let server = try LoopbackHTTPServer { _, base in
            .json(#"""
                {"client_id":"c-1","client_secret":"s-1","registration_access_token":"rat","registration_client_uri":"\#(base)/register/c-1",
                 "redirect_uris":["http://127.0.0.1:38111/callback"],"token_endpoint_auth_method":"none"}
                """#, status: 201)
        }
        defer { server.stop() }
        let client = try await register(server)
        #expect(client == RegisteredClient(
            clientID: "c-1", clientSecret: "s-1", registrationAccessToken: "rat",
            registrationClientURI: server.base + "/register/c-1", redirectURI: redirect))
        let request = try #require(server.served.first)
        #expect(request.method == "POST")
        #expect(request.header("Content-Type") == "application/json")
        let sent = try JSONParser.parse(request.body)
        #expect(sent["token_endpoint_auth_method"] == "none")
        #expect(sent["grant_types"] == ["authorization_code", "refresh_token"])
        #expect(sent["response_types"] == ["code"])
        #expect(sent["redirect_uris"] == [.string(redirect)])
        #expect(sent["client_name"] == "tokend (alice)")
        #expect(sent["scope"] == "mcp:tools")
    }

    @Test(arguments: [
        (400, #"{"error":"invalid_redirect_uri","error_description":"loopback only"}"#, "invalid_redirect_uri: loopback only"),
        (201, #"{"client_secret":"s"}"#, "no client_id"),
        (201, #"{"client_id":"c","redirect_uris":["http://127.0.0.1:1/other"]}"#, "other redirect URIs"),
        (500, "<html>oops</html>", "did not register"),
        (307, "", "did not register"),
    ])
    func aRefusalSaysTheStepURLAndStatus(_ status: Int, _ body: String, _ said: String) async throws {
        let server = try LoopbackHTTPServer { _, base in
            var answer = ServedResponse.json(body, status: status)
            if status == 307 { answer.headers.append(("Location", base + "/elsewhere")) }
            return answer
        }
        defer { server.stop() }
        let failure = await #expect(throws: DiscoveryFailed.self) { try await register(server) }
        #expect(failure?.step == "registration")
        #expect(failure?.url == server.base + "/register")
        #expect(failure?.status == status)
        #expect(failure?.reason.contains(said) == true, "\(failure?.reason ?? "")")
        // A POST is never sent again elsewhere.
        #expect(server.served.map(\.target) == ["/register"])
    }

    @Test func aRegistrationEndpointOnAForbiddenAddressIsNotContacted() async throws {
        let server = try LoopbackHTTPServer { _, _ in .json(#"{"client_id":"c"}"#, status: 201) }
        defer { server.stop() }
        await #expect(throws: AddressRefused.self) { try await register(server, policy: OutboundPolicy()) }
        await #expect(throws: AddressRefused.self) {
            try await ClientRegistration.register(
                at: URL(string: "https://169.254.169.254/register")!, redirectURI: redirect, clientName: "t", scope: nil,
                policy: policy, timeout: .seconds(60))
        }
        #expect(server.acceptedCount == 0)
    }
}
