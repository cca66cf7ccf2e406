/// Typed access to call parameters; a missing required member or a member of
/// the wrong type is `org.varlink.service.InvalidParameter` naming it.
extension Dictionary where Key == String, Value == JSONValue {
    public func string(_ key: String) throws(VarlinkError) -> String {
        guard let value = try optionalString(key) else { throw .invalidParameter(key) }
        return value
    }

    public func optionalString(_ key: String) throws(VarlinkError) -> String? {
        switch self[key] {
        case nil, .null?: return nil
        case .string(let s)?: return s
        default: throw .invalidParameter(key)
        }
    }

    public func optionalInt(_ key: String) throws(VarlinkError) -> Int? {
        switch self[key] {
        case nil, .null?: return nil
        case let value?:
            guard let int = value.intValue else { throw .invalidParameter(key) }
            return int
        }
    }

    public func optionalBool(_ key: String) throws(VarlinkError) -> Bool? {
        switch self[key] {
        case nil, .null?: return nil
        case .bool(let b)?: return b
        default: throw .invalidParameter(key)
        }
    }

    public func stringArray(_ key: String) throws(VarlinkError) -> [String] {
        guard case .array(let elements)? = self[key] else { throw .invalidParameter(key) }
        var strings: [String] = []
        strings.reserveCapacity(elements.count)
        for element in elements {
            guard case .string(let s) = element else { throw .invalidParameter(key) }
            strings.append(s)
        }
        return strings
    }
}
