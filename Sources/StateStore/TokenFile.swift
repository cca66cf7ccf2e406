import Foundation

/// A file holding the session's current access token (never the refresh
/// token) for long-running programs: the WLCG BEARER_TOKEN_FILE convention,
/// like Vault Agent's file sink. Replaced atomically (AtomicFile) so a reader
/// sees the old token or the new one, never half of one.
public struct TokenFile: Sendable, Equatable {
    public let path: String
    /// Group that may read it (nil: tokend's own).
    public let group: UInt32?
    public let mode: UInt32

    public init(path: String, group: UInt32?, mode: UInt32) {
        self.path = path
        self.group = group
        self.mode = mode
    }

    public func write(_ token: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try AtomicFile.write(Array((token + "\n").utf8), to: path, mode: mode, group: group)
    }

    /// The token is no longer valid (logout, login required): the file goes.
    public func remove() {
        unlink(path)
    }
}
