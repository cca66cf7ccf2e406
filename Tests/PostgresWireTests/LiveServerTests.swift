import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Testing

@testable import PostgresWire

/// A real PostgreSQL 15, initdb'd as user postgres into a temporary directory (it refuses root):
/// each authentication method, parameters and results, an error mid-connection, LISTEN.
@Suite(.serialized, .enabled(if: LiveServer.available))
struct LiveServerTests {
    @Test func everyAuthenticationMethodAndTypes() async throws {
        let server = try LiveServer.shared()
        for user in ["trusted", "clear", "hashed", "scram"] {
            let connection = try await server.connect(user: user, password: user == "trusted" ? nil : "pw-\(user)")
            let rows = try await connection.query(
                "SELECT \(Int64(41))::int8 + 1, \("naïve ✓"), NULL::text, \(true), '\\x00ff'::bytea, \(1.5) * 2, current_user::text, \(["a", "b\"c"])::text[]")
            let decoded = try rows.decode((Int64, String, String?, Bool, PostgresBytes, Double, String, String).self)
            #expect(decoded.count == 1)
            #expect(decoded[0].0 == 42 && decoded[0].1 == "naïve ✓" && decoded[0].2 == nil && decoded[0].3)
            #expect(decoded[0].4.bytes == [0, 0xff] && decoded[0].5 == 3 && decoded[0].6 == user)
            #expect(decoded[0].7 == #"{a,"b\"c"}"#)
            try await connection.close()
            #expect(connection.isClosed)
        }
    }

    @Test func wrongPasswordAndMissingPassword() async throws {
        let server = try LiveServer.shared()
        let wrong = await #expect(throws: PostgresError.self) { try await server.connect(user: "scram", password: "nope") }
        #expect(wrong?.sqlState == "28P01")
        let missing = await #expect(throws: PostgresError.self) { try await server.connect(user: "hashed", password: nil) }
        #expect(missing?.code == .authentication)
    }

    @Test func anErrorLeavesTheConnectionUsable() async throws {
        let server = try LiveServer.shared()
        let connection = try await server.connect(user: "trusted", password: nil)
        let error = await #expect(throws: PostgresError.self) { try await connection.query("SELECT 1 / \(Int32(0))") }
        #expect(error?.sqlState == "22012" && error?.serverInfo?[.message] == "division by zero")
        // Statements asked together run one after the other.
        async let one = connection.query("SELECT \(Int32(1))")
        async let two = connection.query("SELECT pg_sleep(0.05)::text, \(Int32(2))")
        #expect(try await one.decode(Int32.self) == [1])
        #expect(try await two.decode((String, Int32).self)[0].1 == 2)
        try await connection.close()
    }

    @Test func sslmodePreferFallsBackAndRequireRefusesAServerWithoutTLS() async throws {
        let server = try LiveServer.shared()
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .none
        let context = try NIOSSLContext(configuration: tls)
        let plain = try await server.connect(user: "scram", password: "pw-scram", tls: .prefer(context))
        #expect(try await plain.query("SELECT \(Int32(7))").decode(Int32.self) == [7])
        try await plain.close()
        let refused = await #expect(throws: PostgresError.self) {
            try await server.connect(user: "scram", password: "pw-scram", tls: .require(context))
        }
        #expect(refused?.code == .sslUnsupported)
    }

    @Test func notifications() async throws {
        let server = try LiveServer.shared()
        let listener = try await server.connect(user: "trusted", password: nil)
        let sender = try await server.connect(user: "trusted", password: nil)
        let notes = try await listener.listen("tokend test")
        try await sender.query("SELECT pg_notify(\("tokend test"), \("5 default"))::text")
        var iterator = notes.makeAsyncIterator()
        let note = try await iterator.next()
        #expect(note?.channel == "tokend test" && note?.payload == "5 default")
        try await sender.close()
        try await listener.close()
        // The stream ends with the connection.
        await #expect(throws: PostgresError.self) { _ = try await iterator.next() }
    }
}

/// One PostgreSQL for the suite, stopped when the process exits.
final class LiveServer: Sendable {
    static let bin = "/usr/lib/postgresql/15/bin"
    static let available = getuid() == 0 && FileManager.default.fileExists(atPath: "\(bin)/initdb")
        && FileManager.default.fileExists(atPath: "/usr/sbin/runuser")
    nonisolated(unsafe) static var started: LiveServer?
    static let lock = NSLock()

    let directory: String
    let port: Int

    static func shared() throws -> LiveServer {
        lock.lock()
        defer { lock.unlock() }
        if let started { return started }
        let server = try LiveServer()
        started = server
        atexit { LiveServer.started?.stop() }
        return server
    }

    init() throws {
        directory = "/tmp/pgwire-test-\(UUID().uuidString)"  // postgres must reach it: not a private TMPDIR
        port = Int.random(in: 20_000...60_000)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Self.run("/usr/bin/chown", "postgres:postgres", directory)
        let data = "\(directory)/data"
        try Self.asPostgres("\(Self.bin)/initdb", "-D", data, "-U", "postgres", "--auth-local=trust", "-E", "UTF8")
        // First match wins: these lines go before initdb's own.
        let hba = """
            host all trusted 127.0.0.1/32 trust
            host all clear 127.0.0.1/32 password
            host all hashed 127.0.0.1/32 md5
            host all scram 127.0.0.1/32 scram-sha-256

            """
        let file = "\(data)/pg_hba.conf"
        try (hba + String(contentsOfFile: file, encoding: .utf8)).write(toFile: file, atomically: false, encoding: .utf8)
        try Self.asPostgres(
            "\(Self.bin)/pg_ctl", "-D", data, "-l", "\(directory)/log", "-w", "-o",
            "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1", "start")
        for (user, encryption) in [("trusted", "scram-sha-256"), ("clear", "scram-sha-256"), ("hashed", "md5"), ("scram", "scram-sha-256")] {
            try Self.asPostgres(
                "psql", "-h", directory, "-p", "\(port)", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
                "-c", "SET password_encryption = '\(encryption)'", "-c", "CREATE ROLE \(user) LOGIN PASSWORD 'pw-\(user)'")
        }
    }

    func stop() {
        try? Self.asPostgres("\(Self.bin)/pg_ctl", "-D", "\(directory)/data", "-m", "immediate", "-w", "stop")
        try? FileManager.default.removeItem(atPath: directory)
    }

    func connect(user: String, password: String?, tls: PostgresConnection.Configuration.TLS = .disable) async throws
        -> PostgresConnection
    {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port).get()
        var configuration = PostgresConnection.Configuration(user: user, database: "postgres", password: password, tls: tls)
        configuration.applicationName = "pgwire test"
        return try await PostgresConnection.connect(on: channel, configuration: configuration)
    }

    static func asPostgres(_ command: String...) throws {
        try run("/usr/sbin/runuser", ["-u", "postgres", "--"] + command)
    }

    static func run(_ path: String, _ arguments: String...) throws {
        try run(path, arguments)
    }

    /// posix_spawn and waitpid: Foundation's Process did not see pg_ctl's exit here.
    static func run(_ path: String, _ arguments: [String]) throws {
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var files: posix_spawn_file_actions_t = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&files)
        defer { posix_spawn_file_actions_destroy(&files) }
        posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0)
        var pid: pid_t = 0
        guard posix_spawn(&pid, path, &files, nil, argv, environ) == 0 else {
            throw PostgresError(.connectionError, "cannot start \(path)")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        guard status == 0 else {
            throw PostgresError(.connectionError, "\(path) \(arguments.joined(separator: " ")) exited \(status)")
        }
    }
}
