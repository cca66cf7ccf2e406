import ArgumentParser
import Config
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

/// What tokenctl says when tokend refuses to add or remove a session of a
/// user's own: the exit code and the fix. nil: the error is not one of these
/// calls' own, and `Common.run` says what it says of any call.
enum UserSessionAdvice {
    static let allowedByAdmin =
        "The administrator allows sessions of one's own in [user-sessions] of tokend.toml: this user (or a group of "
        + "theirs) in users or groups, the server in issuers; then tokend is reloaded (tokend.toml(5))."

    static func add(_ error: TokendClientError, name: String) -> (code: Int32, advice: String)? {
        switch error {
        case .sessionExists:
            return (Exit.failure, "`tokenctl remove \(name)` first (it revokes the old login), or add it under another name.")
        case .sessionRefused, .permissionDenied:
            return (Exit.permissionDenied, "Ask the administrator. " + allowedByAdmin)
        case .tooManySessions:
            return (Exit.failure,
                "`tokenctl sessions` lists yours (those with an owner); `tokenctl remove NAME` frees one. "
                    + "How many each person may hold is per-person in [user-sessions] of tokend.toml.")
        case .rateLimited(_, let retryAfter):
            return (Exit.rateLimited,
                "Adding sessions is bounded per person (a burst of 5, then one every 2 minutes): the next add is "
                    + "allowed in \(retryAfter) s.")
        case .discoveryFailed(let step, _, let status, _):
            return (Exit.failure, discoveryAdvice(step: step, answered: status != nil))
        case .addressRefused:
            return (Exit.permissionDenied,
                "tokend makes these requests from its own place in the network, so for a user it connects only over "
                    + "https, and never to link-local, cloud metadata or private addresses: give the server's public "
                    + "https URL. A server on a private address needs the administrator to name its host in issuers "
                    + "of [user-sessions] (a local http server: allow-loopback-http).")
        case .invalidParameter("name"):
            return (Exit.usage, "A session's name is letters, digits, '-', '_' and '.', starting with a letter or digit.")
        case .invalidURL:
            return (Exit.usage, "Give the server's https URL, e.g. --resource https://mcp.example.com/mcp.")
        default:
            return nil
        }
    }

    /// What tokenctl says the error is, when the client's words do not fit these calls.
    static func message(_ error: TokendClientError) -> String {
        if case .rateLimited = error { return "you added sessions faster than one person may" }
        return "\(error)"
    }

    /// The fix for a failed discovery step, as io.tokend.Broker names the steps.
    static func discoveryAdvice(step: String, answered: Bool) -> String {
        let unanswered = answered ? "" : "Nothing answered there: check the name, and that tokend's host reaches it. "
        switch step {
        case "challenge", "resource-metadata":
            return unanswered
                + "The resource must answer 401 with a WWW-Authenticate resource_metadata challenge, or serve its "
                + "metadata at /.well-known/oauth-protected-resource (RFC 9728): check that the URL is the server's "
                + "endpoint itself (an MCP server's is often https://HOST/mcp), or name the authorization server "
                + "with --issuer URL."
        case "server-metadata":
            return unanswered
                + "The authorization server's metadata (RFC 8414, or OpenID discovery) is not there: give --issuer "
                + "the server's base URL, without /.well-known."
        case "registration":
            return unanswered
                + "The authorization server did not register a client for tokend (RFC 7591): register one there "
                + "yourself, with the redirect URI http://127.0.0.1:PORT/callback, and pass --client-id ID."
        default:
            return unanswered
                + "The server did not do what its metadata says: try again later, or tell its operator what this "
                + "message says."
        }
    }

    /// `remove`'s refusals. `yours`: the bare names of this user's sessions, for the message.
    static func remove(_ error: TokendClientError, name: String, yours: [String]) -> (code: Int32, advice: String)? {
        switch error {
        case .noSuchSession:
            // tokend answers so for another person's session too: it is not there for the caller.
            let list = yours.isEmpty ? "you have added none" : "yours: " + yours.joined(separator: ", ")
            return (Exit.noSuchSession,
                "No session you added is named \(name) (\(list)). The sessions of tokend.toml are the administrator's, "
                    + "removed there; an administrator removes another person's as USER/NAME.")
        case .permissionDenied, .sessionRefused:
            return (Exit.permissionDenied,
                "Only a session's owner and tokend's administrators may remove a session a user added.")
        case .upstreamUnavailable, .loginFailed:
            return (Exit.upstreamUnavailable,
                "The session is kept until its tokens are revoked: try again later, or `tokenctl remove \(name) --no-revoke` "
                    + "to forget it without revoking (the server keeps the grant until it expires).")
        default:
            return nil
        }
    }

    /// The login `add` suggests: the browser, the way a session added with a loopback redirect logs in.
    static func nextLogin(name: String, flows: [String]?) -> String {
        let flag = " --session \(name)"
        if flows == nil || flows!.contains("browser") { return "tokenctl login\(flag) --browser" }
        return StatusAdvice.logins(flows, flag: flag)[0]
    }

    /// Checks `add`'s and `remove`'s NAME: the bare name the owner gives (tokend makes it USER/NAME),
    /// by tokend's own rule for session names.
    static func checkName(_ name: String) throws {
        guard Configuration.isValidSessionName(name) else {
            throw ValidationError(
                "session name \"\(name)\": use letters, digits, '-', '_' and '.', starting with a letter or digit, "
                    + "at most 64 characters" + (name.includes("/") ? " (your sessions are named without USER/; tokend adds it)" : ""))
        }
    }

    /// Checks a URL `add` passes on: absolute, http or https, with a host (tokend decides whether it connects).
    static func checkURL(_ text: String, option: String) throws {
        guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(), ["https", "http"].contains(scheme),
            let host = url.host, !host.isEmpty, url.fragment == nil
        else {
            throw ValidationError("\(option) \(text): give an https URL, e.g. \(option) https://mcp.example.com/mcp")
        }
    }
}
