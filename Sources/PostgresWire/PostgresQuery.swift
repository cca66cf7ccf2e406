/// A statement and its parameters: each interpolated value becomes `$1`, `$2`… and is sent
/// apart from the text, never spliced into it.
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation {
    struct Bind: Sendable, Equatable {
        /// The parameter's type OID: the server reads the text as this type.
        var type: UInt32
        /// The text, nil for NULL.
        var value: [UInt8]?
    }

    public internal(set) var sql: String
    var binds: [Bind]

    /// SQL sent as it is, with no parameters (migrations, BEGIN, COMMIT).
    public init(unsafeSQL sql: String) {
        self.sql = sql
        binds = []
    }

    public init(stringLiteral value: String) {
        self.init(unsafeSQL: value)
    }

    public init(stringInterpolation: StringInterpolation) {
        sql = stringInterpolation.sql
        binds = stringInterpolation.binds
    }

    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var binds: [Bind] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + 3 * interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) {
            sql += literal
        }

        public mutating func appendInterpolation<Value: PostgresEncodable>(_ value: Value) {
            binds.append(Bind(type: Value.postgresType, value: value.postgresText.map { Array($0.utf8) }))
            sql += "$\(binds.count)"
        }

        /// An optional is a parameter like any other: nil is NULL.
        public mutating func appendInterpolation<Value: PostgresEncodable>(_ value: Value?) {
            binds.append(Bind(type: Value.postgresType, value: value?.postgresText.map { Array($0.utf8) }))
            sql += "$\(binds.count)"
        }
    }
}

/// A value sent as a parameter in text format, with the type the server reads it as.
public protocol PostgresEncodable: Sendable {
    static var postgresType: UInt32 { get }
    /// The text PostgreSQL's input function takes; nil for NULL.
    var postgresText: String? { get }
}

/// Type OIDs (pg_type.dat).
enum OID {
    static let bool: UInt32 = 16
    static let bytea: UInt32 = 17
    static let int8: UInt32 = 20
    static let int4: UInt32 = 23
    static let text: UInt32 = 25
    static let float8: UInt32 = 701
    static let textArray: UInt32 = 1009
}

extension String: PostgresEncodable {
    public static var postgresType: UInt32 { OID.text }
    public var postgresText: String? { self }
}

extension Int64: PostgresEncodable {
    public static var postgresType: UInt32 { OID.int8 }
    public var postgresText: String? { String(self) }
}

extension Int: PostgresEncodable {
    public static var postgresType: UInt32 { OID.int8 }
    public var postgresText: String? { String(self) }
}

extension Int32: PostgresEncodable {
    public static var postgresType: UInt32 { OID.int4 }
    public var postgresText: String? { String(self) }
}

extension Bool: PostgresEncodable {
    public static var postgresType: UInt32 { OID.bool }
    public var postgresText: String? { self ? "t" : "f" }
}

extension Double: PostgresEncodable {
    public static var postgresType: UInt32 { OID.float8 }
    /// Swift's shortest round-trip form; float8in spells the specials its own way.
    public var postgresText: String? {
        if isNaN { return "NaN" }
        if isInfinite { return self < 0 ? "-Infinity" : "Infinity" }
        return String(self)
    }
}

extension Optional: PostgresEncodable where Wrapped: PostgresEncodable {
    public static var postgresType: UInt32 { Wrapped.postgresType }
    public var postgresText: String? { self?.postgresText }
}

extension Array: PostgresEncodable where Element == String {
    public static var postgresType: UInt32 { OID.textArray }
    /// An array literal, every element quoted: `{"a","b \"c\""}`.
    public var postgresText: String? {
        "{" + map { "\"" + $0.replacing("\\", with: "\\\\").replacing("\"", with: "\\\"") + "\"" }.joined(separator: ",")
            + "}"
    }
}

/// Bytes as a bytea parameter, in hex.
public struct PostgresBytes: PostgresEncodable, Equatable {
    public var bytes: [UInt8]
    public init(_ bytes: [UInt8]) { self.bytes = bytes }
    public static var postgresType: UInt32 { OID.bytea }
    public var postgresText: String? { "\\x" + Hex.encode(bytes) }
}

enum Hex {
    static let digits = Array("0123456789abcdef".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xf)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        guard text.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(text.count / 2)
        var high: UInt8?
        for char in text {
            let value: UInt8
            switch char {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = char - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = char - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): value = char - UInt8(ascii: "A") + 10
            default: return nil
            }
            if let first = high {
                out.append(first << 4 | value)
                high = nil
            } else {
                high = value
            }
        }
        return out
    }
}
