import Loopback

/// A request target as the upstream gets it: its path with the dot segments
/// removed (RFC 3986 §5.2.4), so that no `..`, raw or percent-encoded,
/// reaches an upstream that might resolve it above the proxy's path prefix.
enum RequestPath {
    /// The target with a clean path and its query as it came; or why it is refused.
    static func normalized(_ target: String) -> Result<String, Refusal> {
        guard target.hasPrefix("/") else {
            return .failure(Refusal("the request target must be a path (origin-form)"))
        }
        return isPlain(target) ? .success(target) : dotSegmentsRemoved(target)
    }

    /// The whole rule, for a target in origin-form.
    static func dotSegmentsRemoved(_ target: String) -> Result<String, Refusal> {
        let path = target.prefix { $0 != "?" }
        let query = target[path.endIndex...]
        let segments = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        var kept: [Substring] = []
        for (index, segment) in segments.enumerated() {
            let last = index == segments.count - 1
            guard let decoded = segment.percentDecoded else {
                return .failure(Refusal("the path has a malformed percent-encoding"))
            }
            if let hidden = hidden(in: decoded) { return .failure(Refusal(hidden)) }
            switch dotName(decoded) {
            case ".":
                if last { kept.append("") }  // "/a/." is "/a/"
            case "..":
                guard !kept.isEmpty else {
                    return .failure(Refusal("the path leads above the upstream's path prefix"))
                }
                kept.removeLast()
                if last { kept.append("") }
            default:
                kept.append(segment)
            }
        }
        return .success("/" + kept.joined(separator: "/") + query)
    }

    /// A path with nothing to decode and no segment that begins with a dot (no `%`, `\\`, `;`, NUL or
    /// `/.` before the query) is its own normal form: the common case costs one pass over its bytes.
    static func isPlain(_ target: String) -> Bool {
        var previous: UInt8 = 0
        for byte in target.utf8 {
            switch byte {
            case UInt8(ascii: "?"): return true
            case UInt8(ascii: "%"), UInt8(ascii: "\\"), UInt8(ascii: ";"), 0: return false
            case UInt8(ascii: ".") where previous == UInt8(ascii: "/"): return false
            default: previous = byte
            }
        }
        return true
    }

    /// A segment's name as Tomcat, Jetty and Spring compare it to `.` and `..`: its text before
    /// the first `;` (path parameters), so `..;x` is `..`.
    static func dotName(_ decoded: some StringProtocol) -> Substring {
        Substring(decoded).prefix { $0 != ";" }
    }

    /// Why a decoded segment hides something an upstream that decodes again, takes `%2F` or `\`
    /// for `/`, or ends a string at NUL would read as a dot segment; nil if it hides nothing.
    static func hidden(in decoded: String) -> String? {
        if decoded.contains("\0") { return "the path has a NUL (%00)" }
        // What a second decode turns into a dot, a slash, a backslash or a `;`.
        let lowered = decoded.lowercased()
        if ["%2e", "%2f", "%5c", "%3b"].contains(where: lowered.contains) {
            return "the path is encoded twice (%25 before a dot, slash, backslash or ;)"
        }
        let pieces = decoded.split(omittingEmptySubsequences: false) { $0 == "/" || $0 == "\\" }
        guard pieces.count == 1 || !pieces.contains(where: { dotName($0) == "." || dotName($0) == ".." }) else {
            return "the path hides a dot segment behind an encoded slash or a backslash"
        }
        return nil
    }

    struct Refusal: Error {
        let why: String
        init(_ why: String) { self.why = why }
    }
}
