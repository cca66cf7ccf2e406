import Foundation
import Testing
@testable import OAuth
import Secrets

@Suite struct TokenResponseTests {
    func classify(_ status: Int, _ body: String, retryAfter: String? = nil) -> Result<TokenResponse, TokenEndpointError> {
        TokenResponse.classify(status: status, retryAfterHeader: retryAfter, body: Array(body.utf8), now: Date(timeIntervalSince1970: 0))
    }

    @Test func acceptsExpiresInAsNumberOrString() throws {
        let a = try classify(200, #"{"access_token":"A","token_type":"Bearer","expires_in":60,"refresh_token":"R"}"#).get()
        #expect(a.expiresIn == 60)
        #expect(a.refreshToken == Secret("R"))
        let b = try classify(200, #"{"access_token":"A","token_type":"Bearer","expires_in":"90"}"#).get()
        #expect(b.expiresIn == 90)
        #expect(b.refreshToken == nil)
        let c = try classify(200, #"{"access_token":"A","token_type":"Bearer"}"#).get()
        #expect(c.expiresIn == nil)
    }

    /// A fraction is floored and a huge number saturates, so the broker's
    /// clamp (a year, with a note in status) sees it instead of the default.
    @Test(arguments: [
        ("3600.5", 3600), ("59.5", 59), ("1e19", Int.max), ("-1e19", Int.min), ("1.7e308", Int.max),
        (#""1e300""#, Int.max), (#""3600.5""#, 3600), (#"" 120 ""#, 120), ("9223372036854775807", Int.max),
        ("-0.5", -1), ("1e3", 1000),
    ])
    func expiresInIsFlooredAndSaturated(json: String, expected: Int) throws {
        let response = try classify(200, #"{"access_token":"A","token_type":"Bearer","expires_in":\#(json)}"#).get()
        #expect(response.expiresIn == expected)
    }

    @Test(arguments: [
        #""NaN""#, #""nan""#, #""inf""#, #""-Infinity""#, #""0x10""#, #""1e999""#, #""""#, #""12abc""#, "true", "null", "[1]",
    ])
    func expiresInThatIsNoNumberIsAbsent(json: String) throws {
        let response = try classify(200, #"{"access_token":"A","token_type":"Bearer","expires_in":\#(json)}"#).get()
        #expect(response.expiresIn == nil)
    }

    @Test(arguments: ["invalid_grant", "invalid_client"])
    func refusedGrantNeedsLogin(_ code: String) {
        guard case .failure(let error) = classify(400, #"{"error":"\#(code)","error_description":"gone"}"#) else {
            Issue.record("expected failure")
            return
        }
        #expect(error.kind == .rejected)
        #expect(error.code == code)
    }

    @Test func otherProblemsAreTransient() {
        let cases: [(Int, String, String?)] = [
            (500, "oops", nil), (502, "", nil), (503, "{}", "7"), (429, "", "120"), (200, "not json", nil),
            (200, #"{"error":"temporarily_unavailable"}"#, nil), (200, #"{"token_type":"Bearer"}"#, nil),
            (400, #"{"error":"invalid_scope"}"#, nil),
        ]
        for (status, body, retryAfter) in cases {
            guard case .failure(let error) = classify(status, body, retryAfter: retryAfter) else {
                Issue.record("\(status) \(body) should fail")
                continue
            }
            #expect(error.kind == .transient, "\(status) \(body)")
            if let retryAfter { #expect(error.retryAfter == Int(retryAfter)) }
        }
    }

    @Test func aBare400Or401IsARefusalWithWhatTheProviderSaid() {
        let cases: [(Int, String, String)] = [
            (400, "", "HTTP 400 with an empty body"), (401, " \r\n", "HTTP 401 with an empty body"),
            (401, "<html>Unauthorized</html>", "HTTP 401 saying: <html>Unauthorized</html>"),
            (400, #"{"message":"revoked"}"#, #"HTTP 400 saying: {"message":"revoked"}"#),
        ]
        for (status, body, said) in cases {
            guard case .failure(let error) = classify(status, body) else {
                Issue.record("\(status) \(body) should fail")
                continue
            }
            #expect(error.kind == .refused && error.code == nil, "\(status) \(body)")
            #expect(error.reason == "token endpoint answered \(said)")
        }
    }

    @Test func aBareRefusalShowsNoSecretTheRequestCarried() {
        let result = TokenResponse.classify(
            status: 400, retryAfterHeader: nil, body: Array("bad token refresh-secret-123".utf8),
            redactor: Redactor(["refresh-secret-123"]))
        guard case .failure(let error) = result else {
            Issue.record("expected failure")
            return
        }
        #expect(error.kind == .refused && !error.reason.contains("refresh-secret-123"))
    }

    @Test func retryAfterAcceptsHTTPDates() {
        #expect(TokenResponse.parseRetryAfter("Thu, 01 Jan 1970 00:01:40 GMT", now: Date(timeIntervalSince1970: 0)) == 100)
        #expect(TokenResponse.parseRetryAfter("soon", now: Date()) == nil)
        #expect(TokenResponse.imfFixdate("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(TokenResponse.imfFixdate("Tue, 29 Feb 2028 23:59:59 GMT") == 1_835_481_599)
        #expect(TokenResponse.imfFixdate("Sun, 06 Nov 1994 08:49:37 PST") == nil)
        #expect(TokenResponse.imfFixdate("Sun, 06 Foo 1994 08:49:37 GMT") == nil)
    }

    @Test func readsJWTExpiry() {
        func b64(_ s: String) -> String {
            Data(s.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        }
        #expect(JWT.expiry(of: "\(b64(#"{"alg":"none"}"#)).\(b64(#"{"exp":1700000000}"#)).sig") == 1_700_000_000)
        #expect(JWT.expiry(of: "opaque-token") == nil)
    }

    @Test func basicAuthFormEncodesCredentials() {
        let request = FormRequest.refresh(
            refreshToken: Secret("r t"), scope: nil,
            credentials: ClientCredentials(clientID: "a:b", secret: Secret("s&"), authentication: .basic))
        let auth = request.headers.first { $0.0 == "Authorization" }?.1
        #expect(auth == "Basic " + Data("a%3Ab:s%26".utf8).base64EncodedString())
        #expect(request.body.reveal() == "grant_type=refresh_token&refresh_token=r%20t")
    }

    @Test func secretsNeverPrint() {
        let secret = Secret("hunter2")
        var dumped = ""
        dump(secret, to: &dumped)
        let printed = ["\(secret)", String(describing: secret), String(reflecting: secret), dumped,
                       "\(TokenResponse(accessToken: secret, tokenType: "B", expiresIn: 1, refreshToken: secret, scope: nil))"]
        for text in printed { #expect(!text.contains("hunter2"), "\(text)") }
    }
}
