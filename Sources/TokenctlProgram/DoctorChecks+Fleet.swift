#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Loopback

/// A fleet session's shared store (shared-store): its sslmode, as libpq means
/// it, and whether this host reaches host:port at all.
enum DoctorFleetCheck {
    struct Address: Equatable, Sendable {
        var host: String
        var port: Int
        /// tokend's default when the URL names none: verify-full.
        var sslMode: String
    }

    static func address(_ url: String) -> Address? {
        guard let parts = URLComponents(string: url), ["postgresql", "postgres"].contains(parts.scheme ?? ""),
            let host = parts.host, !host.isEmpty
        else { return nil }
        let sslMode = parts.queryItems?.first { $0.name == "sslmode" }?.value ?? "verify-full"
        return Address(host: host, port: parts.port ?? 5432, sslMode: sslMode)
    }

    static func judgeSSLMode(_ address: Address, session: String) -> DoctorResult {
        let check = "fleet store sslmode (\(session))"
        let fix = "sslmode=verify-full in sessions.\(session).shared-store (with sslrootcert=FILE for a private CA)"
        if Loopback.isLiteral(address.host) {
            return .ok(check, "sslmode=\(address.sslMode) to \(address.host), a loopback address")
        }
        switch address.sslMode {
        case "disable", "prefer":
            return .fail(
                check, "sslmode=\(address.sslMode) to \(address.host): the connection may be plain, so anyone on the way can read and alter the fleet's record",
                fix: fix)
        case "require", "verify-ca":
            return .warn(
                check, "sslmode=\(address.sslMode) to \(address.host): the server's \(address.sslMode == "require" ? "certificate" : "host name") is not checked",
                fix: fix)
        default:
            return .ok(check, "sslmode=\(address.sslMode) to \(address.host)")
        }
    }

    /// nil when a TCP connection to host:port opens within `timeout` seconds, else why not.
    static func connectProblem(_ address: Address, timeout: Int32 = 5) -> String? {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let resolved = getaddrinfo(address.host, String(address.port), &hints, &list)
        guard resolved == 0, let first = list else { return "\(address.host) does not resolve" }
        defer { freeaddrinfo(list) }
        var problem = "no address"
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let entry = next {
            next = entry.pointee.ai_next
            let fd = socket(entry.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            if connect(fd, entry.pointee.ai_addr, entry.pointee.ai_addrlen) == 0 { return nil }
            guard errno == EINPROGRESS else {
                problem = String(cString: strerror(errno))
                continue
            }
            var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            guard poll(&poller, 1, timeout * 1000) == 1 else {
                problem = "no answer within \(timeout) s"
                continue
            }
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
            if error == 0 { return nil }
            problem = String(cString: strerror(error))
        }
        return problem
    }

    static func judgeReach(_ address: Address, problem: String?, session: String) -> DoctorResult {
        let check = "fleet store (\(session))"
        guard let problem else { return .ok(check, "\(address.host):\(address.port) accepts connections") }
        return .fail(
            check, "\(address.host):\(address.port): \(problem)",
            fix: "start the database, or open port \(address.port) from this host (firewall, pg_hba.conf); tokend reconnects by itself")
    }

    static func run(url: String, session: String) -> [DoctorResult] {
        guard let address = address(url) else {
            return [.fail("fleet store (\(session))", "shared-store is not a postgresql:// URL",
                          fix: "see shared-store in man tokend.toml")]
        }
        return [judgeSSLMode(address, session: session), judgeReach(address, problem: connectProblem(address), session: session)]
    }
}
