import NIOCore
import NIOPosix
import NIOSSL
import Testing

@testable import PostgresWire

/// A server (or a pooler, or whoever is on the path with sslmode disable, prefer or require) that
/// sends what nobody asked for: the connection ends, and what it costs is bounded.
@Suite struct HostileServerTests {
    typealias Server = ScriptedPostgres

    /// The first LISTEN, then `extra` unasked.
    static func listening(then extra: [ByteBuffer]) async throws -> Server {
        try await Server { event in
            switch event {
            case .sslRequest: [ByteBuffer(bytes: [UInt8(ascii: "N")])]
            case .startup: Server.ready
            case .statement(1): Server.done("LISTEN") + extra
            case .statement: Server.done("SELECT 1")
            }
        }
    }

    @Test func aMessageBetweenStatementsEndsTheListenStream() async throws {
        let big = String(repeating: "x", count: 1 << 20)
        let server = try await Self.listening(then: [Server.message("C", Server.string(big))])
        defer { server.stop() }
        let connection = try await server.connect()
        let notes = try await connection.listen("tokend")
        let error = await #expect(throws: PostgresError.self) { for try await _ in notes {} }
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason == "the server sent CommandComplete while no statement was running")
        #expect(connection.isClosed)
        await #expect(throws: PostgresError.self) { try await connection.query("SELECT 1") }
    }

    @Test func aNotificationPastAServersCapEndsTheConnection() async throws {
        let server = try await Self.listening(then: [
            Server.notification("tokend", String(repeating: "a", count: 8000)),
            Server.notification("tokend", String(repeating: "b", count: 9000)),
        ])
        defer { server.stop() }
        let connection = try await server.connect()
        let notes = try await connection.listen("tokend")
        var payloads: [Int] = []
        do {
            for try await note in notes { payloads.append(note.payload.utf8.count) }
            Issue.record("the notifications ended without an error")
        } catch let error as PostgresError {
            #expect(error.reason == "a NotificationResponse of 9012 bytes (limit \(BackendDecoder.notificationLimit))")
        }
        #expect(payloads == [8000])
    }

    static func startup(with parameters: [(String, String)]) async throws -> Server {
        try await Server { event in
            guard case .startup = event else { return [] }
            let status = parameters.map { Server.message("S", Server.string($0.0) + Server.string($0.1)) }
            return [Server.ready[0]] + status + [Server.ready[1]]
        }
    }

    @Test func parameterStatusIsBoundedInNamesAndSize() async throws {
        let enough = try await Self.startup(with: (1...64).map { ("name\($0)", "value") })
        defer { enough.stop() }
        let connection = try await enough.connect()
        #expect(connection.parameters.count == 64)
        try await connection.close()

        let many = try await Self.startup(with: (1...65).map { ("name\($0)", "value") })
        defer { many.stop() }
        let error = await #expect(throws: PostgresError.self) { try await many.connect() }
        #expect(error?.reason == "the server sent more than 64 ParameterStatus names")

        let large = try await Self.startup(with: [("TimeZone", String(repeating: "z", count: 9 << 10))])
        defer { large.stop() }
        let tooLarge = await #expect(throws: PostgresError.self) { try await large.connect() }
        #expect(tooLarge?.reason.hasPrefix("a ParameterStatus of") == true)
    }

    @Test func closeDoesNotWaitForAServerThatStopsReading() async throws {
        let server = try await Server(stopsReading: true) { event in
            guard case .startup = event else { return [] }
            return Server.ready
        }
        defer { server.stop() }
        let connection = try await server.connect()
        // More than the sockets' buffers hold: Terminate waits behind it for a read that never comes.
        connection.channel.writeAndFlush(ByteBuffer(repeating: 0, count: 64 << 20), promise: nil)
        // Unstructured: a close that hangs fails the test instead of hanging the run.
        let (outcomes, outcome) = AsyncStream<Bool>.makeStream()
        Task {
            try? await connection.close()
            outcome.yield(true)
        }
        Task {
            try? await Task.sleep(for: .seconds(60))
            outcome.yield(false)
        }
        let closed = await outcomes.first { _ in true } ?? false
        #expect(closed)
        #expect(connection.isClosed)
    }

    /// A read that follows the server's 'S' (a separate read, so the decoder's own check does not see
    /// it) goes to TLS, never to the decoder as plaintext: TLS is in place in the read that brought 'S'.
    @Test func noByteAfterTheSSLAnswerIsReadAsPlaintext() async throws {
        let server = try await Server { _ in [] }
        defer { server.stop() }
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: server.port).get()
        defer { channel.close(promise: nil) }
        let inbox = Inbox()
        let context = try NIOSSLContext(configuration: .makeClientConfiguration())
        let tlsInPlace = try await channel.eventLoop.submit {
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandlers(
                ByteToMessageHandler(BackendDecoder(awaitingSSLResponse: true)),
                PostgresHandler(inbox: inbox, listeners: Listeners(), parameters: ServerParameters(), tls: (context, nil)))
            pipeline.fireChannelRead(NIOAny(ByteBuffer(bytes: [UInt8(ascii: "S")])))
            let inPlace = (try? pipeline.handler(type: NIOSSLClientHandler.self)) != nil
            // An injected AuthenticationOk and ReadyForQuery, as a man in the middle would send them.
            var forged = Server.ready[0]
            var ready = Server.ready[1]
            forged.writeBuffer(&ready)
            pipeline.fireChannelRead(NIOAny(forged))
            return inPlace
        }.get()
        #expect(tlsInPlace)
        #expect(inbox.takeUnread() == [.sslResponse(true)])
        // TLS took the forged bytes for a record, and refused them (without TLS nothing would end it).
        if tlsInPlace {
            let error = await #expect(throws: PostgresError.self) { try await inbox.receive() }
            #expect(error?.code == .connectionError)
        }
    }
}
