#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPExchange
import Secrets

extension HTTPTokenEndpoint {
    /// A GET; a redirect is followed (at most 3) only without a bearer token
    /// and only within `url`'s own origin (scheme, host, port): a discovery
    /// document, key set or userinfo answer from another origin would speak
    /// for the issuer without being the issuer.
    func get(_ url: URL, bearer: Secret? = nil) async throws(TokenEndpointError) -> HTTPAnswer {
        var target = url
        for _ in 0...3 {
            var request = HTTPRequest(url: target.absoluteString)
            request.addHeader(name: "Accept", value: "application/json")
            if let bearer { request.addHeader(name: "Authorization", value: "Bearer \(bearer.reveal())") }
            let answer = try await send(request)
            guard [301, 302, 303, 307, 308].contains(answer.status), bearer == nil else { return answer }
            guard let location = answer.location, let next = URL(string: location, relativeTo: target)?.absoluteURL,
                sameOrigin(next, url)
            else {
                let shown = clientRedactor.clean(answer.location ?? "no Location", limit: 120)
                throw .transient("\(target) redirected to another origin (\(shown)); not followed")
            }
            target = next
        }
        throw .transient("\(url) redirected more than 3 times")
    }

    /// The client secret, cut from provider text that answers requests
    /// without one (discovery, JWKS, userinfo) in case it echoes anyway.
    var clientRedactor: Redactor { Redactor([credentials.secret?.reveal() ?? ""]) }

    /// RFC 6454 origins: scheme, host and port (the scheme's default when absent).
    func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        func origin(_ url: URL) -> (String, String, Int)? {
            guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
            return (scheme, host, url.port ?? (scheme == "https" ? 443 : 80))
        }
        guard let first = origin(a), let second = origin(b) else { return false }
        return first == second
    }
}

extension HTTPTokenEndpoint.HTTPAnswer {
    /// A user session's answer, from the guarded exchange.
    init(_ answer: OutboundAnswer) {
        self.init(
            status: answer.status, retryAfter: answer.header("Retry-After"), location: answer.header("Location"),
            setCookie: answer.headers("Set-Cookie"), body: answer.body, dpopNonce: answer.header("DPoP-Nonce"),
            date: answer.header("Date"))
    }

    /// An admin session's answer, straight from the exchange.
    init(_ response: HTTPResponse) {
        self.init(
            status: response.status, retryAfter: response.header("Retry-After"), location: response.header("Location"),
            setCookie: response.headers("Set-Cookie"), body: response.body, dpopNonce: response.header("DPoP-Nonce"),
            date: response.header("Date"))
    }
}
