#if canImport(Glibc)
import Glibc
#endif

/// An IPv4 or IPv6 address, as the guard checks it and HTTPExchange connects to it.
struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    enum Value: Sendable, Hashable {
        case v4(UInt32)
        /// 16 bytes, network order.
        case v6([UInt8])
    }

    let value: Value

    init(v4: UInt32) { value = .v4(v4) }

    init(v6 bytes: [UInt8]) {
        precondition(bytes.count == 16)
        value = .v6(bytes)
    }

    /// A literal as inet_pton reads it (dotted quad, or IPv6 text) — what
    /// SwiftNIO connects to without resolving. Anything else (`2130706433`,
    /// `0x7f.1`, a name) is resolved, and its addresses checked.
    init?(_ literal: String) {
        var v4 = in_addr()
        if inet_pton(AF_INET, literal, &v4) == 1 {
            value = .v4(UInt32(bigEndian: v4.s_addr))
            return
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, literal, &v6) == 1 else { return nil }
        value = .v6(withUnsafeBytes(of: &v6) { Array($0) })
    }

    var description: String {
        switch value {
        case .v4(let bits):
            return [24, 16, 8, 0].map { String((bits >> UInt32($0)) & 0xff) }.joined(separator: ".")
        case .v6(let bytes):
            var address = in6_addr()
            withUnsafeMutableBytes(of: &address) { $0.copyBytes(from: bytes) }
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            guard inet_ntop(AF_INET6, &address, &text, socklen_t(text.count)) != nil else { return "?" }
            return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }
}

/// What an address is to the guard.
enum AddressKind: Sendable, Equatable {
    /// Reachable for anyone's URL.
    case global
    /// This host: only with allow-loopback-http.
    case loopback(String)
    /// A private network: only for a URL whose host the admin named in a pattern.
    case privateUse(String)
    /// Never, whatever the configuration says: link-local, cloud metadata,
    /// unspecified, multicast, broadcast, reserved and documentation ranges.
    case never(String)

    var isLoopback: Bool { if case .loopback = self { true } else { false } }

    /// What the address is, said in a refusal.
    var what: String {
        switch self {
        case .global: "a global address"
        case .loopback(let what), .privateUse(let what), .never(let what): what
        }
    }
}

extension IPAddress {
    var kind: AddressKind {
        switch value {
        case .v4(let bits): return Self.kind(v4: bits)
        case .v6(let bytes): return Self.kind(v6: bytes)
        }
    }

    /// Most specific first: the first range that holds the address decides.
    static let v4Ranges: [(base: UInt32, length: Int, kind: AddressKind)] = [
        (v4(169, 254, 169, 254), 32, .never("link-local (cloud metadata)")),
        (v4(169, 254, 170, 2), 32, .never("link-local (container metadata)")),
        (v4(100, 100, 100, 200), 32, .never("a cloud metadata address (Alibaba Cloud)")),
        (v4(192, 0, 0, 192), 32, .never("a cloud metadata address (Oracle Cloud)")),
        (v4(168, 63, 129, 16), 32, .never("a cloud host address (Azure WireServer)")),
        (v4(255, 255, 255, 255), 32, .never("the broadcast address")),
        (v4(0, 0, 0, 0), 8, .never("\"this network\" (0.0.0.0/8)")),
        (v4(127, 0, 0, 0), 8, .loopback("loopback (127.0.0.0/8)")),
        (v4(169, 254, 0, 0), 16, .never("link-local (169.254.0.0/16)")),
        (v4(10, 0, 0, 0), 8, .privateUse("private (10.0.0.0/8)")),
        (v4(172, 16, 0, 0), 12, .privateUse("private (172.16.0.0/12)")),
        (v4(192, 168, 0, 0), 16, .privateUse("private (192.168.0.0/16)")),
        (v4(100, 64, 0, 0), 10, .privateUse("shared address space (100.64.0.0/10)")),
        (v4(198, 18, 0, 0), 15, .privateUse("benchmarking (198.18.0.0/15)")),
        (v4(192, 0, 0, 0), 24, .never("IETF protocol assignments (192.0.0.0/24)")),
        (v4(192, 0, 2, 0), 24, .never("documentation (192.0.2.0/24)")),
        (v4(198, 51, 100, 0), 24, .never("documentation (198.51.100.0/24)")),
        (v4(203, 0, 113, 0), 24, .never("documentation (203.0.113.0/24)")),
        (v4(192, 88, 99, 0), 24, .never("6to4 relay anycast (192.88.99.0/24)")),
        (v4(224, 0, 0, 0), 4, .never("multicast (224.0.0.0/4)")),
        (v4(240, 0, 0, 0), 4, .never("reserved (240.0.0.0/4)")),
    ]

    static func v4(_ a: UInt32, _ b: UInt32, _ c: UInt32, _ d: UInt32) -> UInt32 { a << 24 | b << 16 | c << 8 | d }

    static func kind(v4 bits: UInt32) -> AddressKind {
        for range in v4Ranges {
            let mask: UInt32 = range.length == 0 ? 0 : ~UInt32(0) << UInt32(32 - range.length)
            if bits & mask == range.base & mask { return range.kind }
        }
        return .global
    }

    /// IPv6 ranges that are what they are; the forms that carry an IPv4
    /// address (v4-mapped, NAT64, 6to4, v4-compatible) are decided by it.
    static let v6Ranges: [(prefix: [UInt8], length: Int, kind: AddressKind)] = [
        ([0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54], 128, .never("a cloud metadata address (AWS)")),
        ([0x20, 0x01, 0x0d, 0xb8], 32, .never("documentation (2001:db8::/32)")),
        ([0x20, 0x01, 0, 0], 32, .never("Teredo (2001::/32)")),
        ([0x01, 0, 0, 0, 0, 0, 0, 0], 64, .never("discard-only (100::/64)")),
        ([0xfe, 0x80], 10, .never("link-local (fe80::/10)")),
        ([0xfe, 0xc0], 10, .privateUse("site-local (fec0::/10)")),
        ([0xfc], 7, .privateUse("unique local (fc00::/7)")),
        ([0xff], 8, .never("multicast (ff00::/8)")),
    ]

    static func kind(v6 bytes: [UInt8]) -> AddressKind {
        let zeros = bytes.prefix(10).allSatisfy { $0 == 0 }
        let low = bytes[12..<16].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        if zeros, bytes[10] == 0, bytes[11] == 0 {
            if low == 0 { return .never("unspecified (::)") }
            if low == 1 { return .loopback("loopback (::1)") }
            return carried(low, form: "IPv4-compatible", translated: true)
        }
        if zeros, bytes[10] == 0xff, bytes[11] == 0xff {
            // v4-mapped: a socket connects to the IPv4 address itself, loopback included.
            return carried(low, form: "IPv4-mapped", translated: false)
        }
        if bytes.starts(with: [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0]) {
            return carried(low, form: "NAT64 (64:ff9b::/96)", translated: true)
        }
        if bytes.starts(with: [0, 0x64, 0xff, 0x9b, 0, 0x01]) {
            let inner = carried(low, form: "local-use NAT64 (64:ff9b:1::/48)", translated: true)
            return inner == .global ? .privateUse("local-use NAT64 (64:ff9b:1::/48)") : inner
        }
        if bytes[0] == 0x20, bytes[1] == 0x02 {
            let inner = bytes[2..<6].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            return carried(inner, form: "6to4 (2002::/16)", translated: true)
        }
        if bytes[0] == 0 { return .never("reserved (::/8)") }
        for range in v6Ranges where matches(bytes, range.prefix, range.length) { return range.kind }
        return .global
    }

    static func matches(_ bytes: [UInt8], _ prefix: [UInt8], _ length: Int) -> Bool {
        var remaining = length
        for (index, byte) in prefix.enumerated() where remaining > 0 {
            let bits = min(8, remaining)
            let mask = UInt8(truncatingIfNeeded: 0xff << (8 - bits))
            if bytes[index] & mask != byte & mask { return false }
            remaining -= bits
        }
        return true
    }

    /// An IPv6 address that reaches the IPv4 address `inner`: it is what
    /// `inner` is. Through a translator (`translated`) a loopback `inner` is
    /// the translator's own, never tokend's host: refused.
    static func carried(_ inner: UInt32, form: String, translated: Bool) -> AddressKind {
        let carrier = "the \(form) form of \(IPAddress(v4: inner))"
        switch kind(v4: inner) {
        case .global: return .global
        case .loopback(let what):
            return translated ? .never("\(carrier): \(what) of the translator") : .loopback("\(carrier): \(what)")
        case .privateUse(let what): return .privateUse("\(carrier): \(what)")
        case .never(let what): return .never("\(carrier): \(what)")
        }
    }
}
