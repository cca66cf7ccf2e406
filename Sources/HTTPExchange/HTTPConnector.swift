import NIOCore
import NIOPosix
import NIOSSL

/// Sends one request over one new connection and reads its whole answer:
/// HTTP/1.1, `Connection: close`, no redirect followed, the body bounded in
/// bytes and the whole exchange (connect included) by a deadline. https
/// verifies the certificate fully against the URL's host name, with the
/// system's trust store unless told otherwise, also when connecting to an
/// address given by the caller.
public struct HTTPConnector: Sendable {
    /// The system trust store, on NIO's shared event loops.
    public static let shared = HTTPConnector()

    let group: any EventLoopGroup
    /// Made once: loading a trust store is not per request work. A failure is
    /// kept and said by every https exchange.
    let tls: Result<NIOSSLContext, HTTPExchangeError>
    /// A connection attempt gives up after this, leaving the rest of the deadline to another address.
    public var connectTimeout: TimeAmount = .seconds(10)

    public init(
        tls configuration: TLSConfiguration = .makeClientConfiguration(),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.group = group
        do {
            tls = .success(try NIOSSLContext(configuration: configuration))
        } catch {
            tls = .failure(HTTPExchangeError(.tls, "no TLS context could be made: \(HTTPExchangeError.cause(error))"))
        }
    }

    /// The request to the server its URL names: the host resolved, its
    /// addresses tried as NIO's Happy Eyeballs does (RFC 8305).
    public func send(_ request: HTTPRequest, deadline: NIODeadline, limit: Int) async throws(HTTPExchangeError)
        -> HTTPResponse
    {
        try await run(request, address: nil, deadline: deadline, limit: limit)
    }

    /// The request to one IP address (a checked one): Host, SNI and the
    /// certificate check still use the URL's host name.
    public func send(_ request: HTTPRequest, connectingTo address: String, deadline: NIODeadline, limit: Int)
        async throws(HTTPExchangeError) -> HTTPResponse
    {
        try await run(request, address: address, deadline: deadline, limit: limit)
    }

    func run(_ request: HTTPRequest, address: String?, deadline: NIODeadline, limit: Int) async throws(HTTPExchangeError)
        -> HTTPResponse
    {
        let target = try RequestTarget(request.url)
        var socketAddress: SocketAddress? = nil
        if let address {
            do {
                socketAddress = try SocketAddress(ipAddress: address, port: target.port)
            } catch {
                throw HTTPExchangeError(.notConnected, "\(address) is not an IP address")
            }
        }
        var context: NIOSSLContext? = nil
        if target.secure { context = try tls.get() }
        let exchange = Exchange(
            request: request, target: target, loop: group.next(), tls: context, limit: limit, deadline: deadline,
            connectTimeout: connectTimeout)
        do {
            return try await withTaskCancellationHandler {
                exchange.start(at: socketAddress)
                return try await exchange.promise.futureResult.get()
            } onCancel: {
                exchange.cancel()
            }
        } catch {
            throw HTTPExchangeError.during(error, with: exchange.server)
        }
    }
}
