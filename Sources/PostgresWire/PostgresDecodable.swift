/// A Swift type read from a column's text (results come in text format).
public protocol PostgresDecodable: Sendable {
    /// `text` is the column's bytes, nil for NULL.
    static func decode(postgresText text: [UInt8]?) throws(PostgresError) -> Self
}

/// A non-optional type read from a non-NULL column.
public protocol PostgresTextDecodable: PostgresDecodable {
    init?(postgresText text: [UInt8])
}

extension PostgresTextDecodable {
    public static func decode(postgresText text: [UInt8]?) throws(PostgresError) -> Self {
        guard let text else { throw PostgresError(.decoding, "NULL where \(Self.self) was expected") }
        // The value itself is not said: a column may hold a sealed record.
        guard let value = Self(postgresText: text) else {
            throw PostgresError(.decoding, "a column's text (\(text.count) bytes) is not a \(Self.self)")
        }
        return value
    }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public static func decode(postgresText text: [UInt8]?) throws(PostgresError) -> Self {
        guard let text else { return nil }
        return try Wrapped.decode(postgresText: text)
    }
}

extension String: PostgresTextDecodable {
    public init?(postgresText text: [UInt8]) {
        guard let string = String(validating: text, as: UTF8.self) else { return nil }
        self = string
    }
}

extension Int64: PostgresTextDecodable {
    public init?(postgresText text: [UInt8]) {
        guard let value = Int64(String(decoding: text, as: UTF8.self)) else { return nil }
        self = value
    }
}

extension Int32: PostgresTextDecodable {
    public init?(postgresText text: [UInt8]) {
        guard let value = Int32(String(decoding: text, as: UTF8.self)) else { return nil }
        self = value
    }
}

extension Int: PostgresTextDecodable {
    public init?(postgresText text: [UInt8]) {
        guard let value = Int(String(decoding: text, as: UTF8.self)) else { return nil }
        self = value
    }
}

extension Double: PostgresTextDecodable {
    public init?(postgresText text: [UInt8]) {
        switch String(decoding: text, as: UTF8.self) {
        case "NaN": self = .nan
        case "Infinity": self = .infinity
        case "-Infinity": self = -.infinity
        case let other:
            // Swift would also take "inf" and "nan"; float8out never writes them.
            guard let value = Double(other), value.isFinite else { return nil }
            self = value
        }
    }
}

extension Bool: PostgresTextDecodable {
    /// boolout writes `t` or `f`.
    public init?(postgresText text: [UInt8]) {
        switch text {
        case [UInt8(ascii: "t")]: self = true
        case [UInt8(ascii: "f")]: self = false
        default: return nil
        }
    }
}

extension PostgresBytes: PostgresTextDecodable {
    /// byteaout's hex format (`\x0a1b`, bytea_output's default); the old escape format is refused.
    public init?(postgresText text: [UInt8]) {
        guard text.count >= 2, text[0] == UInt8(ascii: "\\"), text[1] == UInt8(ascii: "x"),
            let bytes = Hex.decode(text.dropFirst(2))
        else { return nil }
        self.init(bytes)
    }
}
