import TokendInterface
import Varlink

/// What pages may do with a session, as its status says: the origins they
/// may ask from (web-origins) and the resources they may ask tokens for
/// (web-resources). tokend cannot see a page's origin, so this host is where
/// both are enforced.
struct WebAccess: Sendable {
    var origins: [String] = []
    var resources: [String] = []

    init(status: JSONValue?) {
        origins = status?["webOrigins"]?.arrayValue?.compactMap(\.stringValue) ?? []
        resources = status?["webResources"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }
}

/// A request refused here, before tokend is asked: answered as
/// org.varlink.service.PermissionDenied with these parameters.
struct Refusal: Error {
    var parameters: JSONObject = [:]
}

extension Bridge {
    /// A page may ask only from one of the session's web origins, and a token
    /// for a resource only when it is one of the session's web resources (a
    /// scope is tokend's to check: a subset of the session's); cookies move
    /// only for those origins' hosts. Which URLs a page's proofs may name is
    /// tokend's rule (GetProof holds a call marked with its page to the
    /// session's web-resources), not this host's.
    func checkAccess(method: String, session: String, parameters: JSONObject, origin: String?) async throws {
        let refusal: (WebAccess) -> Refusal?
        if Self.pageMethods.contains(method) {
            guard let origin else { throw Refusal() }
            let resource = parameters["resource"]
            if let resource, resource.stringValue == nil { throw Refusal() }
            refusal = { access in
                guard access.origins.contains(origin) else { return Refusal() }
                if let resource = resource?.stringValue, !access.resources.contains(resource) {
                    return Refusal(parameters: [
                        "session": .string(session), "resource": .string(resource),
                        "reason": .string("\(resource) is not one of session \(session)'s web-resources (tokend.toml)"),
                    ])
                }
                return nil
            }
        } else if Self.cookieMethods.contains(method) {
            guard let url = parameters["url"]?.stringValue else { throw Refusal() }
            refusal = { CookieImportRule(webOrigins: $0.origins).allows(url: url) ? nil : Refusal() }
        } else {
            return
        }
        // The cached answer decides a grant; a refusal is checked again against tokend's current configuration.
        if let known = web.withLock({ $0[session] }), refusal(known) == nil { return }
        let reply = try await call(BrokerInterface.method("GetStatus"), ["session": .string(session)])
        let fresh = WebAccess(status: reply["status"])
        web.withLock { $0[session] = fresh }
        if let refused = refusal(fresh) { throw refused }
    }
}
