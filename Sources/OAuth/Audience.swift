#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import JWTKit
import Secrets

/// What the provider says a token's audience is (RFC 7519 `aud`, RFC 7662
/// `aud`), read from the token itself when it is a JWT, else by asking the
/// introspection endpoint. An access token comes straight from the token
/// endpoint over the connection tokend opened, so its claims are the
/// provider's word without a signature check: they only ever narrow what
/// tokend takes the token to cover.
public enum AudienceReading: Sendable, Equatable {
    /// The token's `aud` values.
    case stated([String], source: String)
    /// The provider did not say (an opaque token and no introspection); why.
    case unknown(String)

    /// The `aud` claim of a JWT: one string or an array of them; nil when the token is not a JWT with `aud`.
    public static func jwtAudience(of token: String) -> [String]? {
        guard let payload = try? DefaultJWTParser().parse(Array(token.utf8), as: AudiencePayload.self).payload,
            let audience = payload.aud?.value, !audience.isEmpty, !audience.contains(where: \.isEmpty)
        else { return nil }
        return audience
    }

    /// `aud` from an introspection answer (RFC 7662 §2.2): a string or an array of strings; nil when
    /// absent, empty, or not all strings (an audience that restricts nothing says nothing).
    static func introspected(_ body: [UInt8]) -> (active: Bool, audience: [String]?)? {
        guard let object = providerObject(body) else { return nil }
        // `true`, or the number 1 some servers write for it.
        let active = object["active"]?.boolValue ?? (object["active"]?.intValue == 1)
        switch object["aud"] {
        case .string(let one) where !one.isEmpty: return (active, [one])
        case .array(let many):
            let strings = many.compactMap(\.stringValue).filter { !$0.isEmpty }
            return (active, strings.isEmpty || strings.count != many.count ? nil : strings)
        default: return (active, nil)
        }
    }

    struct AudiencePayload: JWTPayload {
        var aud: AudienceClaim?
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }
}

extension HTTPTokenEndpoint {
    /// The token's audience: its JWT `aud`, else the introspection endpoint's
    /// answer (with the client's own authentication), else unknown.
    public func audience(of accessToken: Secret) async -> AudienceReading {
        if let stated = AudienceReading.jwtAudience(of: accessToken.reveal()) {
            return .stated(stated, source: "the token's aud claim")
        }
        guard let url = current.introspection else {
            return .unknown("the token is not a JWT and the provider names no introspection endpoint")
        }
        guard credentials.secret != nil || credentials.key != nil else {
            return .unknown("the token is not a JWT and a public client cannot use the introspection endpoint")
        }
        let form = FormRequest.build([("token", accessToken.reveal()), ("token_type_hint", "access_token")], credentials)
        let answer: HTTPAnswer
        do {
            answer = try await post(form, to: url)
        } catch {
            return .unknown("the introspection endpoint could not be reached: \(error.reason)")
        }
        guard answer.status == 200, let read = AudienceReading.introspected(answer.body) else {
            return .unknown("the introspection endpoint answered \(answer.status)")
        }
        guard read.active, let audience = read.audience else {
            return .unknown(read.active ? "the introspection answer has no aud" : "the introspection endpoint calls the token inactive")
        }
        return .stated(audience, source: "the introspection endpoint")
    }
}
