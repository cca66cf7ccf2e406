import HTTPExchange
import Foundation
import NIOCore
import Secrets
import Synchronization
import Testing
@testable import OAuth

#if canImport(Glibc)
import Glibc
#endif

/// A request as the test server read it.
struct ServedRequest: Sendable {
    var method: String
    var target: String
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// What the test server answers; `never` keeps the connection open without a word.
struct ServedResponse: Sendable {
    var status: Int
    var headers: [(String, String)] = []
    var body: [UInt8] = []
    var never = false

    static func json(_ text: String, status: Int = 200) -> ServedResponse {
        ServedResponse(status: status, headers: [("Content-Type", "application/json")], body: Array(text.utf8))
    }

    static let silent = ServedResponse(status: 0, never: true)
}

/// A small HTTP/1.1 server on 127.0.0.1 for the guard's and discovery's
/// tests: one thread, one connection at a time, `Connection: close`. It
/// counts the connections it accepts, so a test can show that a refused URL
/// made none.
final class LoopbackHTTPServer: Sendable {
    typealias Handler = @Sendable (ServedRequest, _ base: String) -> ServedResponse

    let port: Int
    let listener: Int32
    let accepted = Mutex(0)
    let requests = Mutex<[ServedRequest]>([])
    let held = Mutex<[Int32]>([])

    var base: String { "http://127.0.0.1:\(port)" }

    init(_ handler: @escaping Handler) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard listener >= 0, bound == 0, listen(listener, 16) == 0 else { throw ServerFailed() }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        let base = "http://127.0.0.1:\(port)"
        Thread.detachNewThread { [self] in serve(handler, base: base) }
    }

    struct ServerFailed: Error {}

    var acceptedCount: Int { accepted.withLock { $0 } }
    var served: [ServedRequest] { requests.withLock { $0 } }

    /// Stops accepting: accept fails once the listener is shut down, and the
    /// serving thread closes it then — closed here, its number could be
    /// reused by another test's listener while the thread still accepts on it.
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        for connection in held.withLock({ $0 }) { close(connection) }
    }

    func serve(_ handler: Handler, base: String) {
        while true {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else {
                close(listener)
                return
            }
            accepted.withLock { $0 += 1 }
            guard let request = Self.read(connection) else {
                close(connection)
                continue
            }
            requests.withLock { $0.append(request) }
            let response = handler(request, base)
            if response.never {
                held.withLock { $0.append(connection) }
                continue
            }
            var head = "HTTP/1.1 \(response.status) Test\r\nConnection: close\r\nContent-Length: \(response.body.count)\r\n"
            for (name, value) in response.headers { head += "\(name): \(value)\r\n" }
            let bytes = Array((head + "\r\n").utf8) + response.body
            var sent = 0
            while sent < bytes.count {
                let count = bytes[sent...].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard count > 0 else { break }
                sent += count
            }
            close(connection)
        }
    }

    /// One request: the head up to the blank line, then Content-Length bytes of body.
    static func read(_ connection: Int32) -> ServedRequest? {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        var headEnd: Int? = nil
        var wanted = Int.max
        while buffer.count < wanted {
            let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return nil }
            buffer += chunk[0..<count]
            if headEnd == nil, let end = buffer.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound {
                headEnd = end
                let head = String(decoding: buffer[0..<end], as: UTF8.self)
                let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                wanted = end + length
            }
        }
        guard let headEnd else { return nil }
        let lines = String(decoding: buffer[0..<headEnd], as: UTF8.self).split(separator: "\r\n")
        let start = lines.first?.split(separator: " ") ?? []
        guard start.count >= 2 else { return nil }
        let headers = lines.dropFirst().compactMap { line -> (name: String, value: String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return ServedRequest(method: String(start[0]), target: String(start[1]), headers: headers, body: Array(buffer[headEnd...]))
    }
}

/// The guarded exchange itself, against the server above.
@Suite struct OutboundFetchTests {
    let loopback = OutboundPolicy(allowLoopbackHTTP: true)

    func get(_ url: String, policy: OutboundPolicy) async throws -> (OutboundAnswer, URL) {
        try await policy.get(URL(string: url)!, step: "challenge", until: ContinuousClock.now + .seconds(30))
    }

    @Test func aLoopbackServerIsReachedOnlyWithAllowLoopbackHTTP() async throws {
        let server = try LoopbackHTTPServer { _, _ in .json(#"{"ok":true}"#) }
        defer { server.stop() }
        let (answer, _) = try await get(server.base + "/x", policy: loopback)
        #expect(answer.status == 200)
        #expect(answer.address == "127.0.0.1")
        await #expect(throws: AddressRefused.self) { try await get(server.base + "/x", policy: OutboundPolicy()) }
        #expect(server.acceptedCount == 1)
    }

    @Test func aNameIsConnectedToAtTheAddressChecked() async throws {
        let server = try LoopbackHTTPServer { request, _ in .json(#"{"host":"\#(request.header("Host") ?? "")"}"#) }
        defer { server.stop() }
        // localhost resolves to 127.0.0.1 and perhaps ::1; every one is checked, and one is connected to.
        let (answer, _) = try await get("http://localhost:\(server.port)/x", policy: loopback)
        #expect(answer.status == 200)
        #expect(String(decoding: answer.body, as: UTF8.self).contains("localhost:\(server.port)"))
        let refused = await #expect(throws: AddressRefused.self) {
            try await get("http://localhost:\(server.port)/x", policy: OutboundPolicy())
        }
        #expect(refused?.description.contains("allow-loopback-http") == true)
        #expect(server.acceptedCount == 1)
    }

    @Test func redirectsAreFollowedAndEachHopChecked() async throws {
        let server = try LoopbackHTTPServer { request, base in
            switch request.target {
            case "/a": ServedResponse(status: 302, headers: [("Location", "/b")])
            case "/b": ServedResponse(status: 307, headers: [("Location", base + "/c")])
            case "/metadata": ServedResponse(status: 302, headers: [("Location", "http://169.254.169.254/latest/meta-data/")])
            case "/mapped": ServedResponse(status: 301, headers: [("Location", "http://[::ffff:169.254.169.254]/")])
            case "/loop": ServedResponse(status: 302, headers: [("Location", "/loop")])
            default: .json("{}")
            }
        }
        defer { server.stop() }
        let (answer, url) = try await get(server.base + "/a", policy: loopback)
        #expect(answer.status == 200)
        #expect(url.absoluteString == server.base + "/c")
        for path in ["/metadata", "/mapped"] {
            let refused = await #expect(throws: AddressRefused.self) { try await get(server.base + path, policy: loopback) }
            #expect(refused?.reason.contains("link-local (cloud metadata)") == true)
        }
        let looping = await #expect(throws: DiscoveryFailed.self) { try await get(server.base + "/loop", policy: loopback) }
        #expect(looping?.reason.contains("more than 3") == true)
        #expect(server.served.filter { $0.target == "/loop" }.count == 4)
    }

    @Test func bodiesAndTimeAreBounded() async throws {
        let server = try LoopbackHTTPServer { request, _ in
            request.target == "/big"
                ? ServedResponse(status: 200, body: [UInt8](repeating: 0x41, count: OutboundPolicy.maximumBodySize + 1)) : .silent
        }
        defer { server.stop() }
        let big = await #expect(throws: DiscoveryFailed.self) { try await get(server.base + "/big", policy: loopback) }
        #expect(big?.reason.contains("more than \(OutboundPolicy.maximumBodySize) bytes") == true)
        let started = ContinuousClock.now
        let silent = await #expect(throws: DiscoveryFailed.self) {
            try await loopback.get(URL(string: server.base + "/silent")!, step: "token", until: ContinuousClock.now + .seconds(1))
        }
        #expect(silent?.reason == "no answer in time")
        #expect(silent?.step == "token")
        // The bound holds however busy the machine is; the upper figure only says it was not waited out twice over.
        #expect(ContinuousClock.now - started < .seconds(30))
    }

    @Test func anEndpointWithAPolicySendsThroughTheGuard() async throws {
        let server = try LoopbackHTTPServer { _, _ in
            .json(#"{"access_token":"at-1","token_type":"Bearer","expires_in":60}"#)
        }
        defer { server.stop() }
        func endpoint(_ policy: OutboundPolicy?) -> HTTPTokenEndpoint {
            HTTPTokenEndpoint(
                endpoints: ProviderEndpoints(token: URL(string: server.base + "/token")),
                credentials: ClientCredentials(clientID: "c", secret: nil, authentication: .none), scope: nil,
                timeout: .seconds(30), outbound: policy)
        }
        let allowed = await endpoint(loopback).refresh(refreshToken: Secret("rt-1"), cookieHeader: "")
        #expect(try allowed.result.get().accessToken.reveal() == "at-1")
        let refused = await endpoint(OutboundPolicy()).refresh(refreshToken: Secret("rt-1"), cookieHeader: "")
        guard case .failure(let error) = refused.result else {
            Issue.record("a refresh to loopback was sent without allow-loopback-http")
            return
        }
        #expect(error.code == AddressRefused.code)
        #expect(error.reason.contains("allow-loopback-http"))
        #expect(server.acceptedCount == 1)
    }
}

@Suite struct OutboundAddressOrderTests {
    @Test func theNextCheckedAddressIsTriedWhenOneRefusesTheConnection() async throws {
        let server = try LoopbackHTTPServer { _, _ in .json("{}") }
        defer { server.stop() }
        // 127.0.0.2 reaches this host too, where nothing listens on the server's port (it is bound to 127.0.0.1).
        let target = CheckedTarget(host: "localhost", addresses: [IPAddress("127.0.0.2")!, IPAddress("127.0.0.1")!])
        let answer = try await OutboundPolicy.fetch(
            HTTPRequest(url: "http://localhost:\(server.port)/"), from: target, deadline: NIODeadline.now() + .seconds(30), limit: 1024)
        #expect(answer.address == "127.0.0.1")
        let alone = CheckedTarget(host: "localhost", addresses: [IPAddress("127.0.0.2")!])
        await #expect(throws: (any Error).self) {
            try await OutboundPolicy.fetch(
                HTTPRequest(url: "http://localhost:\(server.port)/"), from: alone, deadline: NIODeadline.now() + .seconds(30), limit: 1024)
        }
        #expect(server.acceptedCount == 1)
    }
}
