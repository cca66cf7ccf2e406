import Foundation
import Testing
@testable import OAuth

/// What discovery says of DPoP (RFC 9449 §5.1), and the token endpoint's request for a nonce (§8).
@Suite struct DPoPMetadataTests {
    @Test func signingAlgorithmsAreRead() throws {
        let document = #"{"issuer":"https://id.example","token_endpoint":"https://id.example/token","dpop_signing_alg_values_supported":["ES256","RS256"]}"#
        let metadata = try ProviderMetadata.parse(Array(document.utf8), expectedIssuer: "https://id.example")
        #expect(metadata.dpopSigningAlgValues == ["ES256", "RS256"])
        // Kept with the session and read back.
        #expect(ProviderMetadata.decode(metadata.encoded())?.dpopSigningAlgValues == ["ES256", "RS256"])
        let without = try ProviderMetadata.parse(Array(#"{"issuer":"https://id.example"}"#.utf8), expectedIssuer: "https://id.example")
        #expect(without.dpopSigningAlgValues == nil)
    }

    @Test(arguments: [
        (400, #"{"error":"use_dpop_nonce","error_description":"Authorization server requires nonce in DPoP proof"}"#, true),
        (401, #"{"error":"use_dpop_nonce"}"#, true),
        (403, #"{"error":"invalid_dpop_proof"}"#, false),
        (400, #"{"error":"invalid_grant"}"#, false),
        (500, #"{"error":"use_dpop_nonce"}"#, false),
    ])
    func nonceRequests(_ status: Int, _ body: String, _ asks: Bool) {
        let answer = HTTPTokenEndpoint.HTTPAnswer(status: status, retryAfter: nil, setCookie: [], body: Array(body.utf8))
        #expect(answer.asksForNonce == asks)
    }

    /// invalid_dpop_proof (Glewlwyd: 403) is a passing failure that keeps the grant, never a revoked one.
    @Test func aRefusedProofIsNotARefusedGrant() {
        let result = TokenResponse.classify(
            status: 403, retryAfterHeader: nil, body: Array(#"{"error":"invalid_dpop_proof","error_description":"Invalid DPoP"}"#.utf8))
        guard case .failure(let error) = result else {
            Issue.record("a refusal was taken for a token")
            return
        }
        #expect(error.kind == .transient && error.code == "invalid_dpop_proof")
    }
}

/// RFC 8705 §5's `mtls_endpoint_aliases`: the provider's endpoints under other URLs, which GetProof refuses too.
@Suite struct EndpointAliasesTests {
    @Test func aliasesAreReadAndFillTheEndpointsButUserinfos() throws {
        let document = #"""
            {"issuer":"https://id.example","token_endpoint":"https://id.example/token",
             "mtls_endpoint_aliases":{"token_endpoint":"https://mtls.id.example/token","revocation_endpoint":"https://mtls.id.example/revoke",
              "userinfo_endpoint":"https://mtls.id.example/userinfo","odd":3,"nested":{"a":"b"}}}
            """#
        let metadata = try ProviderMetadata.parse(Array(document.utf8), expectedIssuer: "https://id.example")
        #expect(metadata.mtlsEndpointAliases?.urls.count == 3, "members that are not URL strings are left out")
        #expect(ProviderMetadata.decode(metadata.encoded()) == metadata)
        let filled = ProviderEndpoints().filled(from: metadata)
        #expect(filled.mtlsAliases.map(\.absoluteString) == ["https://mtls.id.example/revoke", "https://mtls.id.example/token"])
        #expect(ProviderEndpoints().filled(from: ProviderMetadata(issuer: "https://id.example")).mtlsAliases == [])
    }
}
