#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendMetrics

/// A small document kept in the state directory beside the sessions' files
/// (the definitions of sessions users added): written atomically and durably,
/// and sealed with the state key when there is one, as state files are.
public struct SealedDocument: Sendable {
    public let path: String
    let name: String
    let key: StateKey?

    /// What marks a sealed document: the rest is nonce ‖ ciphertext ‖ tag.
    static let sealedMark = Array("tokend-sealed-1\n".utf8)

    /// The document's bytes, nil when there is none. A sealed one without the
    /// key, or one that does not open with it, throws (and is left in place).
    public func read() throws -> [UInt8]? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let bytes = Array(data)
        guard bytes.starts(with: Self.sealedMark) else { return bytes }
        guard let key else {
            throw StateLoadError(path: path, problem: "is sealed and no state key is configured", movedTo: nil)
        }
        do {
            return try key.open(Array(bytes.dropFirst(Self.sealedMark.count)), session: "document/\(name)")
        } catch {
            throw StateLoadError(path: path, problem: "does not open with this state key", movedTo: nil)
        }
    }

    /// Replaces the document; returns once it is on disk.
    public func write(_ bytes: [UInt8]) throws {
        var stored = bytes
        if let key { stored = Self.sealedMark + (try key.seal(bytes, session: "document/\(name)")) }
        _ = try AtomicFile.write(stored, to: path)
    }
}

extension StateStore {
    /// `NAME.json` in the state directory (a name no session file has: those end in `.session`).
    public func document(_ name: String) -> SealedDocument {
        SealedDocument(path: "\(directory)/\(name).json", name: name, key: key)
    }

    /// A session's file under `fileName` (not its name), its instruments kept
    /// in `metrics` rather than the exported registry: a user's own session,
    /// which the exported metrics do not name.
    public func file(for session: String, fileName: String, metrics: Metrics) -> SessionFile {
        SessionFile(session: session, path: path(for: fileName), key: key, metrics: metrics.session(session))
    }
}
