import Foundation
import Logging
import Testing
import TestSupport
import Varlink

@testable import UnixServer

#if canImport(Glibc)
import Glibc
#endif

/// Descriptors passed with calls (SCM_RIGHTS) and listeners served beside
/// the main one, over real sockets: a call's descriptor is its handler's;
/// one it does not take, extra ones, and those on a side connection are
/// closed; a side listener has its own service, its own per-person limit,
/// and stopping it closes its connections. (Its tests are ServerLoopTests':
/// tests that block in a socket run one at a time.)
enum SideListenerFixtures {
    static let interface = try! VarlinkInterface(description: """
        interface org.example.side
        method Take() -> (passed: bool, listening: bool)
        method Leave() -> (passed: bool)
        method Where() -> (side: bool)
        """)

    /// A server whose Take keeps the passed descriptor (closing it), whose Leave does not take it.
    static func service(side: Bool) -> VarlinkService {
        VarlinkService(
            info: ServiceInfo(vendor: "test", product: "test", version: "1", url: "u"),
            implementations: [
                VarlinkImplementation(
                    interface: interface,
                    methods: [
                        "Take": .call { _, _ in
                            guard let fd = PassedDescriptor.current?.take() else { return ["passed": false, "listening": false] }
                            defer { close(fd) }
                            var value: Int32 = 0
                            var length = socklen_t(4)
                            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &length)
                            return ["passed": true, "listening": .bool(value == 1)]
                        },
                        "Leave": .call { _, _ in ["passed": .bool(PassedDescriptor.current != nil)] },
                        "Where": .call { _, _ in ["side": .bool(side)] },
                    ])
            ])
    }

    struct Server {
        let path: String
        let server: VarlinkServer
        let task: Task<Void, Error>

        /// `drain`: take descriptors as on a kernel without SO_PASSRIGHTS.
        init(drain: Bool = false) async throws {
            path = NSTemporaryDirectory() + "side-\(UUID().uuidString.prefix(8)).sock"
            var logger = Logger(label: "test")
            logger.logLevel = .critical
            let server = VarlinkServer(
                service: SideListenerFixtures.service(side: false), source: .path(path, mode: 0o600),
                limits: Harness.quickLimits(), logger: logger, subordinateIDs: SubordinateIDs(),
                descriptors: .init(method: SideListenerFixtures.expect, drain: drain))
            self.server = server
            let (ready, readyContinuation) = AsyncStream<Void>.makeStream()
            task = Task { try await server.run { readyContinuation.finish() } }
            for await _ in ready {}
        }

        func stop() async {
            task.cancel()
            _ = try? await task.value
            unlink(path)
        }
    }

    /// The method the loop answers itself: the connection's next call may carry a descriptor.
    static let expect = "org.example.side.Expect"

    /// Sends `frame` with `descriptors` in one sendmsg; false if the kernel refused it.
    @discardableResult
    static func send(_ frame: String, passing descriptors: [CInt], on fd: CInt) -> Bool {
        var bytes = Array(frame.utf8)
        let header = MemoryLayout<cmsghdr>.size
        let length = header + descriptors.count * MemoryLayout<CInt>.size
        var control = [UInt8](repeating: 0, count: (length + 7) & ~7)
        control.withUnsafeMutableBytes { raw in
            var message = cmsghdr()
            message.cmsg_len = length
            message.cmsg_level = SOL_SOCKET
            message.cmsg_type = Int32(SCM_RIGHTS)
            raw.storeBytes(of: message, as: cmsghdr.self)
            for (index, descriptor) in descriptors.enumerated() {
                raw.storeBytes(of: descriptor, toByteOffset: header + index * 4, as: CInt.self)
            }
        }
        let sent = bytes.withUnsafeMutableBytes { bytes in
            control.withUnsafeMutableBytes { control in
                var vector = iovec(iov_base: bytes.baseAddress, iov_len: bytes.count)
                return withUnsafeMutablePointer(to: &vector) { vector in
                    var message = msghdr()
                    message.msg_iov = vector
                    message.msg_iovlen = 1
                    message.msg_control = control.baseAddress
                    message.msg_controllen = control.count
                    return sendmsg(fd, &message, 0)
                }
            }
        }
        return sent >= 0
    }

    static func openDescriptors() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
    }

    static func listener(at path: String) -> CInt {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        listen(fd, 16)
        return fd
    }
}

extension ServerLoopTests {
    typealias Side = SideListenerFixtures

    /// Both ways a loop takes descriptors: refused in the kernel unless asked for, and drained.
    @Test(arguments: [false, true])
    func aDescriptorPassedWithACallIsItsHandlersAndNoOtherIsKept(drain: Bool) async throws {
        let server = try await Side.Server(drain: drain)
        let client = try TestClient(path: server.path)
        let sidePath = server.path + ".l"
        let listening = Side.listener(at: sidePath)
        defer {
            close(listening)
            unlink(sidePath)
        }
        func expect() {
            client.send(TestClient.frame(Side.expect))
            #expect(client.reply()?.error == nil)
        }
        expect()
        Side.send(TestClient.frame("org.example.side.Take"), passing: [listening], on: client.fd)
        let taken = client.reply()
        #expect(taken?.parameters["passed"] == true && taken?.parameters["listening"] == true)
        Side.send(TestClient.frame("org.example.side.Take"), passing: [], on: client.fd)
        #expect(client.reply()?.parameters["passed"] == false)
        // Not asked for: refused by the kernel, or taken and closed, never the call's.
        let unasked = Side.send(TestClient.frame("org.example.side.Leave"), passing: [listening], on: client.fd)
        #expect(unasked == drain)
        if !unasked { client.send(TestClient.frame("org.example.side.Leave")) }
        #expect(client.reply()?.parameters["passed"] == false)
        // Calls whose descriptors are not taken, or come two at a time: none stays open in the server.
        let before = Side.openDescriptors()
        for _ in 0..<50 {
            var pair: [CInt] = [0, 0]
            socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair)
            expect()
            #expect(Side.send(TestClient.frame("org.example.side.Leave"), passing: pair, on: client.fd))
            #expect(client.reply()?.parameters["passed"] == true)
            close(pair[0])
            close(pair[1])
        }
        try await eventually { Side.openDescriptors() <= before }
        // A descriptor sent ahead of its call (with a part of it) goes with no call: closed.
        var pair: [CInt] = [0, 0]
        socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair)
        let frame = TestClient.frame("org.example.side.Leave")
        expect()
        Side.send(String(frame.prefix(10)), passing: [pair[0]], on: client.fd)
        client.send(String(frame.dropFirst(10)))
        #expect(client.reply()?.parameters["passed"] == false)
        close(pair[0])
        close(pair[1])
        try await eventually { Side.openDescriptors() <= before }
        await server.stop()
    }

    @Test func aSideListenerHasItsServiceItsLimitAndEndsWithItsConnections() async throws {
        let server = try await Side.Server()
        let sidePath = server.path + ".side"
        defer { unlink(sidePath) }
        let side = try server.server.serve(
            listener: Side.listener(at: sidePath), service: Side.service(side: true), person: 4242, limit: 2,
            limitError: VarlinkError("org.example.side.TooMany"))
        let first = try TestClient(path: sidePath)
        first.send(TestClient.frame("org.example.side.Where"))
        #expect(first.reply()?.parameters["side"] == true)
        let second = try TestClient(path: sidePath)
        second.send(TestClient.frame("org.example.side.Where"))
        #expect(second.reply()?.parameters["side"] == true)
        try await eventually { side.connections == 2 }
        let third = try TestClient(path: sidePath)
        third.send(TestClient.frame("org.example.side.Where"))
        #expect(third.reply()?.error == "org.example.side.TooMany")
        // A descriptor sent on a side connection is never a call's: refused by
        // the kernel where it can (the side listener's connections inherit it), else closed.
        var pair: [CInt] = [0, 0]
        socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair)
        first.send(TestClient.frame(Side.expect))
        #expect(first.reply()?.error == "org.varlink.service.PermissionDenied")
        if !Side.send(TestClient.frame("org.example.side.Leave"), passing: [pair[0]], on: first.fd) {
            first.send(TestClient.frame("org.example.side.Leave"))
        }
        #expect(first.reply()?.parameters["passed"] == false)
        close(pair[0])
        close(pair[1])
        // The main socket is served by its own service all along.
        let main = try TestClient(path: server.path)
        main.send(TestClient.frame("org.example.side.Where"))
        #expect(main.reply()?.parameters["side"] == false)
        server.server.stopServing(side)
        #expect(first.closedByServer() && second.closedByServer())
        try await eventually { side.connections == 0 }
        // The listening socket is closed by the closer, off the loop: soon, not at once.
        try await eventually { (try? TestClient(path: sidePath)) == nil }
        await server.stop()
    }

    /// Security round five, finding 5: a share's far side holds bytes in a budget of its own, in its
    /// creator's name. Far-side connections that fill 4 MiB with unfinished messages (the last one past
    /// it is closed) leave the creator's own connections on the main socket the whole 4 MiB: four of them
    /// hold 3.6 MB more, and a call completed on one is answered.
    @Test func aShareFarSideFillingItsBudgetLeavesTheCreatorsOwnUntouched() async throws {
        let server = try await Side.Server()
        let sidePath = server.path + ".side"
        defer { unlink(sidePath) }
        _ = try server.server.serve(
            listener: Side.listener(at: sidePath), service: Side.service(side: true), person: getuid(), limit: 64,
            limitError: VarlinkError("org.example.side.TooMany"))
        // A call whose message is 900 KB long (under the 1 MiB frame limit), sent all but its end.
        let unfinished = #"{"method":"org.example.side.Where","parameters":{"pad":""# + String(repeating: "x", count: 900_000)
        let end = #""}}"# + "\u{0}"
        var far: [TestClient] = []
        for _ in 0..<5 {
            let client = try TestClient(path: sidePath)
            client.send(unfinished)
            far.append(client)
        }
        // 4.5 MB through the share: past the budget, the connection that passed it is closed.
        #expect(far[4].closedByServer(), "the far side's own budget is full")
        var own: [TestClient] = []
        for _ in 0..<4 {
            let client = try TestClient(path: server.path)
            client.send(unfinished)
            own.append(client)
        }
        // 3.6 MB more held for the creator on the main socket, none of it refused: each message, ended, is answered.
        for client in own {
            client.send(end)
            #expect(client.reply() != nil, "the creator's own connection is read and answered")
        }
        // And the far side's first four still hold theirs: ended, they are answered too.
        for client in far.prefix(4) {
            client.send(end)
            #expect(client.reply() != nil)
        }
        await server.stop()
    }
}
