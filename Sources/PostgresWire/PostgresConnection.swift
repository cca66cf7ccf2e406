import NIOCore
import NIOSSL

/// One connection to PostgreSQL (or a pooler in front of it): protocol v3, statements one at a
/// time through the extended protocol (unnamed statement and portal, text format, one Sync each),
/// LISTEN's notifications as a stream. No pool, no prepared statements kept between calls.
///
/// A statement is not cancelled by cancelling its task: the connection stays in step with the
/// server. A caller that gives up on a statement closes the connection.
public final class PostgresConnection: Sendable {
    public struct Configuration: Sendable {
        public enum TLS: Sendable {
            case disable
            /// TLS if the server offers it, plain if not.
            case prefer(NIOSSLContext)
            /// TLS or no connection.
            case require(NIOSSLContext)
        }

        public var user: String
        public var database: String
        public var password: String?
        public var applicationName: String?
        public var tls: TLS
        /// The name sent as SNI and checked against the certificate (nil: no SNI, as for an address).
        public var serverName: String?
        /// Startup and authentication finish within this, or the connection is closed.
        public var startupTimeout: Duration = .seconds(10)
        /// The largest message accepted from the server.
        public var messageLimit = BackendDecoder.defaultLimit

        public init(user: String, database: String, password: String?, tls: TLS) {
            self.user = user
            self.database = database
            self.password = password
            self.tls = tls
        }
    }

    let channel: any Channel
    let inbox: Inbox
    let listeners: Listeners
    let turns = Turnstile()
    let parameterStatus: ServerParameters
    /// What the server said it is (server_version…), from ParameterStatus.
    public var parameters: [String: String] { parameterStatus.values.withLock { $0 } }
    /// A result larger than this (all its rows) ends the connection: a hostile server's rows are bounded.
    static let resultLimit = 64 << 20

    init(channel: any Channel, inbox: Inbox, listeners: Listeners, parameters: ServerParameters) {
        self.channel = channel
        self.inbox = inbox
        self.listeners = listeners
        parameterStatus = parameters
    }

    public var isClosed: Bool { !channel.isActive || inbox.failure != nil }

    /// Runs one statement and returns all its rows. A server error throws `PostgresError` with
    /// code `.server` once the server is ready for the next statement.
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresRows {
        await turns.enter()
        defer { turns.leave() }
        let unread = inbox.takeUnread()
        if let failure = inbox.failure { throw unread.lazy.compactMap(\.serverError).first ?? failure }
        if let first = unread.first {
            throw fail(first.serverError ?? PostgresError(.protocolViolation, "unexpected \(first.name) between statements"))
        }
        var buffer = channel.allocator.buffer(capacity: 64 + query.sql.utf8.count)
        try Frontend.extendedQuery(query, into: &buffer)
        inbox.expectAnswers()
        try await send(buffer)
        var columns: [String] = []
        var rows: [[[UInt8]?]] = []
        var size = 0
        var tag = ""
        var failure: PostgresError?
        while true {
            switch try await inbox.receive() {
            case .parseComplete, .bindComplete, .noData, .parameterDescription, .emptyQueryResponse, .closeComplete:
                continue
            case .rowDescription(let names): columns = names
            case .dataRow(let row):
                size += row.reduce(16) { $0 + ($1?.count ?? 0) }
                guard size <= Self.resultLimit else {
                    throw fail(PostgresError(.protocolViolation, "a result larger than \(Self.resultLimit) bytes"))
                }
                rows.append(row)
            case .commandComplete(let text): tag = text
            case .portalSuspended: continue
            case .error(let fields): failure = .server(fields)
            case .readyForQuery:
                if let failure { throw failure }
                return PostgresRows(columns: columns, rows: rows, commandTag: tag)
            case let other:
                throw fail(PostgresError(.protocolViolation, "unexpected \(other.name) during a statement"))
            }
        }
    }

    /// LISTENs on `channel` and returns its notifications; the stream ends, with an error, when the
    /// connection does.
    public func listen(_ channel: String) async throws -> AsyncThrowingStream<PostgresNotification, any Error> {
        let (id, stream) = listeners.add(channel)
        do {
            try await query(PostgresQuery(unsafeSQL: "LISTEN \(Self.identifier(channel))"))
        } catch {
            listeners.remove(id)
            throw error
        }
        return stream
    }

    /// Sends Terminate and closes at once; a connection already closed is left as it is.
    public func close() async throws {
        guard channel.isActive else { return }
        var buffer = channel.allocator.buffer(capacity: 5)
        Frontend.terminate(into: &buffer)
        // Not waited for: a server that stops reading would never take it.
        channel.writeAndFlush(buffer, promise: nil)
        let closed = PostgresError(.connectionClosed, "closed by this client")
        inbox.fail(closed)
        listeners.end(closed)
        do {
            try await channel.close()
        } catch ChannelError.alreadyClosed {
            return
        }
    }

    func send(_ buffer: ByteBuffer) async throws {
        do {
            try await channel.writeAndFlush(buffer)
        } catch {
            throw inbox.failure ?? PostgresError(.connectionClosed, "a write failed", underlying: error)
        }
    }

    /// Ends the connection for `error` (the protocol is out of step) and returns it to throw.
    func fail(_ error: PostgresError) -> PostgresError {
        inbox.fail(error)
        listeners.end(error)
        channel.close(promise: nil)
        return error
    }

    /// A quoted identifier: `"a""b"` for a"b.
    static func identifier(_ name: String) -> String {
        "\"" + name.replacing("\"", with: "\"\"") + "\""
    }
}

extension BackendMessage {
    var serverError: PostgresError? {
        guard case .error(let fields) = self else { return nil }
        return .server(fields)
    }

    /// For errors: the message's kind, never its content.
    var name: String {
        switch self {
        case .authentication: "Authentication"
        case .backendKeyData: "BackendKeyData"
        case .bindComplete: "BindComplete"
        case .closeComplete: "CloseComplete"
        case .commandComplete: "CommandComplete"
        case .dataRow: "DataRow"
        case .emptyQueryResponse: "EmptyQueryResponse"
        case .error: "ErrorResponse"
        case .noData: "NoData"
        case .notice: "NoticeResponse"
        case .notification: "NotificationResponse"
        case .parameterDescription: "ParameterDescription"
        case .parameterStatus: "ParameterStatus"
        case .parseComplete: "ParseComplete"
        case .portalSuspended: "PortalSuspended"
        case .readyForQuery: "ReadyForQuery"
        case .rowDescription: "RowDescription"
        case .sslResponse: "SSL answer"
        }
    }
}
