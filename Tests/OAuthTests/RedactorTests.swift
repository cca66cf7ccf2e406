import Foundation
import Testing
@testable import OAuth
import Secrets

/// A provider that echoes what it received, in any encoding, leaks none of it.
@Suite struct RedactorTests {
    static let refresh = "rt/45chars+with=odd~bytes_and/slashes.0123456"
    static let secret = "s3cr/t+pa ss=word"
    let redactor = Redactor([Self.refresh, Self.secret])

    func base64(_ text: String) -> String { Data(text.utf8).base64EncodedString() }

    func leaks(_ text: String) -> Bool {
        let clean = redactor.redact(text)
        return clean.contains("rt/45chars") || clean.contains("0123456") || clean.contains("s3cr")
    }

    @Test func rawAndPercentEncodedInEitherCaseAndFormEncoded() {
        let form = FormRequest.formEncode(Self.refresh)
        for text in [
            "echo \(Self.refresh) end", "echo \(form) end", "echo \(form.lowercased()) end",
            "refresh_token=rt%2f45chars%2bwith%3dodd~bytes_and%2Fslashes.0123456&x",
            "client_secret=s3cr%2Ft%2Bpa+ss%3Dword", "double %2525 rt%252F45chars%252Bwith%253Dodd~bytes_and%252Fslashes.0123456",
            #"json {"t":"rt\/45chars+with=odd~bytes_and\/slashes.0123456"}"#,
        ] {
            #expect(!leaks(text), "\(text)")
            #expect(redactor.redact(text).contains(Redactor.marker))
        }
    }

    @Test func base64AndBase64URLWithAndWithoutPadding() {
        let standard = base64(Self.refresh)
        let url = standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        for text in [standard, url, String(url.prefix { $0 != "=" })] {
            let clean = redactor.redact("token \(text) end")
            #expect(!clean.contains(String(text.dropFirst(2).prefix(12))), "\(clean)")
        }
    }

    /// `Basic base64(id:secret)`: the secret starts at any offset of a base64 run.
    @Test(arguments: ["a", "ab", "abc", "client-id", "cli"])
    func basicCredentialsAtEveryAlignment(_ clientID: String) {
        for secret in [Self.secret, FormRequest.formEncode(Self.secret)] {
            let clean = redactor.redact("Authorization: Basic " + base64("\(clientID):\(secret)"))
            // Left: the characters that carry `id:` (and one that mixes in the
            // secret's first bits), then at most a last mixed character and padding.
            let parts = clean.dropFirst("Authorization: Basic ".count).components(separatedBy: Redactor.marker)
            #expect(parts.count == 2, "\(clean)")
            #expect(parts[0].count <= (8 * (clientID.count + 1) + 5) / 6, "\(clean)")
            #expect(parts[1].count <= 3, "\(clean)")
        }
    }

    /// A provider's HTML 400 page echoes the request with character references.
    @Test func htmlCharacterReferences() {
        let redactor = Redactor([Self.refresh, "a&b/c+d=e&f/g+h=i"])
        for text in [
            "<p>rt&#x2F;45chars&#43;with&#61;odd~bytes&#95;and&#47;slashes&period;0123456</p>",
            "<p>rt&#X2f;45chars&#x2B;with&equals;odd~bytes&lowbar;and&sol;slashes&#46;0123456</p>",
            "<p>rt&#0047;45chars&plus;with&#61odd~bytes&#95and&#47slashes&#46;0123456</p>",
            "<pre>refresh_token=rt%2F45chars%2Bwith%3Dodd~bytes_and%2Fslashes.0123456&amp;grant_type=x</pre>",
            "<pre>a&amp;b&#x2F;c&#43;d&#61;e&amp;f&#47;g&#43;h&#61;i</pre>",
        ] {
            let clean = redactor.redact(text)
            for piece in ["45chars", "with", "odd~", "slashes", "0123456", "b&#x2F;c", "f&#47;g"] {
                #expect(!clean.contains(piece), "\(clean)")
            }
            #expect(clean.contains(Redactor.marker))
        }
        #expect(redactor.redact("Tom &amp; Jerry &#x3C;b&#x3E;") == "Tom &amp; Jerry &#x3C;b&#x3E;")
    }

    /// The issue's case: a description cut to 200 characters before redaction left 26 characters.
    @Test func aDescriptionIsRedactedBeforeItIsCut() {
        let refresh = String(repeating: "R", count: 20) + "abcdefghijklmnopqrstuvwxy"
        let redactor = Redactor([refresh])
        let description = String(repeating: "x", count: 174) + refresh + " and more"
        let clean = redactor.clean(description)
        #expect(clean.count <= 200)
        #expect(!clean.contains("abcdefghijkl"))
        #expect(!clean.contains("RRRRRRRRRRRR"))
    }

    @Test func aPieceOfTwelveOrMoreCharactersLeftByAnotherCutIsRemoved() {
        let piece = String(Self.refresh.prefix(26))
        #expect(redactor.redact("cut: \(piece)") == "cut: \(Redactor.marker)")
        let base64Piece = String(base64(Self.refresh).prefix(16))
        #expect(!redactor.redact("cut: \(base64Piece)").contains(base64Piece.prefix(12)))
        #expect(redactor.redact("short: rt/45chars") == "short: rt/45chars", "10 characters are not a fragment")
    }

    @Test func controlCharactersCannotSplitASecret() {
        let split = Self.refresh.prefix(20) + "\u{1}" + Self.refresh.dropFirst(20)
        #expect(!redactor.clean(String(split)).contains("0123456"))
    }

    @Test func textWithoutSecretsIsUnchanged() {
        let text = "invalid_grant: the refresh token has expired (%2F + base64 QUJD)"
        #expect(redactor.redact(text) == text)
        #expect(Redactor.none.clean(text) == text)
    }

    @Test func tokenEndpointErrorsAreRedactedBeforeTheyAreShortened() {
        let form = FormRequest.refresh(
            refreshToken: Secret(Self.refresh), scope: nil,
            credentials: ClientCredentials(clientID: "cli", secret: Secret(Self.secret), authentication: .basic))
        let basic = form.headers.first { $0.0 == "Authorization" }!.1
        let description = String(repeating: "x", count: 180) + Self.refresh + " " + basic + " "
            + base64(Self.refresh) + " " + FormRequest.formEncode(Self.refresh).lowercased()
        let body = Array(#"{"error":"invalid_request","error_description":"\#(description)"}"#.utf8)
        guard case .failure(let error) = TokenResponse.classify(
            status: 400, retryAfterHeader: nil, body: body, redactor: form.redactor)
        else {
            Issue.record("expected failure")
            return
        }
        #expect(!error.reason.contains("rt/45"))
        #expect(!error.redacting(form.redactor).reason.contains(String(Self.refresh.prefix(12))))
    }

    @Test func deviceAuthorizationErrorsAreRedacted() {
        let credentials = ClientCredentials(clientID: "cli", secret: Secret(Self.secret), authentication: .basic)
        let form = FormRequest.deviceAuthorization(scope: nil, credentials: credentials)
        let basic = form.headers.first { $0.0 == "Authorization" }!.1
        let body = Array(#"{"error":"invalid_client","error_description":"bad \#(basic) \#(Self.secret)"}"#.utf8)
        #expect {
            try DeviceAuthorization.parse(status: 401, body: body, redactor: form.redactor)
        } throws: { error in
            let reason = (error as? TokenEndpointError)?.reason ?? ""
            return !reason.contains("s3cr") && !reason.contains(String(basic.dropFirst(6 + 8).prefix(8)))
                && reason.contains(Redactor.marker)
        }
    }
}
