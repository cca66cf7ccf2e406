#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOCore
import NIOSSL
import PostgresWire

/// Where a fleet's shared store is, and how a host follows it:
/// `postgresql://USER@HOST[:PORT]/DATABASE[?sslmode=MODE&sslrootcert=FILE&poll=SECONDS&listen=on]`.
/// sslmode means what it means to libpq: disable, prefer, require (encrypted, any certificate),
/// verify-ca (a certificate from sslrootcert or the system's CAs), verify-full (and the host name;
/// the default: anything less lets a man in the middle feed every host an old record).
/// `poll`: how often a host re-reads the fleet's copy (default 10 s). `listen=on`: also LISTEN on a
/// connection of its own, for small fleets on a direct connection (a transaction pooler never
/// delivers notifications: the host finds that out and polls).
public struct StoreAddress: Sendable, CustomStringConvertible {
    public let host: String
    public let port: Int
    public let user: String
    public let database: String
    public let sslMode: String
    public let rootCertificate: String?
    public let pollInterval: Duration
    public let listen: Bool

    public static let sslModes = ["disable", "prefer", "require", "verify-ca", "verify-full"]

    public init(_ text: String) throws(SharedStoreSetupError) {
        guard let url = URLComponents(string: text), ["postgresql", "postgres"].contains(url.scheme ?? ""),
            let host = url.host, !host.isEmpty
        else { throw SharedStoreSetupError("\(text) is not a postgresql:// URL") }
        self.host = host
        port = url.port ?? 5432
        user = url.user ?? "tokend"
        let path = url.path.hasPrefix("/") ? String(url.path.dropFirst()) : url.path
        database = path.isEmpty ? user : path
        let query = Dictionary((url.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        let known = ["sslmode", "sslrootcert", "poll", "listen"]
        for name in query.keys where !known.contains(name) {
            throw SharedStoreSetupError("\(name): unknown parameter (known: \(known.joined(separator: ", ")))")
        }
        sslMode = query["sslmode"] ?? "verify-full"
        guard Self.sslModes.contains(sslMode) else {
            throw SharedStoreSetupError("sslmode=\(sslMode): use one of \(Self.sslModes.joined(separator: ", "))")
        }
        rootCertificate = query["sslrootcert"]
        let poll = query["poll"] ?? "10"
        guard let seconds = Int(poll), (1...3600).contains(seconds) else {
            throw SharedStoreSetupError("poll=\(poll): use whole seconds from 1 to 3600")
        }
        pollInterval = .seconds(seconds)
        switch query["listen"] ?? "off" {
        case "on": listen = true
        case "off": listen = false
        case let other: throw SharedStoreSetupError("listen=\(other): use on or off")
        }
    }

    /// Without the password: for logs and status.
    public var description: String { "postgresql://\(user)@\(host):\(port)/\(database)?sslmode=\(sslMode)" }

    /// The name TLS checks the certificate against (and sends as SNI): the host, unless it is an address.
    var serverName: String? { (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil }

    func tls() throws -> PostgresConnection.Configuration.TLS {
        var tls = TLSConfiguration.makeClientConfiguration()
        switch sslMode {
        case "disable": return .disable
        case "prefer", "require": tls.certificateVerification = .none
        case "verify-ca": tls.certificateVerification = .noHostnameVerification
        default: tls.certificateVerification = .fullVerification
        }
        if let rootCertificate { tls.trustRoots = .file(rootCertificate) }
        let context = try NIOSSLContext(configuration: tls)
        return sslMode == "prefer" ? .prefer(context) : .require(context)
    }
}

/// The shared store's configuration cannot work (tokend does not start).
public struct SharedStoreSetupError: Error, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}
