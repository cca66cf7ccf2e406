import Foundation
import Logging
import Testing
import TestSupport
import Varlink

@testable import UnixServer

#if canImport(Glibc)
import Glibc
#endif

/// A server that cannot serve says so: `run` throws, naming the path and the
/// reason, and the health check fails once the loop is not turning.
@Suite struct LoopFailureTests {
    static func server(at path: String) -> VarlinkServer {
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        let service = VarlinkService(
            info: ServiceInfo(vendor: "test", product: "test", version: "1", url: "u"), implementations: [])
        return VarlinkServer(service: service, source: .path(path, mode: 0o600), logger: logger, subordinateIDs: SubordinateIDs())
    }

    static func temporary(_ name: String) -> String {
        NSTemporaryDirectory() + "loopfailure-\(UUID().uuidString.prefix(8))-\(name)"
    }

    static func runError(_ server: VarlinkServer) async -> String? {
        do {
            try await server.run()
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func aSocketWhoseDirectoryIsARegularFileFailsNamingThePath() async throws {
        let file = Self.temporary("file")
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        defer { unlink(file) }
        let error = try #require(await Self.runError(Self.server(at: file + "/tokend.sock")))
        #expect(error.contains(file + "/tokend.sock"), "\(error)")
        #expect(error.contains("not a directory"), "\(error)")
    }

    @Test func aLiveListenerIsNeitherUnlinkedNorTaken() async throws {
        let path = Self.temporary("live.sock")
        defer { unlink(path) }
        let other = try listeningSocket(at: path)
        defer { close(other) }
        let error = try #require(await Self.runError(Self.server(at: path)))
        #expect(error.contains(path) && error.contains("another program already listens there"), "\(error)")
        _ = try TestClient(path: path)  // the other program still has its socket
    }

    @Test func aFileThatIsNotASocketIsLeftAlone() async throws {
        let path = Self.temporary("plain")
        #expect(FileManager.default.createFile(atPath: path, contents: Data("keep".utf8)))
        defer { unlink(path) }
        let error = try #require(await Self.runError(Self.server(at: path)))
        #expect(error.contains(path) && error.contains("not a socket"), "\(error)")
        #expect(FileManager.default.contents(atPath: path) == Data("keep".utf8))
    }

    @Test func aStaleSocketIsReplaced() async throws {
        let path = Self.temporary("stale.sock")
        close(try listeningSocket(at: path))  // bound, then its server gone
        let server = Self.server(at: path)
        let (ready, readyContinuation) = AsyncStream<Void>.makeStream()
        let running = Task { try await server.run { readyContinuation.finish() } }
        for await _ in ready {}
        try await server.healthCheck()
        running.cancel()
        try await running.value
        unlink(path)
    }

    @Test func aLoopThatFailsEndsRunWithAnErrorAndFailsTheHealthCheck() async throws {
        let path = Self.temporary("fail.sock")
        defer { unlink(path) }
        let server = Self.server(at: path)
        let (ready, readyContinuation) = AsyncStream<Void>.makeStream()
        let running = Task { try await server.run { readyContinuation.finish() } }
        for await _ in ready {}
        try await server.healthCheck()
        // epoll_wait fails on the loop's next turn.
        let loop = try #require(server.running.loop.withLock { $0 })
        _ = try await loop.inspectForTesting { loop in close(loop.epoll) }
        await #expect(throws: ServerLoopFailed.self) { try await running.value }
        await #expect(throws: ServerLoopFailed.self) { try await server.healthCheck() }
    }

    @Test func theHealthCheckFailsOnceTheServerHasStopped() async throws {
        let path = Self.temporary("stop.sock")
        defer { unlink(path) }
        let server = Self.server(at: path)
        await #expect(throws: ServerLoopFailed.self) { try await server.healthCheck() }
        let (ready, readyContinuation) = AsyncStream<Void>.makeStream()
        let running = Task { try await server.run { readyContinuation.finish() } }
        for await _ in ready {}
        try await server.healthCheck()
        running.cancel()
        try await running.value
        await #expect(throws: ServerLoopFailed.self) { try await server.healthCheck() }
    }
}

/// A Unix socket bound and listening at `path`, as another program's would be.
func listeningSocket(at path: String) throws -> CInt {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: path.utf8)
        raw[path.utf8.count] = 0
    }
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard bound == 0, listen(fd, 8) == 0 else { throw TestFailure("cannot listen at \(path): errno \(errno)") }
    return fd
}
