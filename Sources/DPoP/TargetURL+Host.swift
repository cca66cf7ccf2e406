extension TargetURL {
    /// Why the host is not written plainly, nil when it is. A host is never
    /// interpreted (decoded, resolved, read as a number): two URLs name one
    /// host only when they write it the same, so any spelling that a resolver
    /// or an HTTP library reads as something else is refused rather than
    /// compared. Plain is:
    /// - a name of ASCII letters, digits, "-", "_" and "." with no empty label
    ///   (no trailing dot): not `%`-encoded, not an internationalized name
    ///   other than in its A-label (`xn--`) form;
    /// - an IPv4 address as four decimal numbers without leading zeros, when
    ///   the last label is a number (`127.1`, `2130706433`, `0x7f000001`,
    ///   `0177.0.0.1` are refused: libraries read them as 127.0.0.1);
    /// - an IPv6 address in RFC 5952's form, without zone, that does not
    ///   carry an IPv4 address (v4-mapped `::ffff:0:0/96`, v4-compatible,
    ///   v4-translated, NAT64 `64:ff9b::/96`).
    public var hostProblem: String? {
        let bytes = Array(host.utf8)
        if bytes.first == UInt8(ascii: "[") { return Self.ipv6Problem(bytes.dropFirst().dropLast(), host: host) }
        if bytes.contains(where: { $0 >= 0x80 }) {
            return "the host \(host) is not plain ASCII: name an internationalized host by its A-label (xn--…)"
        }
        if bytes.contains(UInt8(ascii: "%")) { return "the host \(host) contains %: a host is taken as written, never decoded" }
        let nameBytes = Set("abcdefghijklmnopqrstuvwxyz0123456789-_.".utf8)
        guard bytes.allSatisfy(nameBytes.contains) else { return "the host \(host) is not a name of letters, digits, -, _ and ." }
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        guard !labels.contains(where: \.isEmpty) else { return "the host \(host) has an empty label (a leading or trailing dot)" }
        guard let last = labels.last, Self.isNumber(last) else { return nil }
        let dottedDecimal = labels.count == 4 && labels.allSatisfy { label in
            label.allSatisfy(\.isASCIIDigit) && label.count <= 3 && (label == "0" || label.first != "0") && Int(label)! <= 255
        }
        return dottedDecimal
            ? nil
            : "the host \(host) is a number not written as an IPv4 address's four decimal parts without leading zeros "
                + "(resolvers read 127.1, 2130706433, 0x7f000001 and 0177.0.0.1 as 127.0.0.1)"
    }

    /// A label a URL parser takes as a number: decimal digits, or hex after 0x (the WHATWG URL standard's
    /// "ends in a number").
    static func isNumber(_ label: Substring) -> Bool {
        if label.allSatisfy(\.isASCIIDigit) { return true }
        let lowered = label.lowercased()
        return lowered.hasPrefix("0x") && lowered.dropFirst(2).allSatisfy(\.isHexDigit)
    }

    static func ipv6Problem(_ inner: ArraySlice<UInt8>, host: String) -> String? {
        let text = String(decoding: inner, as: UTF8.self)
        if inner.contains(UInt8(ascii: "%")) { return "the host \(host) has a zone identifier (%25…), which names no host elsewhere" }
        guard let groups = ipv6Groups(text) else { return "the host \(host) is not an IPv6 address" }
        if let carried = carriedIPv4(groups) {
            return "the host \(host) is an IPv6 address that carries the IPv4 address \(carried) (v4-mapped, "
                + "v4-compatible, v4-translated or NAT64): name that address itself"
        }
        let canonical = canonicalIPv6(groups)
        return text == canonical ? nil : "the host \(host) is not written in RFC 5952's form, which is [\(canonical)]"
    }

    /// The eight 16-bit groups of an IPv6 address's text (RFC 4291 §2.2), nil when it is not one.
    static func ipv6Groups(_ text: String) -> [UInt16]? {
        let halves = text.split(separator: "::", maxSplits: 1, omittingEmptySubsequences: false)
        guard halves.count <= 2, !halves.contains(where: { $0.contains("::") }) else { return nil }
        func groups(_ part: Substring, last: Bool) -> [UInt16]? {
            guard !part.isEmpty else { return [] }
            var out: [UInt16] = []
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false)
            for (index, piece) in pieces.enumerated() {
                if last, index == pieces.count - 1, piece.contains(".") {
                    guard let v4 = ipv4Bytes(piece) else { return nil }
                    out += [UInt16(v4[0]) << 8 | UInt16(v4[1]), UInt16(v4[2]) << 8 | UInt16(v4[3])]
                } else {
                    guard (1...4).contains(piece.count), let value = UInt16(piece, radix: 16), piece.allSatisfy(\.isHexDigit) else {
                        return nil
                    }
                    out.append(value)
                }
            }
            return out
        }
        if halves.count == 1 {
            guard let all = groups(halves[0], last: true), all.count == 8 else { return nil }
            return all
        }
        guard let head = groups(halves[0], last: false), let tail = groups(halves[1], last: true), head.count + tail.count <= 7 else {
            return nil
        }
        return head + Array(repeating: 0, count: 8 - head.count - tail.count) + tail
    }

    static func ipv4Bytes(_ text: Substring) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        let bytes = parts.compactMap { part in part.allSatisfy(\.isASCIIDigit) && (1...3).contains(part.count) ? UInt8(part) : nil }
        return bytes.count == 4 ? bytes : nil
    }

    /// The IPv4 address an IPv6 address carries in its last 32 bits where the stack or a translator
    /// reaches that IPv4 address through it; nil for other addresses (and for :: and ::1).
    static func carriedIPv4(_ g: [UInt16]) -> String? {
        let zeros = { (range: Range<Int>) in range.allSatisfy { g[$0] == 0 } }
        let mapped = zeros(0..<5) && g[5] == 0xFFFF
        let translated = zeros(0..<4) && g[4] == 0xFFFF && g[5] == 0
        let compatible = zeros(0..<6) && !(g[6] == 0 && g[7] <= 1)
        let nat64 = g[0] == 0x64 && g[1] == 0xFF9B && zeros(2..<6)
        guard mapped || translated || compatible || nat64 else { return nil }
        return [g[6] >> 8, g[6] & 0xFF, g[7] >> 8, g[7] & 0xFF].map(String.init).joined(separator: ".")
    }

    /// RFC 5952 §4: hex in lower case without leading zeros, the longest run of two or more zero groups
    /// (the first of equals) as "::".
    static func canonicalIPv6(_ groups: [UInt16]) -> String {
        var best = (start: -1, length: 0)
        var index = 0
        while index < 8 {
            guard groups[index] == 0 else {
                index += 1
                continue
            }
            var end = index
            while end < 8, groups[end] == 0 { end += 1 }
            if end - index > best.length { best = (index, end - index) }
            index = end
        }
        let hex = groups.map { String($0, radix: 16) }
        guard best.length >= 2 else { return hex.joined(separator: ":") }
        return hex[..<best.start].joined(separator: ":") + "::" + hex[(best.start + best.length)...].joined(separator: ":")
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isWholeNumber }
}
