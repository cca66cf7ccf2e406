import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

#if canImport(Glibc)
import Glibc
#endif

extension HTTPExchangeError {
    /// What a failure of the connection attempt to `server` was: the deadline
    /// when it cut the attempt short, else a connection not made.
    static func connecting(_ error: any Error, to server: String, cutByDeadline: Bool) -> Self {
        if let known = error as? HTTPExchangeError { return known }
        if let timeout = error as? ChannelError, case .connectTimeout(let amount) = timeout {
            if cutByDeadline { return .deadlineExceeded }
            return Self(.notConnected, "no connection to \(server) within \(amount.nanoseconds / 1_000_000_000) s")
        }
        if let failed = error as? NIOConnectionError {
            if failed.connectionErrors.isEmpty {
                return Self(.notConnected, "\(failed.host) does not resolve")
            }
            let each = failed.connectionErrors.map { "\(Self.shown($0.target)): \(Self.cause($0.error))" }
            return Self(.notConnected, "no connection to \(server) (\(each.joined(separator: "; ")))")
        }
        if error is IOError || error is SocketAddressError {
            return Self(.notConnected, "no connection to \(server): \(Self.cause(error))")
        }
        return during(error, with: server)
    }

    /// What a failure once connected was, with `server`.
    static func during(_ error: any Error, with server: String) -> Self {
        switch error {
        case let known as HTTPExchangeError:
            return known
        case is CancellationError:
            return .cancelled
        case is NIOSSLError, is NIOSSLExtraError, is BoringSSLError:
            return Self(.tls, "TLS with \(server) failed: \(tlsCause(error))")
        case let parsing as HTTPParserError:
            return Self(.malformedResponse, "\(server) did not answer in HTTP/1.1 (\(parsing))")
        case let channel as ChannelError where channel == .eof || channel == .ioOnClosedChannel || channel == .alreadyClosed:
            return Self(.closedEarly, "\(server) closed the connection before its answer was complete")
        default:
            return Self(.io, "the exchange with \(server) failed: \(cause(error))")
        }
    }

    /// Certificate problems said as such: they are the ones an admin has to act on.
    static func tlsCause(_ error: any Error) -> String {
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return "certificate verification failed: the certificate is not for this host name (\(extra))"
        }
        let said = String(describing: error)
        if said.contains("CERTIFICATE_VERIFY_FAILED") {
            return "certificate verification failed: the server's certificate does not chain to a trusted root, "
                + "is not for this host name, or is out of its validity (CERTIFICATE_VERIFY_FAILED)"
        }
        return String(said.prefix(300))
    }

    /// An error's cause in a line: an errno as its text, anything else as NIO describes it.
    static func cause(_ error: any Error) -> String {
        if let io = error as? IOError { return String(cString: strerror(io.errnoCode)) }
        return String(String(describing: error).prefix(300))
    }

    static func shown(_ address: SocketAddress) -> String {
        guard let ip = address.ipAddress, let port = address.port else { return String(describing: address) }
        return ip.contains(":") ? "[\(ip)]:\(port)" : "\(ip):\(port)"
    }
}
