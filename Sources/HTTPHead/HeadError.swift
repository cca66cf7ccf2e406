/// A head that cannot be read, as the status its sender gets and why. The
/// message names what is wrong and never quotes the head's bytes.
public struct HeadError: Error, Sendable, Equatable, CustomStringConvertible {
    public let status: Int
    public let message: String

    public init(status: Int, message: String) {
        self.status = status
        self.message = message
    }

    public var description: String { message }
    /// The status's reason phrase.
    public var reason: String { ReasonPhrase.of(status) }

    static func bad(_ message: String) -> HeadError { HeadError(status: 400, message: message) }
}

/// RFC 9110 §15's reason phrases for the statuses a listener answers by itself.
public enum ReasonPhrase {
    public static func of(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 302: "Found"
        case 400: "Bad Request"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 414: "URI Too Long"
        case 421: "Misdirected Request"
        case 431: "Request Header Fields Too Large"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 505: "HTTP Version Not Supported"
        default: "Status \(status)"
        }
    }
}
