extension TargetURL {
    /// Why a server might take this path for a place other than the one its text is under, nil when no
    /// server would: a "." or ".." segment, written plainly or as %2E, with path parameters after it or not
    /// (Tomcat, Jetty and Spring drop what follows ";", also written %3B, and resolve "..;x" as ".."), or
    /// an escaped "/" or "\" (%2F, %5C), which some servers decode before they resolve.
    public var pathProblem: String? {
        let lowered = path.lowercased()
        if lowered.contains("%2f") || lowered.contains("%5c") {
            return "its path has an escaped / or \\ (%2F, %5C), which a server may decode into another path"
        }
        let dotted = path.split(separator: "/", omittingEmptySubsequences: false).contains { segment in
            let plain = segment.lowercased().replacing("%2e", with: ".")
            let name = plain.replacing("%3b", with: ";").prefix { $0 != ";" }
            return name == "." || name == ".."
        }
        return dotted ? "its path has a . or .. segment, which a server resolves to another path" : nil
    }

    /// The form in which every spelling a server may take for one of the
    /// provider's endpoints is one: the host without its trailing dot, with no
    /// scheme (a proxy that ends TLS may take http for https) and no port 80 or
    /// 443; a path without `;` (or `%3B`) parameters, empty segments or a
    /// trailing slash, dot segments resolved, escapes of unreserved characters
    /// decoded (twice over: some servers decode twice), each segment without
    /// trailing dots, spaces, tabs or NULs (servers that trim them), in lower
    /// case. Two URLs with the same key may name one resource; ones that differ
    /// cannot be told to be the same. Used only to refuse, where a wider match
    /// refuses more.
    public var endpointKey: String {
        var host = self.origin
        if let scheme = host.firstRange(of: "://") { host = String(host[scheme.upperBound...]) }
        for port in [":80", ":443"] where host.hasSuffix(port) { host.removeLast(port.count) }
        host = host.replacing(".:", with: ":")
        if host.hasSuffix(".") { host.removeLast() }
        var segments: [String] = []
        for raw in path.split(separator: "/", omittingEmptySubsequences: true) {
            var segment = String(raw)
            for _ in 0..<3 {
                let decoded = Self.normalizingEscapes(segment.replacing("%25", with: "%"))
                if decoded == segment { break }
                segment = decoded
            }
            segment = String(segment.replacing("%3B", with: ";").prefix { $0 != ";" })
            while let trimmed = Self.trailingTrimmed(segment) { segment = trimmed }
            switch segment {
            case "", ".": continue
            case "..": _ = segments.popLast()
            default: segments.append(segment.lowercased())
            }
        }
        return host + "/" + segments.joined(separator: "/")
    }

    /// `segment` without one trailing dot, space, tab or NUL (written or escaped), nil when it has none;
    /// "." and ".." are left as they are.
    static func trailingTrimmed(_ segment: String) -> String? {
        guard segment != ".", segment != ".." else { return nil }
        for suffix in [".", " ", "%20", "%09", "%00"] where segment.hasSuffix(suffix) {
            return String(segment.dropLast(suffix.count))
        }
        return nil
    }

    /// `text` with its escapes of unreserved characters (RFC 3986 §2.3) decoded and the hex digits of its
    /// other escapes in upper case (§6.2.2.1, §6.2.2.2).
    static func normalizingEscapes(_ text: String) -> String {
        var bytes = Array(text.utf8)[...]
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        while let byte = bytes.popFirst() {
            guard byte == UInt8(ascii: "%"), bytes.count >= 2, isHexDigit(bytes[bytes.startIndex]),
                isHexDigit(bytes[bytes.startIndex + 1]),
                let value = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16)
            else {
                out.append(byte)
                continue
            }
            bytes = bytes.dropFirst(2)
            if isUnreserved(value) {
                out.append(value)
            } else {
                out.append(contentsOf: [UInt8(ascii: "%"), hexDigit(value >> 4), hexDigit(value & 0xF)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// RFC 3986 §5.2.4's remove_dot_segments.
    static func removingDotSegments(_ path: String) -> String {
        guard path.contains(".") else { return path }
        var output: [Substring] = []
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        for (index, segment) in segments.enumerated() {
            let last = index == segments.count - 1
            switch segment {
            case ".":
                if last { output.append("") }
            case "..":
                _ = output.popLast()
                if last { output.append("") }
            default:
                output.append(segment)
            }
        }
        return "/" + output.joined(separator: "/")
    }

    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"): true
        default: false
        }
    }

    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? 0x30 + value : 0x41 + value - 10
    }
}
