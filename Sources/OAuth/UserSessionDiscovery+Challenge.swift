/// One challenge of a WWW-Authenticate header (RFC 9110 §11.6.1): a scheme
/// with parameters or a token68. A header may hold several challenges, and a
/// response several headers.
struct AuthenticationChallenge: Sendable, Equatable {
    /// Lowercased: schemes are case-insensitive.
    var scheme: String
    /// Names lowercased; the first of a repeated name wins.
    var parameters: [String: String] = [:]
    var token68: String? = nil

    /// Every challenge in `headers`, in order. Malformed text is skipped, not
    /// fatal: a server's odd challenge for another scheme must not hide its
    /// Bearer one.
    static func parse(_ headers: [String]) -> [AuthenticationChallenge] {
        headers.flatMap { header in
            var scanner = Scanner(Array(header.utf8))
            return scanner.challenges()
        }
    }

    /// The first Bearer challenge's `resource_metadata` and `scope` (RFC 9728 §5.1).
    static func bearer(in headers: [String]) -> AuthenticationChallenge? {
        parse(headers).first { $0.scheme == "bearer" }
    }

    struct Scanner {
        let bytes: [UInt8]
        var index = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func challenges() -> [AuthenticationChallenge] {
            var found: [AuthenticationChallenge] = []
            while index < bytes.count {
                skip { $0 == UInt8(ascii: ",") || Self.isSpace($0) }
                guard let scheme = token() else {
                    if index < bytes.count { index += 1 }  // not a token: skip it
                    continue
                }
                var challenge = AuthenticationChallenge(scheme: scheme.lowercased())
                if let space = peek, Self.isSpace(space) {
                    skip(Self.isSpace)
                    if let value = token68() { challenge.token68 = value } else { parameters(into: &challenge) }
                }
                found.append(challenge)
            }
            return found
        }

        /// `name = value` pairs separated by commas, until a bare token (the next challenge's scheme).
        mutating func parameters(into challenge: inout AuthenticationChallenge) {
            while true {
                let mark = index
                skip { $0 == UInt8(ascii: ",") || Self.isSpace($0) }
                guard let name = token() else { return }
                skip(Self.isSpace)
                guard peek == UInt8(ascii: "=") else {
                    index = mark
                    return
                }
                index += 1
                skip(Self.isSpace)
                let value = peek == UInt8(ascii: "\"") ? quoted() : (token() ?? "")
                if challenge.parameters[name.lowercased()] == nil { challenge.parameters[name.lowercased()] = value }
                skip(Self.isSpace)
                guard peek == UInt8(ascii: ",") || peek == nil else { return }
            }
        }

        /// A token68 (`abc==`) ends at a comma or the end; anything else is a parameter list.
        mutating func token68() -> String? {
            let mark = index
            skip { Self.isToken68($0) }
            let end = index
            skip { $0 == UInt8(ascii: "=") }
            let padded = index
            skip(Self.isSpace)
            guard end > mark, peek == nil || peek == UInt8(ascii: ",") else {
                index = mark
                return nil
            }
            return String(decoding: bytes[mark..<padded], as: UTF8.self)
        }

        mutating func token() -> String? {
            let mark = index
            skip(Self.isTokenCharacter)
            return index > mark ? String(decoding: bytes[mark..<index], as: UTF8.self) : nil
        }

        /// A quoted-string with its backslash escapes undone; an unterminated one runs to the end.
        mutating func quoted() -> String {
            index += 1
            var value: [UInt8] = []
            while let byte = peek {
                index += 1
                if byte == UInt8(ascii: "\"") { break }
                if byte == UInt8(ascii: "\\"), let escaped = peek {
                    value.append(escaped)
                    index += 1
                } else {
                    value.append(byte)
                }
            }
            return String(decoding: value, as: UTF8.self)
        }

        mutating func skip(_ matching: (UInt8) -> Bool) {
            while let byte = peek, matching(byte) { index += 1 }
        }

        static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

        /// RFC 9110 tchar.
        static func isTokenCharacter(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default:
                return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
            }
        }

        static func isToken68(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default:
                return Array("-._~+/".utf8).contains(byte)
            }
        }
    }
}
