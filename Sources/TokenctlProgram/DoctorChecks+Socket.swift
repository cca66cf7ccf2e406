#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Persons

/// Who tokend runs as: the process at the other end of the socket (SO_PEERCRED),
/// or, when systemd holds the socket (the peer is PID 1), the user `tokend`.
struct DaemonIdentity: Equatable, Sendable {
    var uid: UInt32
    var gid: UInt32
    /// For messages: "pid 1234" or "user tokend".
    var source: String
}

/// What is at the socket's path, as found.
struct SocketFacts: Equatable, Sendable {
    var path: String
    /// nil: stat failed with `statError`.
    var mode: UInt32?
    var isSocket = true
    var uid: UInt32 = 0
    var gid: UInt32 = 0
    var statError: Int32 = 0
    /// errno of connect(2); nil when it connected.
    var connectError: Int32?
    /// The process at the other end, when connected.
    var peer: Peer?
    /// Whether a Varlink call got a reply within the limit; nil: not asked.
    /// A stopped tokend still accepts connections: only a reply shows it works.
    var answered: Bool?

    struct Peer: Equatable, Sendable {
        var pid: Int32
        var uid: UInt32
        var gid: UInt32
    }

    static func probe(_ path: String) -> SocketFacts {
        var facts = SocketFacts(path: path)
        var info = stat()
        if stat(path, &info) == 0 {
            facts.mode = UInt32(info.st_mode) & 0o7777
            facts.isSocket = info.st_mode & S_IFMT == S_IFSOCK
            facts.uid = info.st_uid
            facts.gid = info.st_gid
        } else {
            facts.statError = errno
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            facts.connectError = errno
            return facts
        }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            facts.connectError = ENAMETOOLONG
            return facts
        }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: bytes)
            buffer[bytes.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else {
            facts.connectError = errno
            return facts
        }
        if let peer = SocketPeer.of(unixSocket: fd, groups: false) {
            facts.peer = Peer(pid: peer.pid, uid: peer.uid, gid: peer.gid)
        }
        return facts
    }
}

enum DoctorSocketCheck {
    /// Who tokend runs as, for the ownership checks: the serving process,
    /// else the user `tokend` (systemd's socket, or tokend not running).
    static func identity(of facts: SocketFacts) -> DaemonIdentity? {
        if let peer = facts.peer, peer.pid != 1 {
            return DaemonIdentity(uid: peer.uid, gid: peer.gid, source: "pid \(peer.pid)")
        }
        guard let entry = getpwnam("tokend") else { return nil }
        return DaemonIdentity(uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid, source: "user tokend")
    }

    /// Reachable, then mode and group against the configuration and tokend's group.
    /// `expectedMode` nil: the configuration was not read.
    static func judge(
        _ facts: SocketFacts, expectedMode: UInt32?, daemon: DaemonIdentity?, clientSocket: String,
        configuredSocket: String?, me: (uid: UInt32, name: String)
    ) -> [DoctorResult] {
        var results: [DoctorResult] = []
        let path = facts.path
        if let configuredSocket, configuredSocket != clientSocket {
            results.append(
                .warn(
                    "socket path", "tokenctl asks \(clientSocket), the configuration's daemon.socket is \(configuredSocket)",
                    fix: "export TOKEND_SOCKET=\(configuredSocket) (or pass --socket)"))
        }
        guard let mode = facts.mode else {
            results.append(
                .fail(
                    "socket", "nothing at \(path) (\(String(cString: strerror(facts.statError))))",
                    fix: "systemctl start tokend.socket (or start tokend); --socket or TOKEND_SOCKET names another path"))
            return results
        }
        guard facts.isSocket else {
            results.append(
                .fail("socket", "\(path) is not a socket", fix: "remove it (rm \(path)) and restart tokend"))
            return results
        }
        switch facts.connectError {
        case nil:
            let server = facts.peer.map { " (tokend pid \($0.pid), uid \($0.uid))" } ?? ""
            switch facts.answered {
            case true?: results.append(.ok("socket", "\(path) answers\(server)"))
            case false?:
                results.append(
                    .fail(
                        "socket", "tokend accepts but does not answer within \(replySeconds) s\(server)",
                        fix: Common.wedgedFix))
            case nil: results.append(.ok("socket", "\(path) accepts connections\(server)"))
            }
        case EACCES?, EPERM?:
            results.append(
                .fail(
                    "socket", "\(me.name) may not connect to \(path) (mode \(String.octalMode(mode)), group \(groupName(facts.gid)))",
                    fix: facts.gid == 0
                        // Joining root's group would give far more than tokend's socket.
                        ? "give the socket a group of its own (SocketGroup= in tokend.socket, e.g. tokend) and "
                            + "name it in [access] read-groups, then usermod -aG that group \(me.name) and log in again"
                        : "usermod -aG \(groupName(facts.gid)) \(me.name), then log in again"))
        case ECONNREFUSED?:
            results.append(
                .fail(
                    "socket", "nothing listens at \(path): tokend is not running",
                    fix: "systemctl restart tokend.socket tokend (`journalctl -u tokend` says why it stopped)"))
        case let error?:
            results.append(
                .fail("socket", "cannot connect to \(path): \(String(cString: strerror(error)))",
                      fix: "systemctl restart tokend.socket tokend"))
        }
        if let expectedMode {
            if mode != expectedMode {
                results.append(
                    .fail(
                        "socket mode",
                        "\(path) has mode \(String.octalMode(mode)), daemon.socket-mode says \(String.octalMode(expectedMode))",
                        fix: "chmod \(String.octalMode(expectedMode)) \(path); it stays so after a restart when "
                            + "daemon.socket-mode (or SocketMode= in tokend.socket) says \(String.octalMode(expectedMode))"))
            } else if mode & 0o006 != 0 {
                results.append(
                    .warn(
                        "socket mode", "\(path) has mode \(String.octalMode(mode)): every local user may connect, and [access] alone decides",
                        fix: "daemon.socket-mode = \"0660\" and SocketMode=0660 in tokend.socket, unless every user should ask"))
            } else {
                results.append(.ok("socket mode", "\(String.octalMode(mode)), as daemon.socket-mode says"))
            }
        }
        if let daemon {
            if facts.gid != daemon.gid {
                results.append(
                    .fail(
                        "socket group",
                        "\(path) belongs to group \(groupName(facts.gid)), tokend (\(daemon.source)) runs as group \(groupName(daemon.gid)), whose members [access] lets read",
                        fix: "chgrp \(groupName(daemon.gid)) \(path), and SocketGroup=\(groupName(daemon.gid)) in tokend.socket"))
            } else {
                results.append(.ok("socket group", "\(groupName(facts.gid)), tokend's group"))
            }
        }
        return results
    }

    static func groupName(_ gid: UInt32) -> String {
        guard let entry = getgrgid(gid), let name = entry.pointee.gr_name else { return String(gid) }
        return String(cString: name)
    }

    static func userName(_ uid: UInt32) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return String(uid) }
        return String(cString: name)
    }
}
