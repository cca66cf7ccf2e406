/// A final response: status, every header line in order (a repeated
/// Set-Cookie stays several lines), and the whole body.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first value of a header, its name compared without case.
    public func header(_ name: String) -> String? {
        let name = name.lowercased()
        return headers.first { $0.name.lowercased() == name }?.value
    }

    /// Every value of a header, in order.
    public func headers(_ name: String) -> [String] {
        let name = name.lowercased()
        return headers.filter { $0.name.lowercased() == name }.map(\.value)
    }
}
