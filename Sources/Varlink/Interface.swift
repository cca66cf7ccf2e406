/// A Varlink interface declaration: its text, as served by
/// `org.varlink.service.GetInterfaceDescription`, and the names read from it.
public struct VarlinkInterface: Sendable {
    public let name: String
    public let description: String
    public let methods: Set<String>
    public let errors: Set<String>

    /// Reads the interface name and its method and error names from the
    /// declaration. The declaration is the single source: the method table is
    /// checked against it, so nothing can be served that is not declared.
    public init(description: String) throws(VarlinkProtocolError) {
        var words: [Substring] = []
        for line in description.split(separator: "\n", omittingEmptySubsequences: false) {
            let code = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            words += code.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "(" || $0 == ")" })
        }
        var name: String?
        var methods: Set<String> = []
        var errors: Set<String> = []
        for (position, word) in words.enumerated() where position + 1 < words.count {
            switch word {
            case "interface": name = String(words[position + 1])
            case "method": methods.insert(String(words[position + 1]))
            case "error": errors.insert(String(words[position + 1]))
            default: break
            }
        }
        guard let name, !name.isEmpty else { throw VarlinkProtocolError("interface declaration has no name") }
        self.name = name
        self.description = description
        self.methods = methods
        self.errors = errors
    }
}

extension VarlinkInterface {
    /// The service interface every Varlink server implements.
    public static let service: VarlinkInterface = try! VarlinkInterface(description: """
        # The Varlink service interface, answered by every Varlink server.
        interface org.varlink.service

        # Who made the service, which version it is, and which interfaces it serves.
        method GetInfo() -> (
          vendor: string,
          product: string,
          version: string,
          url: string,
          interfaces: []string
        )

        # The declaration of one of the served interfaces.
        method GetInterfaceDescription(interface: string) -> (description: string)

        # The interface is not served here.
        error InterfaceNotFound (interface: string)

        # The interface has no such method.
        error MethodNotFound (method: string)

        # The method is declared but not implemented here.
        error MethodNotImplemented (method: string)

        # A parameter is missing or of the wrong type.
        error InvalidParameter (parameter: string)

        # The caller may not call this method.
        error PermissionDenied ()

        # The method must be called with "more": true.
        error ExpectedMore ()

        """)
}
