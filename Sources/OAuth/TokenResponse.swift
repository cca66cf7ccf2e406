import CookieJar
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Varlink
import Loopback
import Secrets

/// A successful token-endpoint answer (RFC 6749 §5.1).
public struct TokenResponse: Sendable {
    public var accessToken: Secret
    public var tokenType: String
    /// `expires_in`, accepted as a number or a numeric string.
    public var expiresIn: Int?
    /// Present when the server rotated the refresh token.
    public var refreshToken: Secret?
    public var scope: String?
    /// The OpenID Connect ID token, when the server sent one.
    public var idToken: Secret?

    public init(
        accessToken: Secret, tokenType: String, expiresIn: Int?, refreshToken: Secret?, scope: String?,
        idToken: Secret? = nil
    ) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.refreshToken = refreshToken
        self.scope = scope
        self.idToken = idToken
    }
}

/// Why a token request did not yield a token.
public struct TokenEndpointError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// Refused with an OAuth error code no retry changes (RFC 6749 §5.2):
        /// `invalid_grant` (only a new login helps), or the client itself
        /// (`refusesClient`: configuration or the host clock can fix it, and
        /// the grant may well be fine).
        case rejected
        /// Worth retrying later: network, timeout, 5xx, 429, malformed answers,
        /// and errors that configuration can fix without losing the grant.
        case transient
        /// A 400 or 401 without an OAuth error code (an empty body, an HTML
        /// page): how some providers refuse a revoked grant, and how a
        /// middlebox in trouble may answer too. A refresh confirms it once.
        case refused
    }

    public let kind: Kind
    /// RFC 6749 error code when the server sent one.
    public let code: String?
    /// A human-readable reason; never contains a token.
    public let reason: String
    /// Seconds the server asked us to wait (Retry-After).
    public let retryAfter: Int?

    public static func rejected(code: String, reason: String) -> TokenEndpointError {
        TokenEndpointError(kind: .rejected, code: code, reason: reason, retryAfter: nil)
    }

    public static func transient(_ reason: String, code: String? = nil, retryAfter: Int? = nil) -> TokenEndpointError {
        TokenEndpointError(kind: .transient, code: code, reason: reason, retryAfter: retryAfter)
    }

    public static func refused(_ reason: String) -> TokenEndpointError {
        TokenEndpointError(kind: .refused, code: nil, reason: reason, retryAfter: nil)
    }

    public var description: String { reason }

    /// The code of an error about an endpoint the session does not have (not
    /// configured, and not in the provider's discovery document): tokend's own, never the provider's.
    public static let missingEndpoint = "tokend:missing_endpoint"

    /// The provider will not issue a token for what the request asked
    /// (RFC 8707 `invalid_target`, RFC 6749 `invalid_scope`): the grant is fine.
    public var refusesTarget: Bool {
        code == "invalid_target" || code == "invalid_scope"
    }

    /// The provider refused tokend's client, not the grant (`invalid_client`,
    /// `unauthorized_client`): a wrong secret, key, key id or a host clock
    /// off by more than an assertion's life. A refresh keeps the refresh token.
    public var refusesClient: Bool {
        kind == .rejected && (code == "invalid_client" || code == "unauthorized_client")
    }

    /// The same error with every secret the request carried cut out of its
    /// reason and code, in every form (Redactor).
    public func redacting(_ redactor: Redactor) -> TokenEndpointError {
        guard !redactor.isEmpty else { return self }
        return TokenEndpointError(
            kind: kind, code: code.map(redactor.redact), reason: redactor.redact(reason), retryAfter: retryAfter)
    }
}

extension TokenResponse {
    /// Turns an HTTP answer from the token endpoint into a token or a
    /// classified error, the provider's text redacted of the request's secrets
    /// before it is shortened.
    public static func classify(
        status: Int, retryAfterHeader: String?, body: [UInt8], now: Date = Date(), redactor: Redactor = .none
    ) -> Result<TokenResponse, TokenEndpointError> {
        let retryAfter = retryAfterHeader.flatMap { parseRetryAfter($0, now: now) }
        let json = providerObject(body)
        if let code = json?["error"]?.stringValue {
            return .failure(classifyError(code: code, description: json?["error_description"]?.stringValue,
                status: status, retryAfter: retryAfter, redactor: redactor))
        }
        switch status {
        case 200..<300:
            guard let json else { return .failure(.transient("token endpoint answered \(status) with a body that is not a JSON object")) }
            return parseSuccess(json)
        case 429:
            return .failure(.transient("token endpoint is rate limiting (429)", retryAfter: retryAfter))
        case 400, 401:
            let text = redactor.clean(String(decoding: body, as: UTF8.self)).trimming(.whitespaces)
            let said = text.isEmpty ? "with an empty body" : "saying: \(text)"
            return .failure(.refused("token endpoint answered HTTP \(status) \(said)"))
        default:
            return .failure(.transient("token endpoint answered HTTP \(status)", retryAfter: retryAfter))
        }
    }

    static func classifyError(
        code: String, description: String?, status: Int, retryAfter: Int?, redactor: Redactor = .none
    ) -> TokenEndpointError {
        let detail = description.map { ": \(redactor.clean($0))" } ?? ""
        switch code {
        case "invalid_grant", "invalid_client", "unauthorized_client":
            return .rejected(code: code, reason: "token endpoint refused the refresh (\(code)\(detail))")
        default:
            let shown = redactor.clean(code)
            return .transient(
                "token endpoint answered \(status) with error \(shown)\(detail)", code: shown, retryAfter: retryAfter)
        }
    }

    static func parseSuccess(_ json: JSONObject) -> Result<TokenResponse, TokenEndpointError> {
        guard let access = json["access_token"]?.stringValue, !access.isEmpty else {
            return .failure(.transient("token endpoint answer has no access_token"))
        }
        let refresh = json["refresh_token"]?.stringValue.flatMap { $0.isEmpty ? nil : Secret($0) }
        return .success(
            TokenResponse(
                accessToken: Secret(access), tokenType: json["token_type"]?.stringValue ?? "Bearer",
                expiresIn: json["expires_in"]?.lenientInt, refreshToken: refresh, scope: json["scope"]?.stringValue,
                idToken: json["id_token"]?.stringValue.flatMap { $0.isEmpty ? nil : Secret($0) }))
    }

    /// Retry-After as delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
    public static func parseRetryAfter(_ value: String, now: Date) -> Int? {
        let trimmed = value.trimming(.whitespaces)
        if let seconds = Int(trimmed) { return max(0, seconds) }
        guard let date = imfFixdate(trimmed) else { return nil }
        return max(0, Int((date - now.timeIntervalSince1970).rounded(.up)))
    }

    /// "Sun, 06 Nov 1994 08:49:37 GMT" (RFC 9110 §5.6.7) as Unix seconds, read
    /// by the cookie-date algorithm (Foundation's DateFormatter leaks on Linux,
    /// seen by the fuzzer's leak checker); HTTP-dates are always GMT.
    static func imfFixdate(_ text: String) -> Double? {
        guard text.hasSuffix(" GMT") else { return nil }
        return CookieDate.parse(text).map(Double.init)
    }

    /// Server-provided text that answers no request carrying a secret,
    /// shortened and stripped of control characters so it is safe to log and return.
    static func sanitize(_ text: String) -> String {
        Redactor.none.clean(text)
    }
}
