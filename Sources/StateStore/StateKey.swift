import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Loopback

#if canImport(Glibc)
import Glibc
#endif

/// The key that seals session files at rest (AES-256-GCM). Never printed.
public struct StateKey: Sendable, CustomStringConvertible {
    let key: SymmetricKey
    /// Where it came from, for messages: "credential tokend.state-key" or a path.
    public let source: String

    public var description: String { "<state key from \(source)>" }

    /// The systemd credential name (`LoadCredential=`/`LoadCredentialEncrypted=tokend.state-key:…`).
    public static let credentialName = "tokend.state-key"

    public init(bytes: [UInt8], source: String) throws(StateKeyError) {
        guard bytes.count == 32 else {
            throw StateKeyError("\(source): a state key is 32 bytes (or their base64, 44 characters); found \(bytes.count) bytes")
        }
        key = SymmetricKey(data: bytes)
        self.source = source
    }

    /// Reads a key file: base64 text (as --generate-state-key writes) or 32 raw bytes.
    /// A key file must not be readable by group or others.
    public init(contentsOfFile path: String, source: String? = nil, checkMode: Bool = true) throws(StateKeyError) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw StateKeyError("\(path): cannot read the state key (\(String(cString: strerror(errno))))")
        }
        if checkMode, info.st_mode & 0o077 != 0 {
            throw StateKeyError(
                "\(path): the state key is readable by others (mode \(String(info.st_mode & 0o777, radix: 8))): chmod 600 \(path)")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw StateKeyError("\(path): cannot read the state key")
        }
        let text = String(decoding: data, as: UTF8.self).trimming(.whitespacesAndNewlines)
        if let decoded = Data(base64Encoded: text), decoded.count == 32 {
            try self.init(bytes: Array(decoded), source: source ?? path)
        } else {
            try self.init(bytes: Array(data), source: source ?? path)
        }
    }

    /// The key in force: the systemd credential when present, else the configured file, else none.
    public static func load(environment: [String: String], keyFile: String?) throws(StateKeyError) -> StateKey? {
        if let directory = environment["CREDENTIALS_DIRECTORY"] {
            let path = "\(directory)/\(credentialName)"
            if access(path, F_OK) == 0 {
                // systemd made the credentials directory private to the service.
                return try StateKey(contentsOfFile: path, source: "credential \(credentialName)", checkMode: false)
            }
        }
        guard let keyFile else { return nil }
        return try StateKey(contentsOfFile: keyFile)
    }

    /// A new random key as base64 text (what `tokend --generate-state-key` prints).
    public static func generate() -> String {
        SymmetricKey(size: .bits256).withUnsafeBytes { Data($0).base64EncodedString() }
    }

    /// nonce ‖ ciphertext ‖ tag, with the session's identity as authenticated data.
    func seal(_ plaintext: [UInt8], session: String) throws -> [UInt8] {
        let box = try AES.GCM.seal(plaintext, using: key, authenticating: Self.associatedData(session))
        return Array(box.combined!)
    }

    func open(_ sealed: [UInt8], session: String) throws -> [UInt8] {
        let box = try AES.GCM.SealedBox(combined: sealed)
        return Array(try AES.GCM.open(box, using: key, authenticating: Self.associatedData(session)))
    }

    /// Binds a sealed record to its session: a file copied over another session's fails to open.
    static func associatedData(_ session: String) -> [UInt8] {
        Array("\(Envelope.format)/\(Envelope.currentVersion)/\(session)".utf8)
    }
}

public struct StateKeyError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
