import Broker
import Deadline
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore
import NIOPosix
import PostgresWire
import Synchronization

/// A host's one connection to the store, open only while statements use it.
///
/// Every fleet statement is an autocommit statement or a short transaction,
/// so nothing lives on a connection between them: it works through PgBouncer
/// in transaction mode (no server connection pinned between transactions),
/// and a host opens at most one connection at a time (the store check's two,
/// every 10 minutes, aside) and none while idle (it
/// closes `linger` after its last statement). Keepalive and the user timeout
/// are set on the socket, not sent as startup parameters: a pooler refuses
/// those (PgBouncer 1.18 accepts only client_encoding, DateStyle, TimeZone,
/// standard_conforming_strings and application_name).
actor StoreLink {
    let address: StoreAddress
    let password: String?
    let name: String
    let logger: Logger
    let linger: Duration
    private var connection: PostgresConnection?
    private var opening: Task<PostgresConnection, any Error>?
    private var users = 0
    private var closer: Task<Void, Never>?
    /// A close under way: a new connection waits for it (at most one at a time).
    private var closing: Task<Void, Never>?
    private var nextID = 0
    /// Statements sent and connections opened since start (status, docs/fleet.md's figures).
    let statements = Atomic<Int>(0)
    let connects = Atomic<Int>(0)

    init(address: StoreAddress, password: String?, name: String, logger: Logger, linger: Duration = .seconds(2)) {
        self.address = address
        self.password = password
        self.name = name
        var quiet = logger
        quiet.logLevel = .warning
        self.logger = quiet
        self.linger = linger
    }

    /// Runs `body` on the connection (opened if need be), bounded by `limit`:
    /// past it the connection is closed, failing what waits on it.
    nonisolated func run<T: Sendable>(
        _ what: String, limit: Duration, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let connection = try await acquire()
        statements.add(1, ordering: .relaxed)
        do {
            // A statement written to a connection that just closed may never be answered: the deadline does not wait.
            guard let result = try await Deadline.within(limit, { try await body(connection) }) else {
                await drop(connection)
                throw SharedStoreError("\(what) took more than \(limit.components.seconds) s (database unreachable?)")
            }
            await release()
            return result
        } catch {
            if connection.isClosed { await drop(connection) } else { await release() }
            throw error
        }
    }

    private func acquire() async throws -> PostgresConnection {
        users += 1
        closer?.cancel()
        closer = nil
        if let connection, !connection.isClosed { return connection }
        await closing?.value
        if let connection, !connection.isClosed { return connection }
        let task: Task<PostgresConnection, any Error>
        if let opening {
            task = opening
        } else {
            nextID += 1
            let id = nextID
            task = Task { try await self.open(id: id) }
            opening = task
        }
        do {
            let opened = try await task.value
            if opening == task { opening = nil }
            connection = opened
            return opened
        } catch {
            if opening == task { opening = nil }
            users -= 1
            throw error
        }
    }

    private func release() {
        users -= 1
        guard users == 0, connection != nil else { return }
        let linger = self.linger
        closer = Task {
            try? await Task.sleep(for: linger)
            guard !Task.isCancelled else { return }
            await self.closeIfIdle()
        }
    }

    private func drop(_ failed: PostgresConnection) async {
        users -= 1
        if connection === failed { connection = nil }
        await shut(failed)
    }

    private func closeIfIdle() async {
        guard users == 0, let open = connection else { return }
        connection = nil
        await shut(open)
    }

    /// Closes `open`, bounded: a close the network does not confirm is abandoned.
    private func shut(_ open: PostgresConnection) async {
        let task = Task { _ = try? await Deadline.within(.seconds(5)) { try await open.close() } }
        closing = task
        await task.value
        if closing == task { closing = nil }
    }

    /// Closes the connection now (the session stops).
    func close() async {
        closer?.cancel()
        opening?.cancel()
        guard let open = connection else { return }
        connection = nil
        _ = try? await Deadline.within(.seconds(5)) { try await open.close() }
    }

    /// A connection with keepalive on its socket: a host learns in about 11 s
    /// that the database or the pooler is gone, even with nothing to send.
    nonisolated func open(id: Int) async throws -> PostgresConnection {
        connects.add(1, ordering: .relaxed)
        let channel = try await Self.socket(to: address)
        var configuration = PostgresConnection.Configuration(
            user: address.user, database: address.database, password: password, tls: try address.tls())
        configuration.serverName = address.serverName
        configuration.applicationName = name
        do {
            return try await PostgresConnection.connect(on: channel, configuration: configuration)
        } catch {
            try? await channel.close()
            throw error
        }
    }

    static func socket(to address: StoreAddress) async throws -> any Channel {
        let tcp = NIOBSDSocket.OptionLevel(rawValue: CInt(IPPROTO_TCP))
        let option = { (name: CInt) in ChannelOptions.Types.SocketOption(level: tcp, name: NIOBSDSocket.Option(rawValue: name)) }
        return try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(3))
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .channelOption(option(TCP_KEEPIDLE), value: 5)
            .channelOption(option(TCP_KEEPINTVL), value: 2)
            .channelOption(option(TCP_KEEPCNT), value: 3)
            .channelOption(option(CInt(TCP_USER_TIMEOUT)), value: 10_000)
            .connect(host: address.host, port: address.port).get()
    }
}
