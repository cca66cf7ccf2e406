/// An error reply: a fully qualified error name and its parameters.
public struct VarlinkError: Error, Sendable, Equatable, CustomStringConvertible {
    public var name: String
    public var parameters: JSONObject

    public init(_ name: String, _ parameters: JSONObject = [:]) {
        self.name = name
        self.parameters = parameters
    }

    public var description: String {
        parameters.isEmpty ? name : "\(name) \(JSONWriter.string(.object(parameters)))"
    }

    public static func interfaceNotFound(_ interface: String) -> VarlinkError {
        VarlinkError("org.varlink.service.InterfaceNotFound", ["interface": .string(interface)])
    }
    public static func methodNotFound(_ method: String) -> VarlinkError {
        VarlinkError("org.varlink.service.MethodNotFound", ["method": .string(method)])
    }
    public static func methodNotImplemented(_ method: String) -> VarlinkError {
        VarlinkError("org.varlink.service.MethodNotImplemented", ["method": .string(method)])
    }
    public static func invalidParameter(_ parameter: String) -> VarlinkError {
        VarlinkError("org.varlink.service.InvalidParameter", ["parameter": .string(parameter)])
    }
    public static let permissionDenied = VarlinkError("org.varlink.service.PermissionDenied")
    public static let expectedMore = VarlinkError("org.varlink.service.ExpectedMore")
}

/// Errors that know their Varlink form; anything else is reported as an
/// internal error without its description (which might leak details).
public protocol VarlinkErrorConvertible: Error {
    var varlinkError: VarlinkError { get }
}

extension VarlinkError: VarlinkErrorConvertible {
    public var varlinkError: VarlinkError { self }
}
