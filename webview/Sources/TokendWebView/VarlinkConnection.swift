import Glibc
import Varlink

/// Why a call to tokend got no answer.
enum LinkFailure: Error, CustomStringConvertible {
    case unreachable(String)
    case disconnected

    var description: String {
        switch self {
        case .unreachable(let why): "tokend is unreachable: \(why)"
        case .disconnected: "tokend closed the connection"
        }
    }
}

/// A Varlink connection to tokend served by the GLib main loop: the web view's
/// thread does its socket work too, so WebKit calls need no hand-off. Calls are
/// pipelined and answered in order; a `more` call keeps its handler until the
/// last reply.
@MainActor
final class VarlinkConnection {
    typealias Handler = @MainActor (Result<VarlinkReply, LinkFailure>) -> Void

    /// Replies larger than this close the connection (tokend's snapshots are far smaller).
    static let maximumReply = 16 << 20

    private var fd: Int32
    private var readSource: guint = 0
    private var writeSource: guint = 0
    private var input: [UInt8] = []
    private var scanned = 0
    private var output: [UInt8] = []
    private var waiting: [(handler: Handler, more: Bool)] = []
    /// Called once when the connection ends (tokend went away, or `close()`).
    var onClose: (@MainActor () -> Void)?

    var isOpen: Bool { fd >= 0 }

    private init(fd: Int32) {
        self.fd = fd
    }

    /// Connects to tokend's socket (a Unix socket connects at once or fails).
    static func connect(path: String) throws(LinkFailure) -> VarlinkConnection {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .unreachable(String(cString: strerror(errno))) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            Glibc.close(fd)
            throw .unreachable("socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else {
            let why = String(cString: strerror(errno))
            Glibc.close(fd)
            throw .unreachable("\(path): \(why)")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        let connection = VarlinkConnection(fd: fd)
        connection.watchInput()
        return connection
    }

    /// Sends one call; `handler` gets its reply (each reply, for `more`), or the failure.
    func call(_ method: String, _ parameters: JSONObject, more: Bool = false, _ handler: @escaping Handler) {
        guard isOpen else {
            handler(.failure(.disconnected))
            return
        }
        VarlinkCall(method: method, parameters: parameters, more: more).encode(into: &output)
        waiting.append((handler, more))
        flush()
    }

    /// Ends the connection; calls still waiting fail with `.disconnected`.
    func close() {
        guard fd >= 0 else { return }
        if readSource != 0 { g_source_remove(readSource) }
        if writeSource != 0 { g_source_remove(writeSource) }
        readSource = 0
        writeSource = 0
        Glibc.close(fd)
        fd = -1
        let failed = waiting
        waiting.removeAll()
        for entry in failed { entry.handler(.failure(.disconnected)) }
        onClose?()
        onClose = nil
    }

    // MARK: The socket on the main loop

    /// Watches the socket for `condition`. The source holds the connection, retained
    /// from here until GLib removes the source: a connection its owner drops while a
    /// source waits lives on until it is closed (by `close()` or by tokend), and is
    /// never called after it is freed.
    private func watch(_ condition: UInt32, _ ready: GUnixFDSourceFunc) -> guint {
        g_unix_fd_add_full(G_PRIORITY_DEFAULT, fd, GIOCondition(condition), ready, Unmanaged.passRetained(self).toOpaque()) { data in
            Unmanaged<VarlinkConnection>.fromOpaque(data!).release()
        }
    }

    private func watchInput() {
        readSource = watch(G_IO_IN.rawValue | G_IO_HUP.rawValue | G_IO_ERR.rawValue) { _, _, data in
            MainActor.assumeIsolated {
                Unmanaged<VarlinkConnection>.fromOpaque(data!).takeUnretainedValue().readable()
            }
        }
    }

    /// Reads what there is; returns whether to keep watching.
    private func readable() -> gboolean {
        withExtendedLifetime(self) { readAvailable() }
    }

    private func readAvailable() -> gboolean {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while fd >= 0 {
            let got = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if got > 0 {
                input.append(contentsOf: chunk[0..<got])
                deliverFrames()
                continue
            }
            if got < 0 && (errno == EAGAIN || errno == EINTR) { return 1 }
            readSource = 0  // this source ends with the return below
            close()
            return 0
        }
        return 0
    }

    private func deliverFrames() {
        while fd >= 0 {
            let scan = input.withUnsafeBytes { NULFraming.scan($0, scanned: scanned, limit: Self.maximumReply) }
            switch scan {
            case .incomplete(let upTo):
                scanned = upTo
                return
            case .tooLarge:
                close()
                return
            case .frame(let length):
                let frame = input[0..<length]
                let reply = try? VarlinkReply(frame: frame)
                input.removeFirst(length + 1)
                scanned = 0
                guard let reply, let entry = waiting.first else {
                    close()  // not Varlink, or a reply nobody asked for
                    return
                }
                if !(entry.more && reply.continues) { waiting.removeFirst() }
                entry.handler(.success(reply))
            }
        }
    }

    private func flush() {
        while fd >= 0 && !output.isEmpty {
            let sent = output.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent > 0 {
                output.removeFirst(sent)
            } else if sent < 0 && errno == EINTR {
                continue
            } else if sent < 0 && errno == EAGAIN {
                watchOutput()
                return
            } else {
                close()
                return
            }
        }
    }

    private func watchOutput() {
        guard writeSource == 0 else { return }
        writeSource = watch(G_IO_OUT.rawValue) { _, _, data in
            MainActor.assumeIsolated {
                let connection = Unmanaged<VarlinkConnection>.fromOpaque(data!).takeUnretainedValue()
                connection.writeSource = 0
                connection.flush()
            }
            return 0
        }
    }
}
