#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendInterface
import Varlink

#if canImport(Glibc)
import Glibc
#endif

public typealias Share = BrokerInterface.Share

extension TokendClient {
    /// Hands tokend `listener` (a listening Unix socket the caller bound at
    /// `path`) to serve as a share. The call travels with the descriptor
    /// (SCM_RIGHTS) on a connection of its own, which a NIO channel cannot
    /// carry; it waits at most `timeout` for the answer. The caller keeps
    /// its own copy of `listener` and closes it.
    public static func createShare(
        socket: String? = nil, listener: CInt, path: String, session: String? = nil, resources: [String]? = nil,
        scope: String? = nil, ttl: Int? = nil, mode: Int? = nil, timeout: Duration = .seconds(30)
    ) throws(TokendClientError) -> Share {
        let socketPath = socketPath(socket)
        let parameters: JSONObject
        do {
            parameters = try BrokerInterface.CreateShare.In(
                path: path, session: session, resources: resources, scope: scope, ttl: ttl, mode: mode
            ).parameters().filter { !$0.value.isNull }
        } catch {
            throw .malformedReply("CreateShare parameters")
        }
        var frame: [UInt8] = []
        VarlinkCall(method: BrokerInterface.method("CreateShare"), parameters: parameters).encode(into: &frame)
        let reply = try DescriptorCall(socket: socketPath).call(frame, passing: listener, timeout: timeout)
        if let error = reply.error { throw TokendClientError(VarlinkError(error, reply.parameters)) }
        do {
            return try JSONValue.object(reply.parameters).decode(BrokerInterface.CreateShare.Out.self).share
        } catch {
            throw .malformedReply("CreateShare reply")
        }
    }

    /// The caller's shares (root: everyone's).
    public func shares() async throws(TokendClientError) -> [Share] {
        try await call("ListShares", BrokerInterface.ListShares.In(), BrokerInterface.ListShares.Out.self).shares
    }

    /// Ends the caller's share at `path`: tokend closes its socket and its connections.
    public func revokeShare(path: String) async throws(TokendClientError) {
        _ = try await call("RevokeShare", BrokerInterface.RevokeShare.In(path: path), BrokerInterface.RevokeShare.Out.self)
    }
}

/// One call on a blocking connection of its own, sent in one sendmsg with a descriptor.
struct DescriptorCall {
    let socket: String

    func call(_ frame: [UInt8], passing descriptor: CInt, timeout: Duration) throws(TokendClientError) -> VarlinkReply {
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .unreachable(socket: socket, reason: String(cString: strerror(errno))) }
        defer { close(fd) }
        var seconds = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &seconds, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard socket.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw .unreachable(socket: socket, reason: "the path is too long for a socket address")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: socket.utf8)
            raw[socket.utf8.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            throw .unreachable(socket: socket, reason: describeConnectError(POSIXErrorText(errno)))
        }
        // tokend's connections refuse descriptors unless asked for one first.
        var expect: [UInt8] = []
        VarlinkCall(method: BrokerInterface.method("ExpectDescriptor"), parameters: [:]).encode(into: &expect)
        try send(expect, with: nil, on: fd)
        let armed = try receiveReply(on: fd)
        if armed.error != nil { return armed }
        try send(frame, with: descriptor, on: fd)
        return try receiveReply(on: fd)
    }

    private func send(_ frame: [UInt8], with descriptor: CInt?, on fd: CInt) throws(TokendClientError) {
        let header = MemoryLayout<cmsghdr>.size
        let length = header + MemoryLayout<CInt>.size
        let space = (length + 7) & ~7
        var control = [UInt8](repeating: 0, count: space)
        control.withUnsafeMutableBytes { raw in
            var message = cmsghdr()
            message.cmsg_len = length
            message.cmsg_level = SOL_SOCKET
            message.cmsg_type = Int32(SCM_RIGHTS)
            raw.storeBytes(of: message, as: cmsghdr.self)
            raw.storeBytes(of: descriptor ?? -1, toByteOffset: header, as: CInt.self)
        }
        var frame = frame
        let sent = frame.withUnsafeMutableBytes { bytes in
            control.withUnsafeMutableBytes { control in
                var vector = iovec(iov_base: bytes.baseAddress, iov_len: bytes.count)
                return withUnsafeMutablePointer(to: &vector) { vector in
                    var message = msghdr()
                    message.msg_iov = vector
                    message.msg_iovlen = 1
                    if descriptor != nil {
                        message.msg_control = control.baseAddress
                        message.msg_controllen = space
                    }
                    return sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
                }
            }
        }
        // The call is small: one sendmsg carries it whole, with its descriptor.
        guard sent == frame.count else {
            throw .unreachable(socket: socket, reason: "the call could not be sent (\(String(cString: strerror(errno))))")
        }
    }

    private func receiveReply(on fd: CInt) throws(TokendClientError) -> VarlinkReply {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while !received.contains(0) {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else {
                let reason = count == 0 ? "tokend closed the connection before answering" : String(cString: strerror(errno))
                throw .unreachable(socket: socket, reason: reason)
            }
            received += buffer[0..<count]
            guard received.count <= 16 << 20 else { throw .malformedReply("CreateShare reply") }
        }
        do {
            return try VarlinkReply(frame: received[..<received.firstIndex(of: 0)!])
        } catch {
            throw .malformedReply("CreateShare reply")
        }
    }
}

/// strerror's text for errno, as describeConnectError reads it.
struct POSIXErrorText: Error, CustomStringConvertible {
    let code: Int32
    init(_ code: Int32) { self.code = code }
    var description: String { "\(String(cString: strerror(code))) (\(code == ENOENT ? "ENOENT" : code == ECONNREFUSED ? "ECONNREFUSED" : code == EACCES ? "EACCES" : "errno \(code)"))" }
}
