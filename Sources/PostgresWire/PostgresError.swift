/// A failure of the connection or of a statement. A statement the server refused carries the
/// server's fields (`serverInfo`: SQLSTATE, message, detail…); a failure below the protocol
/// (TLS, the socket) carries what caused it (`underlying`).
public struct PostgresError: Error, CustomStringConvertible, Sendable {
    /// What kind of failure: a struct, so kinds can be added without breaking a `switch`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Sendable {
            case server, sslUnsupported, connectionClosed, connectionError, authentication, protocolViolation
            case startupTimeout, decoding, encoding
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The server answered with an ErrorResponse: see `serverInfo`.
        public static let server = Code(.server)
        /// sslmode=require or stricter, and the server does not offer TLS.
        public static let sslUnsupported = Code(.sslUnsupported)
        /// The connection was closed (by the server, the network, or this side).
        public static let connectionClosed = Code(.connectionClosed)
        /// The socket or TLS failed: see `underlying`.
        public static let connectionError = Code(.connectionError)
        /// The server asked for an authentication this client does not do, or its proof was wrong.
        public static let authentication = Code(.authentication)
        /// The server sent something the protocol does not allow here.
        public static let protocolViolation = Code(.protocolViolation)
        /// Startup and authentication did not finish in time.
        public static let startupTimeout = Code(.startupTimeout)
        /// A column's text is not the Swift type asked for.
        public static let decoding = Code(.decoding)
        /// A statement or parameter cannot be sent (a NUL in it, too many parameters).
        public static let encoding = Code(.encoding)

        public var description: String { base.rawValue }
    }

    /// An ErrorResponse's or NoticeResponse's fields, by their protocol letter.
    public struct Field: Hashable, Sendable {
        public let letter: UInt8
        public init(_ letter: UInt8) { self.letter = letter }
        public static let severity = Field(UInt8(ascii: "V"))
        public static let sqlState = Field(UInt8(ascii: "C"))
        public static let message = Field(UInt8(ascii: "M"))
        public static let detail = Field(UInt8(ascii: "D"))
        public static let hint = Field(UInt8(ascii: "H"))
    }

    public let code: Code
    /// The server's fields, for `.server`.
    public let serverInfo: [Field: String]?
    public let underlying: (any Error)?
    /// What this client says about it (never a password or a row's value).
    public let reason: String

    init(_ code: Code, _ reason: String, serverInfo: [Field: String]? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.reason = reason
        self.serverInfo = serverInfo
        self.underlying = underlying
    }

    static func server(_ fields: [Field: String]) -> PostgresError {
        PostgresError(.server, fields[.message] ?? "error", serverInfo: fields)
    }

    /// The SQLSTATE of a server error ("42501"), nil for a failure below the protocol.
    public var sqlState: String? { serverInfo?[.sqlState] }

    public var description: String {
        if let serverInfo {
            return "\(serverInfo[.message] ?? reason) (SQLSTATE \(serverInfo[.sqlState] ?? "?"))"
        }
        let cause = underlying.map { ": \(String(describing: $0))" } ?? ""
        return "\(code): \(reason)\(cause)"
    }
}
