/// The blanks `trimming(_:)` cuts from the ends of a text: the members of
/// Foundation's `CharacterSet.whitespaces`, `.newlines` and
/// `.whitespacesAndNewlines`, from the standard library's Unicode properties,
/// so a program that needs nothing else from Foundation does without it.
public enum Blanks: Sendable {
    /// Space separators (Unicode category Zs), the tab and U+200B (a Zs in
    /// Unicode before 4.0.1, and still in Foundation's set).
    case whitespaces
    /// U+000A–U+000D, U+0085, U+2028 and U+2029.
    case newlines
    /// Both: Unicode's White_Space property, and U+200B.
    case whitespacesAndNewlines

    public func contains(_ scalar: Unicode.Scalar) -> Bool {
        switch self {
        case .whitespaces: scalar == "\t" || scalar == "\u{200B}" || scalar.properties.generalCategory == .spaceSeparator
        case .newlines: ("\n"..."\r").contains(scalar) || ["\u{85}", "\u{2028}", "\u{2029}"].contains(scalar)
        case .whitespacesAndNewlines: scalar == "\u{200B}" || scalar.properties.isWhitespace
        }
    }
}

extension StringProtocol {
    /// The text without `blanks` at either end. Like Foundation's
    /// `trimmingCharacters(in:)`, it cuts Unicode scalars, not characters: a
    /// combining mark after a trailing space keeps the space, one after a
    /// leading space is what the text then starts with.
    public func trimming(_ blanks: Blanks) -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !blanks.contains($0) }) else { return "" }
        let last = scalars.lastIndex(where: { !blanks.contains($0) })!
        return String(String.UnicodeScalarView(scalars[first...last]))
    }
}
