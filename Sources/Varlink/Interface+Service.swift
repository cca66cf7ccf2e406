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

        # A parameter is missing, of the wrong type, or not declared.
        error InvalidParameter (parameter: string)

        # The caller may not call this method.
        error PermissionDenied ()

        # The method must be called with "more": true.
        error ExpectedMore ()

        """)
}
