#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The Public Suffix List (publicsuffix.org), used to refuse Domain=
/// attributes naming a registry-controlled suffix such as "com" or "co.uk".
///
/// tokend reads the copy Debian ships in the `publicsuffix` package. Domains
/// are compared in the list's ASCII form only: an internationalised rule
/// matters only for a punycode Domain attribute equal to it, which the list
/// also carries in Unicode; such a domain then falls back to the implicit
/// "*" rule (one label is always a public suffix).
public struct PublicSuffixList: Sendable {
    public static let debianPath = "/usr/share/publicsuffix/public_suffix_list.dat"

    var rules: Set<String> = []
    var wildcards: Set<String> = []
    var exceptions: Set<String> = []

    /// Only the implicit rule "*": every single-label domain is a public suffix.
    public static let implicitOnly = PublicSuffixList()

    init() {}

    /// Parses the list's text: one rule per line, up to the first space;
    /// `//` comments and empty lines skipped. Works on bytes: it runs at start.
    public init(text: String) {
        var text = text
        text.withUTF8 { bytes in
            var start = 0
            while start < bytes.count {
                var end = start
                while end < bytes.count && bytes[end] != 0x0A { end += 1 }
                var ruleEnd = start
                while ruleEnd < end && bytes[ruleEnd] != 0x20 && bytes[ruleEnd] != 0x09 && bytes[ruleEnd] != 0x0D {
                    ruleEnd += 1
                }
                let isComment = ruleEnd - start >= 2 && bytes[start] == 0x2F && bytes[start + 1] == 0x2F
                if ruleEnd > start && !isComment {
                    add(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<ruleEnd]), as: UTF8.self).lowercased())
                }
                start = end + 1
            }
        }
    }

    private mutating func add(_ rule: String) {
        if rule.hasPrefix("!") {
            exceptions.insert(String(rule.dropFirst()))
        } else if rule.hasPrefix("*.") {
            wildcards.insert(String(rule.dropFirst(2)))
        } else {
            rules.insert(rule)
        }
    }

    /// The list at `path`; throws when it cannot be read.
    public init(contentsOfFile path: String) throws {
        self.init(text: try String(contentsOfFile: path, encoding: .utf8))
    }

    public var ruleCount: Int { rules.count + wildcards.count + exceptions.count }

    /// True when `domain` (lowercase, no leading dot) is itself a public suffix.
    public func isPublicSuffix(_ domain: String) -> Bool {
        if exceptions.contains(domain) { return false }
        guard let dot = domain.firstIndex(of: ".") else { return true }
        if rules.contains(domain) { return true }
        return wildcards.contains(String(domain[domain.index(after: dot)...]))
    }
}
