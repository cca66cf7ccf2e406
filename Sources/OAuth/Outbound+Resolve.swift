#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// A name that did not resolve: the server is unreachable, not refused.
struct ResolveFailed: Error, CustomStringConvertible, Sendable {
    let host: String
    let problem: String
    var description: String { "\(host) does not resolve: \(problem)" }
}

extension Outbound {
    /// Every address `host` has: an IP literal is itself; a name is resolved
    /// by getaddrinfo on NIO's blocking-work pool, never on the cooperative
    /// pool (a slow resolver would stall every task of the daemon).
    static func addresses(of host: String) async throws -> [IPAddress] {
        if let literal = IPAddress(host) { return [literal] }
        return try await NIOThreadPool.singleton.runIfActive { try resolve(host) }
    }

    /// getaddrinfo's answer, every family, in its order (RFC 6724's
    /// preference). Numeric forms inet_pton does not read (`2130706433`,
    /// `0x7f.1`, `127.1`) come back as the addresses they mean.
    static func resolve(_ host: String) throws -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0 else { throw ResolveFailed(host: host, problem: String(cString: gai_strerror(status))) }
        defer { freeaddrinfo(list) }
        var addresses: [IPAddress] = []
        var cursor = list
        while let entry = cursor?.pointee {
            cursor = entry.ai_next
            guard let socketAddress = entry.ai_addr else { continue }
            switch entry.ai_family {
            case AF_INET:
                let bits = socketAddress.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr.s_addr }
                addresses.append(IPAddress(v4: UInt32(bigEndian: bits)))
            case AF_INET6:
                var raw = socketAddress.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                addresses.append(IPAddress(v6: withUnsafeBytes(of: &raw) { Array($0) }))
            default:
                continue
            }
        }
        var seen = Set<IPAddress>()
        addresses = addresses.filter { seen.insert($0).inserted }
        guard !addresses.isEmpty else { throw ResolveFailed(host: host, problem: "no IPv4 or IPv6 address") }
        return addresses
    }
}

/// A URL's host with the addresses tokend may connect to, in getaddrinfo's
/// order; every address of the host has passed the policy.
struct CheckedTarget: Sendable, Equatable {
    /// The host whose addresses these are.
    let host: String
    let addresses: [IPAddress]
}

extension OutboundPolicy {
    /// What can be said of `url` without DNS: the scheme (https; http only
    /// with allow-loopback-http), no user information, and an IP-literal
    /// host's own address.
    func precheck(_ url: URL) throws(AddressRefused) {
        let shown = url.absoluteString
        guard let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http" else {
            throw AddressRefused(url: shown, address: nil, reason: "only https URLs are used")
        }
        guard let host = Outbound.host(of: url) else {
            throw AddressRefused(url: shown, address: nil, reason: "the URL has no host")
        }
        guard url.user == nil, url.password == nil else {
            throw AddressRefused(url: shown, address: nil, reason: "the URL carries user information")
        }
        if scheme == "http", !allowLoopbackHTTP {
            throw AddressRefused(
                url: shown, address: nil,
                reason: "plain http is not used ([user-sessions] allow-loopback-http is off, and even then only to loopback); use https")
        }
        if let literal = IPAddress(host) { try check(literal, for: url) }
    }

    /// Resolves `url`'s host and checks every address it has: one refused
    /// address refuses the URL (a name that mixes a public address with a
    /// metadata one is not a server to trust with any of them).
    func checkedTarget(_ url: URL) async throws -> CheckedTarget {
        try precheck(url)
        guard let host = Outbound.host(of: url) else {
            throw AddressRefused(url: url.absoluteString, address: nil, reason: "the URL has no host")
        }
        let addresses = try await Outbound.addresses(of: host)
        for address in addresses { try check(address, for: url) }
        return CheckedTarget(host: host, addresses: addresses)
    }

    /// The one decision about one address. What is never reachable is said
    /// first, then plain http to anything but loopback, then what the
    /// configuration would have to allow.
    func check(_ address: IPAddress, for url: URL) throws(AddressRefused) {
        let kind = address.kind
        let refusal: String?
        switch kind {
        case .never(let what):
            refusal = "\(address) is \(what)"
        case _ where url.scheme?.lowercased() == "http" && !kind.isLoopback:
            refusal = "plain http goes only to loopback, and \(address) is \(kind.what); use https"
        case .global:
            refusal = nil
        case .loopback(let what):
            refusal = allowLoopbackHTTP ? nil : "\(address) is \(what), and [user-sessions] allow-loopback-http is off"
        case .privateUse(let what):
            refusal = mayReachPrivate(url)
                ? nil : "\(address) is \(what), and no [user-sessions] issuers pattern names this host without a wildcard"
        }
        if let refusal { throw AddressRefused(url: url.absoluteString, address: address.description, reason: refusal) }
    }
}
