import Foundation
import NIOSSL
import PostgresNIO

/// Where a fleet's shared store is: `postgresql://USER@HOST[:PORT]/DATABASE[?sslmode=MODE&sslrootcert=FILE]`.
/// sslmode means what it means to libpq: disable, prefer, require (encrypted, any certificate),
/// verify-ca (a certificate from sslrootcert or the system's CAs), verify-full (and the host name;
/// the default: anything less lets a man in the middle feed every host an old record).
public struct StoreAddress: Sendable, CustomStringConvertible {
    public let host: String
    public let port: Int
    public let user: String
    public let database: String
    public let sslMode: String
    public let rootCertificate: String?

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
        for name in query.keys where !["sslmode", "sslrootcert"].contains(name) {
            throw SharedStoreSetupError("\(name): unknown parameter (known: sslmode, sslrootcert)")
        }
        sslMode = query["sslmode"] ?? "verify-full"
        guard Self.sslModes.contains(sslMode) else {
            throw SharedStoreSetupError("sslmode=\(sslMode): use one of \(Self.sslModes.joined(separator: ", "))")
        }
        rootCertificate = query["sslrootcert"]
    }

    /// Without the password: for logs and status.
    public var description: String { "postgresql://\(user)@\(host):\(port)/\(database)?sslmode=\(sslMode)" }

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
