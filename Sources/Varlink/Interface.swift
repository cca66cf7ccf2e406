/// A Varlink interface declaration (varlink.org, "Interface Definition"):
/// its text, as served by `org.varlink.service.GetInterfaceDescription`, and
/// the model parsed from that text, which checks every call before dispatch.
/// The text is the single source: nothing is served or accepted that it does
/// not declare.
public struct VarlinkInterface: Sendable {
    public let name: String
    public let description: String
    /// `type X (...)`: a struct or an enum.
    public let types: [String: VarlinkType]
    public let methods: [String: VarlinkMethod]
    /// `error E (...)`: each error's parameters.
    public let errors: [String: [VarlinkField]]
    /// The declaration compiled once for checking calls and replies.
    let checks: InterfaceChecks

    /// Parses the declaration; a malformed one is refused with its line and column.
    public init(description: String) throws(VarlinkInterfaceError) {
        var parser = InterfaceParser(description)
        let parsed = try parser.interface()
        self.name = parsed.name
        self.description = description
        self.types = parsed.types
        self.methods = parsed.methods
        self.errors = parsed.errors
        self.checks = InterfaceChecks(types: parsed.types, methods: parsed.methods)
    }
}

/// A type of the interface definition language.
public indirect enum VarlinkType: Sendable, Equatable {
    case bool, int, float, string
    /// A foreign, untyped JSON object.
    case object
    /// `?T`: absent or null allowed.
    case nullable(VarlinkType)
    /// `[]T`
    case array(VarlinkType)
    /// `[string]T`; `[string]()` is a set.
    case map(VarlinkType)
    /// `(a, b, c)`
    case enumeration([String])
    /// `(name: T, ...)`
    case structure([VarlinkField])
    /// A `type` of the same interface.
    case named(String)
}

/// A member of a struct, of a method's input or output, or of an error.
public struct VarlinkField: Sendable, Equatable {
    public let name: String
    public let type: VarlinkType

    public init(name: String, type: VarlinkType) {
        self.name = name
        self.type = type
    }

    /// A nullable member may be left out.
    public var isOptional: Bool { if case .nullable = type { true } else { false } }
}

/// `method M(input) -> (output)`
public struct VarlinkMethod: Sendable, Equatable {
    public let name: String
    public let input: [VarlinkField]
    public let output: [VarlinkField]
}

/// Why a declaration is not one, and where (1-based line and column).
public struct VarlinkInterfaceError: Error, Equatable, CustomStringConvertible {
    public let line: Int
    public let column: Int
    public let reason: String
    public var description: String { "line \(line), column \(column): \(reason)" }
}
