import Foundation
import Secrets

#if canImport(Glibc)
import Glibc
#endif

/// Why a session's state could not be loaded.
public struct StateLoadError: Error, CustomStringConvertible {
    public let path: String
    public let problem: String
    /// Where the unreadable file was moved so that it is never overwritten.
    public let movedTo: String?

    public var description: String {
        if let movedTo { return "\(path): \(problem); moved aside to \(movedTo)" }
        return "\(path): \(problem)"
    }
}

/// The state directory: one file per session, `NAME.session`, mode 0600, in
/// a directory of mode 0700.
public struct StateStore: Sendable {
    public let directory: String

    /// Opens (creating if needed) the state directory and tightens its mode.
    public init(directory: String) throws {
        self.directory = directory
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw AtomicFile.WriteError(step: "mkdir", path: directory, errno: errno)
        }
        guard chmod(directory, 0o700) == 0 else {
            throw AtomicFile.WriteError(step: "chmod", path: directory, errno: errno)
        }
    }

    public func path(for session: String) -> String { "\(directory)/\(session).session" }

    public func file(for session: String) -> SessionFile {
        SessionFile(session: session, path: path(for: session))
    }
}

/// One session's state file. Writes are serialised on the file's own queue,
/// off the Swift concurrency pool (fsync blocks).
public final class SessionFile: Sendable {
    public let session: String
    public let path: String
    private let queue: DispatchQueue

    init(session: String, path: String) {
        self.session = session
        self.path = path
        self.queue = DispatchQueue(label: "tokend.state.\(session)")
    }

    /// The stored record, nil when there is none. An unreadable file is moved
    /// aside (never overwritten) and reported.
    public func load() throws(StateLoadError) -> SessionRecord? {
        guard let data = FileManager.default.contents(atPath: path) else {
            if access(path, F_OK) == 0 { throw moveAside("cannot be read") }
            return nil
        }
        let envelope: Envelope
        do {
            envelope = try JSONDecoder().decode(Envelope.self, from: data)
        } catch {
            throw moveAside("is not a tokend state file (\(error.localizedDescription))")
        }
        guard envelope.format == Envelope.format else { throw moveAside("has format \"\(envelope.format)\"") }
        guard envelope.version == Envelope.currentVersion else {
            // A newer tokend wrote it: keep it in place for that version.
            throw StateLoadError(
                path: path, problem: "has version \(envelope.version); this tokend reads version \(Envelope.currentVersion)",
                movedTo: nil)
        }
        guard envelope.session == session else {
            throw moveAside("belongs to session \"\(envelope.session)\"")
        }
        guard envelope.encryption == "none", let stored = envelope.record else {
            throw StateLoadError(
                path: path, problem: "is encrypted with \"\(envelope.encryption)\", which this tokend cannot read",
                movedTo: nil)
        }
        return stored.record
    }

    private func moveAside(_ problem: String) -> StateLoadError {
        let target = "\(path).corrupt-\(Int(Date().timeIntervalSince1970))"
        if rename(path, target) == 0 {
            return StateLoadError(path: path, problem: problem, movedTo: target)
        }
        return StateLoadError(path: path, problem: "\(problem) (and could not be moved aside)", movedTo: nil)
    }

    /// The bytes written for a record.
    public func encode(_ record: SessionRecord) throws -> [UInt8] {
        let envelope = Envelope(
            format: Envelope.format, version: Envelope.currentVersion, session: session, encryption: "none",
            record: StoredRecord(record))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return Array(try encoder.encode(envelope))
    }

    /// Writes the record durably; returns once it is on disk.
    public func save(_ record: SessionRecord) async throws {
        let bytes = try encode(record)
        let path = self.path
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            queue.async {
                continuation.resume(with: Result { try AtomicFile.write(bytes, to: path) })
            }
        }
    }

    /// Synchronous save, for tests that inject faults between write steps.
    public func saveNow(_ record: SessionRecord, afterStep: (AtomicFile.Step) throws -> Void = { _ in }) throws {
        try AtomicFile.write(try encode(record), to: path, afterStep: afterStep)
    }
}
