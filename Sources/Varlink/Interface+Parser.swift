/// The interface definition language, read by recursive descent over the
/// UTF-8 bytes. Whitespace and `#` comments separate tokens anywhere;
/// keywords are keywords only where the grammar expects one, so `enum`,
/// `interface` or `object` are fine member names.
///
///     interface := "interface" reverse-domain-name member+
///     member    := "type" Name (struct | enum) | "method" Name struct "->" struct | "error" Name struct
///     type      := "?"? (bool | int | float | string | object | Name | struct | enum | "[]" type | "[string]" type)
struct InterfaceParser {
    let bytes: [UInt8]
    var position = 0
    /// Named types used, checked once every `type` is known.
    var references: [(name: String, at: Int)] = []

    init(_ text: String) { bytes = Array(text.utf8) }

    struct Parsed {
        var name = ""
        var types: [String: VarlinkType] = [:]
        var methods: [String: VarlinkMethod] = [:]
        var errors: [String: [VarlinkField]] = [:]
    }

    mutating func interface() throws(VarlinkInterfaceError) -> Parsed {
        var parsed = Parsed()
        try expectKeyword("interface")
        let nameAt = skipSpace()
        parsed.name = word()
        guard Self.isInterfaceName(parsed.name) else { throw failure("expected an interface name (reverse domain)", at: nameAt) }
        var memberNames: Set<String> = []
        while skipSpace() < bytes.count {
            let keywordAt = position
            let keyword = word()
            let nameAt = skipSpace()
            let name = word()
            guard ["type", "method", "error"].contains(keyword) else {
                throw failure("expected \"type\", \"method\" or \"error\"", at: keywordAt)
            }
            guard Self.isMemberName(name) else { throw failure("expected a name starting with a capital letter", at: nameAt) }
            guard memberNames.insert(name).inserted else { throw failure("\(name) is declared twice", at: nameAt) }
            switch keyword {
            case "type":
                let type = try parenthesized()
                parsed.types[name] = type
            case "method":
                let input = try structure()
                try expect("->")
                parsed.methods[name] = VarlinkMethod(name: name, input: input, output: try structure())
            default:
                parsed.errors[name] = try structure()
            }
        }
        guard !memberNames.isEmpty else { throw failure("expected a type, method or error") }
        for reference in references where parsed.types[reference.name] == nil {
            throw failure("\(reference.name) is not a declared type", at: reference.at)
        }
        return parsed
    }

    /// `type`, after any `?`.
    mutating func type() throws(VarlinkInterfaceError) -> VarlinkType {
        let start = skipSpace()
        if take("?") {
            guard skipSpace() < bytes.count, bytes[position] != UInt8(ascii: "?") else {
                throw failure("expected a type after \"?\"")
            }
            return .nullable(try type())
        }
        if take("[") {
            skipSpace()
            if take("]") { return .array(try type()) }
            let key = word()
            guard key == "string" else { throw failure("expected \"]\" or \"string]\"", at: start) }
            try expect("]")
            return .map(try type())
        }
        if peek("(") { return try parenthesized() }
        let name = word()
        switch name {
        case "bool": return .bool
        case "int": return .int
        case "float": return .float
        case "string": return .string
        case "object": return .object
        default:
            guard Self.isMemberName(name) else { throw failure("expected a type", at: start) }
            references.append((name, start))
            return .named(name)
        }
    }

    /// `(a: T, ...)` or `(a, b)`: which one is told by the first name's follower.
    mutating func parenthesized() throws(VarlinkInterfaceError) -> VarlinkType {
        let start = skipSpace()
        try expect("(")
        skipSpace()
        if take(")") { return .structure([]) }
        _ = word()
        skipSpace()
        let isStruct = peek(":")
        position = start
        return isStruct ? .structure(try structure()) : .enumeration(try enumeration())
    }

    mutating func structure() throws(VarlinkInterfaceError) -> [VarlinkField] {
        try expect("(")
        var fields: [VarlinkField] = []
        skipSpace()
        if take(")") { return fields }
        repeat {
            let at = skipSpace()
            let name = word()
            guard Self.isFieldName(name) else { throw failure("expected a member name", at: at) }
            guard !fields.contains(where: { $0.name == name }) else { throw failure("\(name) appears twice", at: at) }
            try expect(":")
            fields.append(VarlinkField(name: name, type: try type()))
            skipSpace()
        } while take(",")
        try expect(")")
        return fields
    }

    mutating func enumeration() throws(VarlinkInterfaceError) -> [String] {
        try expect("(")
        var values: [String] = []
        repeat {
            let at = skipSpace()
            let value = word()
            guard Self.isFieldName(value) else { throw failure("expected an enum value", at: at) }
            guard !values.contains(value) else { throw failure("\(value) appears twice", at: at) }
            values.append(value)
            skipSpace()
        } while take(",")
        try expect(")")
        return values
    }

    // MARK: tokens

    /// Skips whitespace and comments; returns where the next token starts.
    @discardableResult
    mutating func skipSpace() -> Int {
        while position < bytes.count {
            switch bytes[position] {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"): position += 1
            case UInt8(ascii: "#"):
                while position < bytes.count, bytes[position] != UInt8(ascii: "\n") { position += 1 }
            default: return position
            }
        }
        return position
    }

    /// Letters, digits, `_`, `.` and `-` at the position (possibly none).
    mutating func word() -> String {
        let start = position
        while position < bytes.count, Self.isWordByte(bytes[position]) { position += 1 }
        return String(decoding: bytes[start..<position], as: UTF8.self)
    }

    func peek(_ token: String) -> Bool {
        let token = Array(token.utf8)
        return bytes.count - position >= token.count && Array(bytes[position..<position + token.count]) == token
    }

    mutating func take(_ token: String) -> Bool {
        guard peek(token) else { return false }
        position += token.utf8.count
        return true
    }

    mutating func expect(_ token: String) throws(VarlinkInterfaceError) {
        skipSpace()
        guard take(token) else { throw failure("expected \"\(token)\"") }
    }

    mutating func expectKeyword(_ keyword: String) throws(VarlinkInterfaceError) {
        let at = skipSpace()
        guard word() == keyword else { throw failure("expected \"\(keyword)\"", at: at) }
    }

    func failure(_ reason: String, at offset: Int? = nil) -> VarlinkInterfaceError {
        let offset = min(offset ?? position, bytes.count)
        var line = 1
        var lineStart = 0
        for index in 0..<offset where bytes[index] == UInt8(ascii: "\n") {
            line += 1
            lineStart = index + 1
        }
        let found = offset < bytes.count ? "" : " (at the end)"
        return VarlinkInterfaceError(line: line, column: offset - lineStart + 1, reason: reason + found)
    }

    // MARK: names

    static func isWordByte(_ byte: UInt8) -> Bool {
        isAlphanumeric(byte) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
    }

    static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
    }

    /// `[A-Z][A-Za-z0-9]*`
    static func isMemberName(_ name: String) -> Bool {
        guard let first = name.utf8.first, first >= UInt8(ascii: "A"), first <= UInt8(ascii: "Z") else { return false }
        return name.utf8.allSatisfy(isAlphanumeric)
    }

    /// `[A-Za-z]([_]?[A-Za-z0-9])*`
    static func isFieldName(_ name: String) -> Bool {
        let utf8 = Array(name.utf8)
        guard let first = utf8.first, isAlphanumeric(first), !(first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9")),
            utf8.last != UInt8(ascii: "_")
        else { return false }
        for (index, byte) in utf8.enumerated() where !isAlphanumeric(byte) {
            guard byte == UInt8(ascii: "_"), utf8[index - 1] != UInt8(ascii: "_") else { return false }
        }
        return true
    }

    /// Two or more dot-separated labels of letters, digits and inner dashes,
    /// the first starting with a lowercase letter: `org.example.ftp`,
    /// `io.systemd.Resolve` (systemd's capitals, which sd-varlink accepts).
    static func isInterfaceName(_ name: String) -> Bool {
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, let first = name.utf8.first, first >= UInt8(ascii: "a"), first <= UInt8(ascii: "z") else {
            return false
        }
        return labels.allSatisfy { label in
            guard let head = label.utf8.first, let tail = label.utf8.last, head != UInt8(ascii: "-"), tail != UInt8(ascii: "-")
            else { return false }
            return label.utf8.allSatisfy { isAlphanumeric($0) || $0 == UInt8(ascii: "-") }
        }
    }
}
