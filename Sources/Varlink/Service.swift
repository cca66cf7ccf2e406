/// What `org.varlink.service.GetInfo` reports.
public struct ServiceInfo: Sendable {
    public var vendor: String
    public var product: String
    public var version: String
    public var url: String

    public init(vendor: String, product: String, version: String, url: String) {
        self.vendor = vendor
        self.product = product
        self.version = version
        self.url = url
    }
}

/// The process on the other end of a Unix socket, from SO_PEERCRED and SO_PEERGROUPS.
public struct PeerCredentials: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    /// Supplementary groups of the peer process when it connected (SO_PEERGROUPS).
    public var groups: [UInt32]
    /// Whose budgets the peer counts in: its uid, or the owner of the
    /// /etc/subuid range the uid lies in. The server sets it at accept.
    public var person: UInt32

    public init(pid: Int32, uid: UInt32, gid: UInt32, groups: [UInt32] = [], person: UInt32? = nil) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
        self.person = person ?? uid
    }
}

/// What a method implementation knows about its call.
public struct CallContext: Sendable {
    public var peer: PeerCredentials?
    public var method: String
    public var oneway: Bool
    public var more: Bool

    public init(peer: PeerCredentials?, method: String, oneway: Bool = false, more: Bool = false) {
        self.peer = peer
        self.method = method
        self.oneway = oneway
        self.more = more
    }
}

/// A server's handle on the connection of a `more` call, for servers that
/// can keep the call open themselves (see UnixServer's Broadcast).
public protocol StreamConnection: Sendable {}

/// Sends the replies of a streaming (`more`) call.
public struct ReplyStream: Sendable {
    let send: @Sendable (VarlinkReply) async throws -> Void
    /// The call's connection, when the server can hold the call open without a task.
    public let connection: StreamConnection?

    public init(send: @escaping @Sendable (VarlinkReply) async throws -> Void, connection: StreamConnection? = nil) {
        self.send = send
        self.connection = connection
    }

    /// Sends one reply; `continues: false` ends the call.
    public func yield(_ parameters: JSONObject, continues: Bool) async throws {
        try await send(VarlinkReply(parameters: parameters, continues: continues))
    }
}

public enum MethodHandler: Sendable {
    /// Answers with one reply.
    case call(@Sendable (JSONObject, CallContext) async throws -> JSONObject)
    /// Answers with any number of replies; the caller must set `more`.
    case stream(@Sendable (JSONObject, CallContext, ReplyStream) async throws -> Void)
}

/// One interface and the implementations of its methods.
public struct VarlinkImplementation: Sendable {
    public let interface: VarlinkInterface
    public let methods: [String: MethodHandler]

    /// Every handler must name a method the declaration has.
    public init(interface: VarlinkInterface, methods: [String: MethodHandler]) {
        for name in methods.keys {
            precondition(interface.methods[name] != nil, "\(interface.name).\(name) is not declared")
        }
        self.interface = interface
        self.methods = methods
    }
}

/// Routes calls to implementations and answers `org.varlink.service` itself.
public final class VarlinkService: Sendable {
    public let info: ServiceInfo
    let implementations: [String: VarlinkImplementation]
    let interfaceNames: [String]
    let internalError: VarlinkError
    /// Told about every error that is not a VarlinkErrorConvertible.
    let onUnexpectedError: @Sendable (String, any Error) -> Void

    public init(
        info: ServiceInfo,
        implementations: [VarlinkImplementation],
        internalError: VarlinkError = VarlinkError("org.varlink.service.InternalError"),
        onUnexpectedError: @escaping @Sendable (String, any Error) -> Void = { _, _ in }
    ) {
        self.info = info
        var table: [String: VarlinkImplementation] = [:]
        for implementation in implementations { table[implementation.interface.name] = implementation }
        self.implementations = table
        self.interfaceNames = [VarlinkInterface.service.name] + implementations.map(\.interface.name)
        self.internalError = internalError
        self.onUnexpectedError = onUnexpectedError
    }

    /// Handles one call, sending its replies (none for `oneway`) through `send`,
    /// or through `sendStreamed` for the replies of a `more` call (which a
    /// server can make return only once the reply reached the socket).
    /// Only a failure of `send` itself is thrown: the connection is gone.
    public func handle(
        _ call: VarlinkCall, peer: PeerCredentials?,
        send: @escaping @Sendable (VarlinkReply) async throws -> Void,
        sendStreamed: (@Sendable (VarlinkReply) async throws -> Void)? = nil,
        streamConnection: StreamConnection? = nil
    ) async throws {
        let context = CallContext(peer: peer, method: call.method, oneway: call.oneway, more: call.more)
        let reply: @Sendable (VarlinkReply) async throws -> Void
        if call.oneway {
            reply = { _ in }
        } else {
            reply = send
        }
        do {
            switch try lookUp(call) {
            case .call(let body):
                let parameters = try await body(call.parameters, context)
                try await reply(VarlinkReply(parameters: parameters))
            case .stream(let body):
                guard call.more else { throw VarlinkError.expectedMore }
                try await body(
                    call.parameters, context,
                    ReplyStream(send: call.oneway ? reply : (sendStreamed ?? send), connection: call.oneway ? nil : streamConnection))
            }
        } catch let error as ReplyStreamClosed {
            throw error
        } catch let error as VarlinkErrorConvertible {
            try await reply(VarlinkReply(declared(error.varlinkError, call)))
        } catch {
            onUnexpectedError(call.method, error)
            try await reply(VarlinkReply(internalError))
        }
    }

    /// Only errors the interface declares (or org.varlink.service's own) go
    /// out; anything else is a bug, reported and answered as an internal error.
    func declared(_ error: VarlinkError, _ call: VarlinkCall) -> VarlinkError {
        let separator = error.name.lastIndex(of: ".") ?? error.name.startIndex
        let interface = String(error.name[..<separator])
        if interface == VarlinkInterface.service.name { return error }
        if let declaration = implementations[interface]?.interface,
            declaration.errors[String(error.name[error.name.index(after: separator)...])] != nil
        {
            return error
        }
        onUnexpectedError(call.method, UndeclaredError(name: error.name))
        return internalError
    }

    /// The error a call gets before any implementation runs, as sd-varlink
    /// answers it: an interface or method not declared, or a parameter the
    /// declaration does not accept. Nil for a call that may be dispatched.
    /// Cheap (a lookup per declared member): a server's fast path can ask it.
    public func refusal(of call: VarlinkCall) -> VarlinkError? {
        do {
            _ = try declaration(of: call)
            return nil
        } catch {
            return error
        }
    }

    /// The call's interface and member, once the declaration accepts the call.
    func declaration(of call: VarlinkCall) throws(VarlinkError) -> (interface: VarlinkInterface, member: String) {
        guard let (name, member) = call.interfaceAndMember else { throw .methodNotFound(call.method) }
        let interface: VarlinkInterface
        if name == VarlinkInterface.service.name {
            interface = .service
        } else {
            guard let implementation = implementations[name] else { throw .interfaceNotFound(name) }
            interface = implementation.interface
        }
        guard interface.methods[member] != nil else { throw .methodNotFound(call.method) }
        if let parameter = interface.invalidParameter(call.parameters, method: member) { throw .invalidParameter(parameter) }
        return (interface, member)
    }

    func lookUp(_ call: VarlinkCall) throws(VarlinkError) -> MethodHandler {
        let (interface, member) = try declaration(of: call)
        if interface.name == VarlinkInterface.service.name {
            return try serviceMethod(member, call.method)
        }
        guard let handler = implementations[interface.name]?.methods[member] else { throw .methodNotImplemented(call.method) }
        return handler
    }

    func serviceMethod(_ member: String, _ method: String) throws(VarlinkError) -> MethodHandler {
        switch member {
        case "GetInfo":
            let info = self.info
            let names = interfaceNames.map { JSONValue.string($0) }
            return .call { _, _ in
                [
                    "vendor": .string(info.vendor), "product": .string(info.product),
                    "version": .string(info.version), "url": .string(info.url),
                    "interfaces": .array(names),
                ]
            }
        case "GetInterfaceDescription":
            return .call { [implementations] parameters, _ in
                let name = try parameters.string("interface")
                if name == VarlinkInterface.service.name {
                    return ["description": .string(VarlinkInterface.service.description)]
                }
                guard let implementation = implementations[name] else { throw VarlinkError.interfaceNotFound(name) }
                return ["description": .string(implementation.interface.description)]
            }
        default:
            throw .methodNotFound(method)
        }
    }
}

/// Thrown by a reply sender when the peer has gone; ends the call quietly.
public struct ReplyStreamClosed: Error {
    public init() {}
}

/// A method threw a Varlink error its interface does not declare.
public struct UndeclaredError: Error, CustomStringConvertible {
    public let name: String
    public var description: String { "undeclared error \(name)" }
}
