import CWebKitGTK
import Foundation
import Testing
import Varlink

@testable import TokendWebView

@MainActor @Suite struct VarlinkConnectionTests {
    /// A listening Unix socket standing in for tokend.
    func listener() throws -> (path: String, fd: Int32) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("varlink-\(UUID().uuidString).sock").path
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && listen(fd, 1) == 0)
        return (path, fd)
    }

    @Test func aConnectionDroppedWhileItsSourceWaitsIsServedUntilItClosesThenFreed() throws {
        let tokend = try listener()
        defer {
            close(tokend.fd)
            unlink(tokend.path)
        }
        var connection: VarlinkConnection? = try VarlinkConnection.connect(path: tokend.path)
        let peer = accept(tokend.fd, nil, nil)
        try #require(peer >= 0)
        var replies: [Result<VarlinkReply, LinkFailure>] = []
        connection!.call("io.tokend.Broker.GetStatus", [:]) { replies.append($0) }
        weak let dropped = connection
        connection = nil
        // Its read source holds it: GLib is never handed a freed connection.
        try #require(dropped != nil)
        // tokend answers and goes away: the reply is delivered, the connection closes and is released.
        let reply = Array("{\"parameters\":{}}\0".utf8)
        #expect(write(peer, reply, reply.count) == reply.count)
        close(peer)
        var timedOut = false
        let timer = after(milliseconds: 5000) { timedOut = true }
        while dropped != nil && !timedOut { g_main_context_iteration(nil, 1) }
        if !timedOut { g_source_remove(timer) }
        #expect(dropped == nil)
        #expect(replies.count == 1)
        if case .success(let answer) = replies.first { #expect(answer.error == nil) } else { Issue.record("no reply") }
    }
}
