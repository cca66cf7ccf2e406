#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#endif

/// A file that holds a session's credential: its client secret, its client
/// key or its shared store's password, with the key that named it.
public struct CredentialFile: Equatable, Sendable {
    /// "client-secret-file", "client-key-file" or "shared-store-password-file".
    public let key: String
    public let path: String

    public init(key: String, path: String) {
        self.key = key
        self.path = path
    }

    /// What the file holds, for messages.
    public var holds: String {
        switch key {
        case "client-key-file": "the client's private key"
        case "shared-store-password-file": "the shared store's password"
        default: "the client secret"
        }
    }

    /// Whose reading of a file of `mode` (permission bits) and group `group`
    /// gives a credential away; nil when only its owner, or the owner and
    /// tokend's own group `ownGroup`, may read it (OpenSSH refuses a private
    /// key others may read the same way). `tokend` and `tokenctl doctor` ask this.
    public static func exposure(mode: UInt32, group: UInt32, ownGroup: UInt32) -> String? {
        if mode & 0o004 != 0 { return "every user of this host" }
        if mode & 0o040 != 0 && group != ownGroup { return "the members of group \(groupName(group)), not tokend's own group" }
        return nil
    }

    /// The chmod (and chgrp, when tokend's group `ownGroup` is known) that makes the file private again.
    public func fix(ownGroup: UInt32?) -> String {
        guard let ownGroup else { return "chmod 0600 \(path)" }
        return "chmod 0600 \(path) (or chgrp \(Self.groupName(ownGroup)) \(path) && chmod 0640 \(path))"
    }

    /// The group's name, or its number when it has none.
    public static func groupName(_ gid: UInt32) -> String {
        guard let entry = getgrgid(gid), let name = entry.pointee.gr_name else { return String(gid) }
        return String(cString: name)
    }
}

extension SessionSettings {
    /// The credential files this session reads, as resolved (a systemd
    /// credential's path is its copy under $CREDENTIALS_DIRECTORY).
    public var credentialFiles: [CredentialFile] {
        [
            clientSecretFile.map { CredentialFile(key: "client-secret-file", path: $0) },
            clientKeyFile.map { CredentialFile(key: "client-key-file", path: $0) },
            sharedStorePasswordFile.map { CredentialFile(key: "shared-store-password-file", path: $0) },
        ].compactMap { $0 }
    }
}
