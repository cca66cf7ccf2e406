/// A method call as sent by a Varlink client.
public struct VarlinkCall: Sendable, Equatable {
    public var method: String
    public var parameters: JSONObject
    public var oneway: Bool
    public var more: Bool
    public var upgrade: Bool

    public init(method: String, parameters: JSONObject = [:], oneway: Bool = false, more: Bool = false, upgrade: Bool = false) {
        self.method = method
        self.parameters = parameters
        self.oneway = oneway
        self.more = more
        self.upgrade = upgrade
    }

    /// `interface` and `member` of "io.example.Interface.Method".
    public var interfaceAndMember: (interface: String, member: String)? {
        guard let dot = method.lastIndex(of: "."), dot != method.startIndex,
            method.index(after: dot) != method.endIndex
        else { return nil }
        return (String(method[..<dot]), String(method[method.index(after: dot)...]))
    }
}

/// One reply to a call: parameters, or an error, and whether more replies follow.
public struct VarlinkReply: Sendable, Equatable {
    public var parameters: JSONObject
    public var error: String?
    public var continues: Bool

    public init(parameters: JSONObject = [:], error: String? = nil, continues: Bool = false) {
        self.parameters = parameters
        self.error = error
        self.continues = continues
    }

    public init(_ error: VarlinkError) {
        self.init(parameters: error.parameters, error: error.name)
    }
}

/// Why a frame is not a valid message.
public struct VarlinkProtocolError: Error, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

extension VarlinkCall {
    /// Decodes one frame (without its terminating NUL).
    public init(frame: some Collection<UInt8>) throws(VarlinkProtocolError) {
        let value: JSONValue
        do {
            value = try JSONParser.parse(frame)
        } catch {
            throw VarlinkProtocolError(error.description)
        }
        guard case .object(let message) = value else { throw VarlinkProtocolError("message is not a JSON object") }
        guard case .string(let method)? = message["method"] else {
            throw VarlinkProtocolError("message has no \"method\" string")
        }
        let parameters: JSONObject
        switch message["parameters"] {
        case nil, .null?: parameters = [:]
        case .object(let object)?: parameters = object
        default: throw VarlinkProtocolError("\"parameters\" is not an object")
        }
        func flag(_ key: String) throws(VarlinkProtocolError) -> Bool {
            switch message[key] {
            case nil, .null?: return false
            case .bool(let b)?: return b
            default: throw VarlinkProtocolError("\"\(key)\" is not a boolean")
            }
        }
        self.init(
            method: method, parameters: parameters,
            oneway: try flag("oneway"), more: try flag("more"), upgrade: try flag("upgrade"))
    }

    /// Appends the call as JSON followed by the NUL terminator.
    public func encode(into output: inout [UInt8]) {
        var message: JSONObject = ["method": .string(method)]
        if !parameters.isEmpty { message["parameters"] = .object(parameters) }
        if oneway { message["oneway"] = true }
        if more { message["more"] = true }
        if upgrade { message["upgrade"] = true }
        JSONWriter.writeObject(message, into: &output)
        output.append(0)
    }
}

extension VarlinkReply {
    public init(frame: some Collection<UInt8>) throws(VarlinkProtocolError) {
        let value: JSONValue
        do {
            value = try JSONParser.parse(frame)
        } catch {
            throw VarlinkProtocolError(error.description)
        }
        guard case .object(let message) = value else { throw VarlinkProtocolError("reply is not a JSON object") }
        let parameters: JSONObject
        switch message["parameters"] {
        case nil, .null?: parameters = [:]
        case .object(let object)?: parameters = object
        default: throw VarlinkProtocolError("\"parameters\" is not an object")
        }
        let error: String?
        switch message["error"] {
        case nil, .null?: error = nil
        case .string(let name)?: error = name
        default: throw VarlinkProtocolError("\"error\" is not a string")
        }
        self.init(parameters: parameters, error: error, continues: message["continues"]?.boolValue ?? false)
    }

    /// Appends the reply as JSON followed by the NUL terminator.
    public func encode(into output: inout [UInt8]) {
        var message: JSONObject = ["parameters": .object(parameters)]
        if let error { message["error"] = .string(error) }
        if continues { message["continues"] = true }
        JSONWriter.writeObject(message, into: &output)
        output.append(0)
    }
}
