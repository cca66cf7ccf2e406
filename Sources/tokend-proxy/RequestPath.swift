import Foundation

/// A request target as the upstream gets it: its path with the dot segments
/// removed (RFC 3986 §5.2.4), so that no `..`, raw or percent-encoded,
/// reaches an upstream that might resolve it above the proxy's path prefix.
enum RequestPath {
    /// The target with a clean path and its query as it came; or why it is refused.
    static func normalized(_ target: String) -> Result<String, Refusal> {
        guard target.hasPrefix("/") else {
            return .failure(Refusal("the request target must be a path (origin-form)"))
        }
        let path = target.prefix { $0 != "?" }
        let query = target[path.endIndex...]
        let segments = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        var kept: [Substring] = []
        for (index, segment) in segments.enumerated() {
            let last = index == segments.count - 1
            guard let decoded = segment.removingPercentEncoding else {
                return .failure(Refusal("the path has a malformed percent-encoding"))
            }
            switch decoded {
            case ".":
                if last { kept.append("") }  // "/a/." is "/a/"
            case "..":
                guard !kept.isEmpty else {
                    return .failure(Refusal("the path leads above the upstream's path prefix"))
                }
                kept.removeLast()
                if last { kept.append("") }
            default:
                // An upstream that decodes %2F, or takes \ for /, would find a dot segment here.
                let pieces = decoded.split(omittingEmptySubsequences: false) { $0 == "/" || $0 == "\\" }
                guard !pieces.contains(where: { $0 == "." || $0 == ".." }) else {
                    return .failure(Refusal("the path hides a dot segment behind an encoded slash or a backslash"))
                }
                kept.append(segment)
            }
        }
        return .success("/" + kept.joined(separator: "/") + query)
    }

    struct Refusal: Error {
        let why: String
        init(_ why: String) { self.why = why }
    }
}
