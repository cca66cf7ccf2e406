import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Where a session's DPoP private key lives.
public enum KeyStorage: String, Sendable, Equatable, CaseIterable {
    /// In the machine's TPM 2.0: made there, never leaves it; only the TPM-wrapped blob is stored.
    case tpm
    /// In the session's state file, sealed like the refresh token.
    case state
}

/// A P-256 key that signs DPoP proofs (ES256).
public protocol ProofKey: Sendable {
    var publicKey: P256PublicJWK { get }
    var storage: KeyStorage { get }
    /// What the state file keeps: the private key itself (state) or the
    /// TPM-wrapped blob (tpm). Secret either way: never logged.
    var stored: [UInt8] { get }
    /// The ES256 signature of `message` (SHA-256, then ECDSA): r || s, 64 bytes.
    func sign(_ message: [UInt8]) async throws(ProofKeyError) -> [UInt8]
    /// The same key, signing for callers' requests (GetProof): where signing
    /// is scarce (a TPM), behind the session's own proofs and in a queue of
    /// bounded length, refused (`busy`) when it is full.
    var forRequests: any ProofKey { get }
}

extension ProofKey {
    public var thumbprint: String { publicKey.thumbprint }
    public var forRequests: any ProofKey { self }
}

/// Why a key cannot sign. Never contains key material.
public struct ProofKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The key was not made by this TPM (the state was copied, or the TPM was cleared): only a new login helps.
        case notInThisTPM
        /// The TPM cannot be reached now (no device, no permission, busy): may pass.
        case unreachable
        /// The stored key is damaged, or signing failed otherwise.
        case failed
        /// More requests wait for the signer than it signs in time: this one was not queued
        /// (`retryAfter`). Says nothing about the key.
        case busy
        /// The caller gave up before the signer came to it: nothing was signed. Says nothing about the key.
        case cancelled
    }
    public let kind: Kind
    public let description: String
    /// For `busy`: seconds until the queue has room again.
    public var retryAfter: Int?

    public init(_ kind: Kind, _ description: String, retryAfter: Int? = nil) {
        self.kind = kind
        self.description = description
        self.retryAfter = retryAfter
    }

    /// Whether the error is about the signer's queue, not about the key (busy, cancelled).
    public var saysNothingOfTheKey: Bool { kind == .busy || kind == .cancelled }

    /// What a session says when its key is gone: the grant cannot be used here.
    public static let notInThisTPMReason = "this session's key is not in this machine's TPM — log in again"
}

/// A key kept in the state file (dpop-key = "state").
public struct StateProofKey: ProofKey {
    let key: P256.Signing.PrivateKey
    public let publicKey: P256PublicJWK
    public var storage: KeyStorage { .state }

    public init() {
        self.init(key: P256.Signing.PrivateKey())
    }

    init(key: P256.Signing.PrivateKey) {
        self.key = key
        self.publicKey = P256PublicJWK(key.publicKey)
    }

    /// A key read back from `stored` (its 32-byte private scalar).
    public init(stored: [UInt8]) throws(ProofKeyError) {
        guard let key = try? P256.Signing.PrivateKey(rawRepresentation: stored) else {
            throw ProofKeyError(.failed, "the stored DPoP key is not a P-256 private key")
        }
        self.init(key: key)
    }

    public var stored: [UInt8] { Array(key.rawRepresentation) }

    public func sign(_ message: [UInt8]) async throws(ProofKeyError) -> [UInt8] {
        do {
            return Array(try key.signature(for: message).rawRepresentation)
        } catch {
            throw ProofKeyError(.failed, "signing failed: \(error)")
        }
    }
}

/// Makes new keys and reads stored ones back, for one kind of storage.
public protocol ProofKeyStore: Sendable {
    var storage: KeyStorage { get }
    func makeKey() async throws(ProofKeyError) -> any ProofKey
    func load(stored: [UInt8]) throws(ProofKeyError) -> any ProofKey
}

/// Keys in the state file.
public struct StateKeyStore: ProofKeyStore {
    public init() {}
    public var storage: KeyStorage { .state }
    public func makeKey() async throws(ProofKeyError) -> any ProofKey { StateProofKey() }
    public func load(stored: [UInt8]) throws(ProofKeyError) -> any ProofKey { try StateProofKey(stored: stored) }
}
