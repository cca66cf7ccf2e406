#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Secrets

/// A session's DPoP key as its state file keeps it (RFC 9449): made at login,
/// kept for the grant's life, forgotten with it. For a key in the TPM,
/// `material` is the TPM-wrapped blob that only that TPM can load; for a
/// key in the state, the private key itself, sealed with the rest of the
/// record when the state key is set.
public struct DPoPKeyRecord: Sendable, Equatable {
    /// "tpm" or "state".
    public var storage: String
    /// The public key's RFC 7638 thumbprint.
    public var thumbprint: String
    public var material: Secret

    public init(storage: String, thumbprint: String, material: Secret) {
        self.storage = storage
        self.thumbprint = thumbprint
        self.material = material
    }
}

/// Its on-disk form: the material base64url.
struct StoredDPoPKey: Codable, Equatable {
    var storage: String
    var thumbprint: String
    var material: String

    init(_ key: DPoPKeyRecord) {
        storage = key.storage
        thumbprint = key.thumbprint
        material = key.material.reveal()
    }

    var key: DPoPKeyRecord {
        DPoPKeyRecord(storage: storage, thumbprint: thumbprint, material: Secret(material))
    }
}
