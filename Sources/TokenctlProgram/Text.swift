extension StringProtocol {
    /// Without the Unicode scalars `isTrimmed` holds at either end, as Foundation's
    /// `trimmingCharacters(in:)` trims: scalar by scalar, a combining mark left where it was.
    func trimming(_ isTrimmed: (Unicode.Scalar) -> Bool) -> String {
        let scalars = String(self).unicodeScalars
        guard let first = scalars.firstIndex(where: { !isTrimmed($0) }) else { return "" }
        let last = scalars.lastIndex(where: { !isTrimmed($0) })!
        return String(Substring(scalars[first...last]))
    }

    /// Whether `other` occurs in it, Character by Character: the standard library's search. Not
    /// called `contains`, since there Foundation's (which TOMLKit's import makes visible) would be
    /// chosen over the standard library's, and tokenctl would link libFoundation for it.
    func includes(_ other: some StringProtocol) -> Bool { firstRange(of: other) != nil }

    /// Without tabs and spaces (Unicode's space separators) at either end: `.whitespaces`.
    var trimmingWhitespace: String { trimming(Text.isWhitespace) }

    /// Without whitespace and line ends at either end: `.whitespacesAndNewlines`.
    var trimmingWhitespaceAndNewlines: String { trimming { Text.isWhitespace($0) || Text.isNewline($0) } }
}

enum Text {
    /// Foundation's `CharacterSet.whitespaces`: general category Zs, the tab, and ZERO WIDTH SPACE
    /// (Zs until Unicode 4.0.1; Foundation's set still holds it).
    static func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "\t" || scalar == "\u{200B}" || scalar.properties.generalCategory == .spaceSeparator
    }

    /// Foundation's `CharacterSet.newlines`: LF, VT, FF, CR, NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR.
    static func isNewline(_ scalar: Unicode.Scalar) -> Bool {
        (0x0A...0x0D).contains(scalar.value) || [0x85, 0x2028, 0x2029].contains(scalar.value)
    }

    /// `text` for an HTML page or a notification body read as markup: `&`, `<` and `>` as
    /// entities, each one wherever it is (a combining mark after it too).
    static func htmlEscaped(_ text: String) -> String {
        var escaped = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": escaped.append(contentsOf: "&amp;".unicodeScalars)
            case "<": escaped.append(contentsOf: "&lt;".unicodeScalars)
            case ">": escaped.append(contentsOf: "&gt;".unicodeScalars)
            default: escaped.append(scalar)
            }
        }
        return String(escaped)
    }
}
