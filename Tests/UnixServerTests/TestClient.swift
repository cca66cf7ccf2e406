import Foundation
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// A blocking test client on a raw Unix socket: what it sends is exactly
/// what the server reads, split wherever the test splits it.
final class TestClient {
    let fd: CInt
    private var buffer: [UInt8] = []

    init(path: String, receiveTimeout: Double = 5) throws {
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else { throw TestFailure("connect \(path): errno \(errno)") }
        var timeout = timeval(tv_sec: Int(receiveTimeout), tv_usec: Int((receiveTimeout.truncatingRemainder(dividingBy: 1)) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { Glibc.close(fd) }

    func send(_ text: String) {
        send(Array(text.utf8))
    }

    func send(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { return }
            offset += written
        }
    }

    /// A call as one NUL-terminated frame.
    static func frame(_ method: String, _ parameters: String = "{}", more: Bool = false) -> String {
        "{\"method\":\"\(method)\",\"parameters\":\(parameters)\(more ? ",\"more\":true" : "")}\0"
    }

    /// The next reply, or nil if the connection ended or nothing came in time.
    func reply() -> VarlinkReply? {
        while true {
            if let end = buffer.firstIndex(of: 0) {
                let frame = Array(buffer[..<end])
                buffer.removeFirst(end + 1)
                return try? VarlinkReply(frame: frame)
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return nil }
            buffer.append(contentsOf: chunk[..<count])
        }
    }

    /// True once the server has closed the connection (read returns 0 or a reset).
    func closedByServer() -> Bool {
        var byte: UInt8 = 0
        while true {
            let count = recv(fd, &byte, 1, 0)
            if count == 0 { return true }
            if count < 0 { return errno == ECONNRESET }
        }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
