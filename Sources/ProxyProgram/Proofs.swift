import Synchronization

/// DPoP (RFC 9449) as the proxy speaks it to the upstream: what a proof names
/// of a request, what a resource server's 401 asks, the nonce it gave last.
enum DPoP {
    /// The `htu` of a request to `url`: the URL without its query and fragment (RFC 9449 §4.2). tokend
    /// normalizes the rest (scheme and host in lower case, no default port).
    static func htu(_ url: String) -> Substring {
        url.prefix { $0 != "?" && $0 != "#" }
    }

    /// A nonce a proof may carry (RFC 9449 §8.1: 1*NQCHAR), of a length a header line holds comfortably.
    static func isNonce(_ value: String) -> Bool {
        !value.isEmpty && value.utf8.count <= maximumNonce
            && value.utf8.allSatisfy { $0 == 0x21 || (0x23...0x5B).contains($0) || (0x5D...0x7E).contains($0) }
    }

    /// GetProof's limit (DPoPProof.maximumNonce in tokend, which the proxy does not link): a longer nonce
    /// is one tokend would refuse to put in a proof, so it is never kept.
    static let maximumNonce = 1024

    /// The `error` of the DPoP challenge in a 401's WWW-Authenticate values (RFC 9449 §7.1, RFC 9110
    /// §11.6.1), or nil when none of them is a DPoP challenge with an error.
    static func challengeError(_ values: [String]) -> String? {
        for value in values {
            for challenge in Challenge.parse(value) where challenge.scheme.lowercased() == "dpop" {
                if let error = challenge.parameters["error"] { return error }
            }
        }
        return nil
    }
}

/// One challenge of a WWW-Authenticate value: its scheme and its auth-params (names in lower case).
struct Challenge: Equatable {
    var scheme: String
    var parameters: [String: String] = [:]

    /// The challenges of one field value: `scheme [ token68 / #auth-param ]`, comma-separated. A part that
    /// cannot be read ends the parse: the challenges before it stand.
    static func parse(_ value: String) -> [Challenge] {
        var reader = Reader(Array(value.utf8))
        var challenges: [Challenge] = []
        while true {
            reader.skip { $0 == 0x20 || $0 == 0x09 || $0 == 0x2C }
            guard let scheme = reader.token() else { return challenges }
            var challenge = Challenge(scheme: scheme)
            // auth-params until the next scheme: a token followed by space and a token that is not "=".
            while true {
                let mark = reader.at
                reader.skip { $0 == 0x20 || $0 == 0x09 || $0 == 0x2C }
                guard let name = reader.token() else { break }
                reader.skip { $0 == 0x20 || $0 == 0x09 }
                guard reader.take(0x3D) else {
                    reader.at = mark  // a token without "=": the next challenge's scheme (or a token68)
                    break
                }
                if reader.peek == 0x3D || reader.peek == nil || reader.peek == 0x2C {
                    reader.at = mark  // token68 ends in "=" padding
                    break
                }
                reader.skip { $0 == 0x20 || $0 == 0x09 }
                guard let value = reader.quoted() ?? reader.token() else { return challenges + [challenge] }
                challenge.parameters[name.lowercased()] = value
            }
            if reader.at < reader.bytes.count, challenge.parameters.isEmpty {
                reader.skip { $0 != 0x2C }  // a token68, or what is not read: up to the next comma
            }
            challenges.append(challenge)
        }
    }

    private struct Reader {
        let bytes: [UInt8]
        var at = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var peek: UInt8? { at < bytes.count ? bytes[at] : nil }

        mutating func skip(while matches: (UInt8) -> Bool) {
            while at < bytes.count, matches(bytes[at]) { at += 1 }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard peek == byte else { return false }
            at += 1
            return true
        }

        mutating func token() -> String? {
            let start = at
            skip(while: HeadSyntax.isTokenByte)
            return at > start ? String(decoding: bytes[start..<at], as: UTF8.self) : nil
        }

        /// A quoted-string's content, its quoted-pairs undone.
        mutating func quoted() -> String? {
            guard take(0x22) else { return nil }
            var content: [UInt8] = []
            while let byte = peek {
                at += 1
                switch byte {
                case 0x22: return String(decoding: content, as: UTF8.self)
                case 0x5C:
                    guard let escaped = peek else { return nil }
                    at += 1
                    content.append(escaped)
                default: content.append(byte)
                }
            }
            return nil  // no closing quote
        }
    }
}

/// What the proxy keeps of DPoP across requests: whether the session's tokens are DPoP-bound, the
/// upstream's last nonce, and when each kind of tokend's refusals was logged.
final class ProofState: Sendable {
    private struct State {
        var bound = false
        var nonce: String?
        /// Per kind of refusal: when it was last logged, and how many came since.
        var logged: [String: (at: Double, since: Int)] = [:]
    }

    /// A kind of refusal is logged at most this often (seconds): a bound that refuses many requests, or a
    /// key that cannot sign, is one line in the log, not one per request.
    static let logInterval = 60.0

    private let state = Mutex(State())

    /// The last token tokend gave was DPoP-bound: a request without cached answers asks GetProof (which
    /// gives the token too) rather than GetToken.
    var bound: Bool {
        get { state.withLock { $0.bound } }
        set { state.withLock { $0.bound = newValue } }
    }

    /// The upstream's last DPoP-Nonce, for the next proofs.
    var nonce: String? { state.withLock { $0.nonce } }

    /// The upstream gave a nonce (in any answer): the next proofs carry it.
    func keep(nonce: String) {
        guard DPoP.isNonce(nonce) else { return }
        state.withLock { $0.nonce = nonce }
    }

    /// tokend refused `nonce` for a proof: it is forgotten if it is still the one kept, so the next
    /// request goes without one and the upstream can give a new one.
    func forget(nonce: String) {
        state.withLock { if $0.nonce == nonce { $0.nonce = nil } }
    }

    /// A refusal of `kind` at `now`: the refusals of that kind since it was last logged (this one
    /// included) when it is to be logged now, else nil.
    func toLog(_ kind: String, now: Double) -> Int? {
        state.withLock { state in
            if var entry = state.logged[kind], now - entry.at < Self.logInterval {
                entry.since += 1
                state.logged[kind] = entry
                return nil
            }
            if state.logged.count >= 64 { state.logged.removeAll() }
            let since = (state.logged[kind]?.since ?? 0) + 1
            state.logged[kind] = (now, 0)
            return since
        }
    }
}

/// What a proof names of a request: its method (`htm`) and upstream URL without query or fragment (`htu`).
struct ProofTarget: Sendable, Equatable {
    let method: String
    let htu: String
}

extension Exchange {
    /// This request's method as the client sent it, and its upstream URL as `htu`.
    var proofTarget: ProofTarget {
        ProofTarget(method: head.fields.string(head.methodBytes), htu: String(DPoP.htu(url)))
    }
}
