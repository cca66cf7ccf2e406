import Foundation
import Logging
import Testing
import TestSupport
import TokendMetrics
import Varlink

@testable import UnixServer

/// What the loop counts, over real sockets: calls answered on the loop and by
/// the service, refused peers, closed connections, and the loopback HTTP
/// listener it serves beside the Unix socket. In the loop's suite: its tests
/// run one at a time (the test client blocks a thread the service's tasks need).
extension ServerLoopTests {
    static let metricsInterface = try! VarlinkInterface(description: """
        interface org.example.metrics
        method Fast() -> (fast: bool)
        method Slow() -> (slow: bool)
        method Fail() -> ()
        error Broken ()
        """)

    final class MetricsServer: Sendable {
        let path = NSTemporaryDirectory() + "metrics-\(UUID().uuidString.prefix(8)).sock"
        let metrics = Metrics()
        let server: ServerMetrics
        let port: Int
        let task: Task<Void, Error>

        init(admission: VarlinkServer.Admission? = nil) async throws {
            server = ServerMetrics(
                metrics, methods: ["org.example.metrics.Fast", "org.example.metrics.Slow", "org.example.metrics.Fail"],
                errors: ["org.example.metrics.Broken"], hot: "org.example.metrics.Fast")
            let port = try Self.freePort()
            self.port = port
            let service = VarlinkService(
                info: ServiceInfo(vendor: "t", product: "t", version: "1", url: "u"),
                implementations: [
                    VarlinkImplementation(
                        interface: ServerLoopTests.metricsInterface,
                        methods: [
                            "Slow": .call { _, _ in ["slow": true] },
                            "Fail": .call { _, _ in throw VarlinkError("org.example.metrics.Broken") },
                        ])
                ])
            var fastReply: [UInt8] = []
            VarlinkReply(parameters: ["fast": true]).encode(into: &fastReply)
            var logger = Logger(label: "test")
            logger.logLevel = .critical
            var limits = VarlinkServer.Limits()
            limits.checkInterval = .milliseconds(100)
            let metrics = self.metrics
            let server = VarlinkServer(
                service: service, source: .path(path, mode: 0o600), limits: limits, logger: logger,
                fastPath: { [fastReply] call, _ in
                    call.method == "org.example.metrics.Fast" ? .init(bytes: fastReply, reusableFor: .seconds(60)) : nil
                },
                admission: admission, metrics: self.server,
                http: HTTPListener(host: "127.0.0.1", port: port) { head in
                    head.values("Host") == ["127.0.0.1:\(port)"]
                        ? HTTPAnswer(status: 200, reason: "OK", body: metrics.render(.prometheus))
                        : HTTPAnswer(status: 421, reason: "Misdirected Request", body: "no\n")
                })
            let (ready, readyContinuation) = AsyncStream<Void>.makeStream()
            task = Task { try await server.run { readyContinuation.finish() } }
            for await _ in ready {}
        }

        /// A port nothing listens on: bound to port 0, read back, let go.
        static func freePort() throws -> Int {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
                }
            }
            guard bound else { throw TestFailure("no free port: errno \(errno)") }
            return Int(UInt16(bigEndian: address.sin_port))
        }

        func stop() async {
            task.cancel()
            _ = try? await task.value
            unlink(path)
        }
    }

    @Test func callsAreCountedByMethodAndResultOnTheLoopAndInTheService() async throws {
        let running = try await MetricsServer()
        let client = try TestClient(path: running.path)
        for _ in 0..<5 { client.send(TestClient.frame("org.example.metrics.Fast")) }  // the first, then four repeats
        client.send(TestClient.frame("org.example.metrics.Slow") + TestClient.frame("org.example.metrics.Fail"))
        client.send(TestClient.frame("made.up.Method"))
        for _ in 0..<8 { #expect(client.reply() != nil) }
        #expect(running.server.calls(method: "org.example.metrics.Fast", error: nil).value == 5)
        #expect(running.server.calls(method: "org.example.metrics.Slow", error: nil).value == 1)
        #expect(running.server.calls(method: "org.example.metrics.Fail", error: "org.example.metrics.Broken").value == 1)
        #expect(running.server.calls(method: "made.up.Method", error: "org.varlink.service.MethodNotFound").value == 1)
        #expect(running.server.connections.value == 1 && running.server.accepted.value == 1)
        client.send("not json\0")
        #expect(client.closedByServer())
        try await eventually { running.server.connections.value == 0 }
        #expect(running.server.value(of: .malformed) == 1)
        await running.stop()
    }

    @Test func aPeerAllowedNothingIsCountedAsRefused() async throws {
        let running = try await MetricsServer(admission: { _ in .refused(.permissionDenied) })
        let client = try TestClient(path: running.path)
        client.send(TestClient.frame("org.example.metrics.Fast"))
        #expect(client.reply()?.error == VarlinkError.permissionDenied.name)
        #expect(running.server.value(of: .permission) == 1 && running.server.accepted.value == 0)
        await running.stop()
    }

    @Test func theHTTPListenerAnswersOneRequestPerConnectionOnTheSameLoop() async throws {
        let running = try await MetricsServer()
        func ask(_ request: String) throws -> String {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(running.port).bigEndian)
            inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else { throw TestFailure("connect: errno \(errno)") }
            _ = request.withCString { send(fd, $0, strlen($0), 0) }
            var answer: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { break }
                answer += chunk[..<count]
            }
            return String(decoding: answer, as: UTF8.self)
        }
        let client = try TestClient(path: running.path)
        client.send(TestClient.frame("org.example.metrics.Fast"))
        _ = client.reply()
        let ok = try ask("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:\(running.port)\r\n\r\n")
        #expect(ok.hasPrefix("HTTP/1.1 200 OK\r\n") && ok.contains("Connection: close\r\n"))
        #expect(ok.contains(#"tokend_varlink_calls_total{method="org.example.metrics.Fast",result="ok"} 1"#))
        #expect(try ask("GET /metrics HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n").hasPrefix("HTTP/1.1 421"))
        #expect(try ask("garbage\r\n\r\n").hasPrefix("HTTP/1.1 400"))
        #expect(try ask("GET / HTTP/1.1\r\nX: \(String(repeating: "a", count: 9000))").hasPrefix("HTTP/1.1 431"))
        // The Unix socket is served all along, by the same loop.
        client.send(TestClient.frame("org.example.metrics.Fast"))
        #expect(client.reply()?.parameters["fast"] == true)
        await running.stop()
    }
}
