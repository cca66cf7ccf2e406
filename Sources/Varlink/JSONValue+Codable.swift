/// Codable records to and from JSONValue, with no text in between: the wire
/// types are declared once as Codable structs and travel as JSONValue.
///
/// An absent optional is encoded as `null` (Varlink readers, and tokend's
/// own tests, may expect every declared member to be present); on decoding,
/// absent and `null` are the same.
extension JSONValue {
    public init<T: Encodable>(encoding value: T) throws {
        let encoder = ValueEncoder(codingPath: [])
        try value.encode(to: encoder)
        self = encoder.node.value
    }

    public func decode<T: Decodable>(_ type: T.Type = T.self) throws -> T {
        try T(from: ValueDecoder(value: self, codingPath: []))
    }
}

extension Dictionary where Key == String, Value == JSONValue {
    /// The call's parameters as a Codable record; a member that is missing or
    /// of the wrong type is `org.varlink.service.InvalidParameter` naming it.
    public func decode<T: Decodable>(_ type: T.Type = T.self) throws(VarlinkError) -> T {
        do {
            return try JSONValue.object(self).decode(T.self)
        } catch let error as DecodingError {
            throw .invalidParameter(error.parameterName ?? "parameters")
        } catch {
            throw .invalidParameter("parameters")
        }
    }
}

extension DecodingError {
    /// The top-level member the error is about.
    var parameterName: String? {
        let path: [CodingKey]
        switch self {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            path = context.codingPath
        case .keyNotFound(let key, let context):
            path = context.codingPath + [key]
        @unknown default:
            return nil
        }
        return path.first?.stringValue
    }
}

// MARK: Encoding

/// A value being built; containers hold on to their node and fill it in.
final class EncodedNode {
    enum Content {
        case value(JSONValue)
        case object([String: EncodedNode])
        case array([EncodedNode])
    }
    var content: Content = .value(.null)

    var value: JSONValue {
        switch content {
        case .value(let value): value
        case .object(let members): .object(members.mapValues(\.value))
        case .array(let elements): .array(elements.map(\.value))
        }
    }
}

struct ValueEncoder: Encoder {
    let node = EncodedNode()
    var codingPath: [CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = node.content {} else { node.content = .object([:]) }
        return KeyedEncodingContainer(KeyedEncoder<Key>(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> UnkeyedEncodingContainer {
        if case .array = node.content {} else { node.content = .array([]) }
        return UnkeyedEncoder(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> SingleValueEncodingContainer { SingleEncoder(node: node, codingPath: codingPath) }
}

/// Encodes one value into a fresh node.
func encodedNode<T: Encodable>(_ value: T, at path: [CodingKey]) throws -> EncodedNode {
    let encoder = ValueEncoder(codingPath: path)
    try value.encode(to: encoder)
    return encoder.node
}

func primitive<T: Encodable>(_ value: T) -> JSONValue? {
    switch value {
    case let v as Bool: .bool(v)
    case let v as String: .string(v)
    case let v as Int: .int(v)
    case let v as Int64: .int(Int(v))
    case let v as Int32: .int(Int(v))
    case let v as UInt32: .int(Int(v))
    case let v as Double: .double(v)
    default: nil
    }
}

struct KeyedEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodedNode
    var codingPath: [CodingKey]

    func set(_ child: EncodedNode, _ key: Key) {
        guard case .object(var members) = node.content else { return }
        members[key.stringValue] = child
        node.content = .object(members)
    }

    func setValue(_ value: JSONValue, _ key: Key) {
        let child = EncodedNode()
        child.content = .value(value)
        set(child, key)
    }

    mutating func encodeNil(forKey key: Key) throws { setValue(.null, key) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        if let simple = primitive(value) { return setValue(simple, key) }
        set(try encodedNode(value, at: codingPath + [key]), key)
    }

    // Absent optionals are written as null, not left out.
    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws {
        guard let value else { return setValue(.null, key) }
        try encode(value, forKey: key)
    }
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { setValue(value.map { .bool($0) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { setValue(.optional(value), key) }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { setValue(.optional(value), key) }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws {
        setValue(value.map { .double($0) } ?? .null, key)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type, forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        let child = EncodedNode()
        child.content = .object([:])
        set(child, key)
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(node: child, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> UnkeyedEncodingContainer {
        let child = EncodedNode()
        child.content = .array([])
        set(child, key)
        return UnkeyedEncoder(node: child, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> Encoder { ValueEncoder(codingPath: codingPath) }
    mutating func superEncoder(forKey key: Key) -> Encoder { ValueEncoder(codingPath: codingPath + [key]) }
}

struct UnkeyedEncoder: UnkeyedEncodingContainer {
    let node: EncodedNode
    var codingPath: [CodingKey]
    var count: Int {
        if case .array(let elements) = node.content { elements.count } else { 0 }
    }

    func append(_ child: EncodedNode) {
        guard case .array(var elements) = node.content else { return }
        elements.append(child)
        node.content = .array(elements)
    }

    mutating func encodeNil() throws {
        append(EncodedNode())
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        if let simple = primitive(value) {
            let child = EncodedNode()
            child.content = .value(simple)
            return append(child)
        }
        append(try encodedNode(value, at: codingPath))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let child = EncodedNode()
        child.content = .object([:])
        append(child)
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(node: child, codingPath: codingPath))
    }

    mutating func nestedUnkeyedContainer() -> UnkeyedEncodingContainer {
        let child = EncodedNode()
        child.content = .array([])
        append(child)
        return UnkeyedEncoder(node: child, codingPath: codingPath)
    }

    mutating func superEncoder() -> Encoder { ValueEncoder(codingPath: codingPath) }
}

struct SingleEncoder: SingleValueEncodingContainer {
    let node: EncodedNode
    var codingPath: [CodingKey]

    mutating func encodeNil() throws { node.content = .value(.null) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        if let simple = primitive(value) { return node.content = .value(simple) }
        node.content = try encodedNode(value, at: codingPath).content
    }
}

// MARK: Decoding

struct ValueDecoder: Decoder {
    let value: JSONValue
    var codingPath: [CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else {
            throw DecodingError.typeMismatch(
                JSONObject.self, .init(codingPath: codingPath, debugDescription: "expected an object"))
        }
        return KeyedDecodingContainer(KeyedDecoder<Key>(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> UnkeyedDecodingContainer {
        guard case .array(let elements) = value else {
            throw DecodingError.typeMismatch(
                [JSONValue].self, .init(codingPath: codingPath, debugDescription: "expected an array"))
        }
        return UnkeyedDecoder(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> SingleValueDecodingContainer { SingleDecoder(value: value, codingPath: codingPath) }
}

/// A JSON value as `T`, where T is a primitive this model carries.
func decodePrimitive<T: Decodable>(_ type: T.Type, from value: JSONValue, at path: [CodingKey]) throws -> T {
    let mismatch = DecodingError.typeMismatch(T.self, .init(codingPath: path, debugDescription: "found \(value)"))
    switch type {
    case is Bool.Type:
        guard let v = value.boolValue else { throw mismatch }
        return v as! T
    case is String.Type:
        guard let v = value.stringValue else { throw mismatch }
        return v as! T
    case is Int.Type:
        guard let v = value.intValue else { throw mismatch }
        return v as! T
    case is Int64.Type:
        guard let v = value.intValue else { throw mismatch }
        return Int64(v) as! T
    case is Double.Type:
        guard let v = value.doubleValue else { throw mismatch }
        return v as! T
    case is JSONValue.Type:
        return value as! T
    default:
        return try T(from: ValueDecoder(value: value, codingPath: path))
    }
}

struct KeyedDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: JSONObject
    var codingPath: [CodingKey]
    var allKeys: [Key] { members.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    func decodeNil(forKey key: Key) throws -> Bool { members[key.stringValue]?.isNull ?? true }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard let value = members[key.stringValue], !value.isNull else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "missing"))
        }
        return try decodePrimitive(type, from: value, at: codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type, forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        try ValueDecoder(value: members[key.stringValue] ?? .null, codingPath: codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> UnkeyedDecodingContainer {
        try ValueDecoder(value: members[key.stringValue] ?? .null, codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> Decoder { ValueDecoder(value: .object(members), codingPath: codingPath) }
    func superDecoder(forKey key: Key) throws -> Decoder {
        ValueDecoder(value: members[key.stringValue] ?? .null, codingPath: codingPath + [key])
    }
}

struct UnkeyedDecoder: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    var codingPath: [CodingKey]
    var currentIndex = 0
    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    init(elements: [JSONValue], codingPath: [CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    mutating func next() throws -> JSONValue {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(JSONValue.self, .init(codingPath: codingPath, debugDescription: "end"))
        }
        defer { currentIndex += 1 }
        return elements[currentIndex]
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, elements[currentIndex].isNull else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try decodePrimitive(type, from: try next(), at: codingPath)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try ValueDecoder(value: try next(), codingPath: codingPath).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> UnkeyedDecodingContainer {
        try ValueDecoder(value: try next(), codingPath: codingPath).unkeyedContainer()
    }

    mutating func superDecoder() throws -> Decoder { ValueDecoder(value: try next(), codingPath: codingPath) }
}

struct SingleDecoder: SingleValueDecodingContainer {
    let value: JSONValue
    var codingPath: [CodingKey]

    func decodeNil() -> Bool { value.isNull }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try decodePrimitive(type, from: value, at: codingPath)
    }
}
