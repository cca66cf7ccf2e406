import Foundation

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

    public init(text: String) {
        for line in text.split(whereSeparator: \.isNewline) {
            guard let rule = line.split(whereSeparator: \.isWhitespace).first, !rule.hasPrefix("//") else { continue }
            let lowered = rule.lowercased()
            if lowered.hasPrefix("!") {
                exceptions.insert(String(lowered.dropFirst()))
            } else if lowered.hasPrefix("*.") {
                wildcards.insert(String(lowered.dropFirst(2)))
            } else {
                rules.insert(lowered)
            }
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
