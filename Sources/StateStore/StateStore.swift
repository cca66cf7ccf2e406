#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
import Secrets
import TokendMetrics

#if canImport(Glibc)
import Glibc
#endif

/// Why a session's state could not be loaded.
public struct StateLoadError: Error, CustomStringConvertible {
    public let path: String
    public let problem: String
    /// Where the unreadable file was moved so that it is never overwritten.
    public let movedTo: String?
    /// The file is fine but tokend cannot open it (no key or another key):
    /// tokend must not start, so that nothing overwrites it.
    public var refusesStart = false

    public var description: String {
        if let movedTo { return "\(path): \(problem); moved aside to \(movedTo)" }
        return "\(path): \(problem)"
    }
}

/// The state directory: one file per session, `NAME.session`, mode 0600, in
/// a directory of mode 0700.
public struct StateStore: Sendable {
    public let directory: String
    /// When set, every file is written sealed (AES-256-GCM).
    public let key: StateKey?
    /// Where each session's file finds its instruments (writes, fsync time).
    public let metrics: Metrics

    /// Opens (creating if needed) the state directory and tightens its mode.
    /// Refuses one that another user owns or that a group or other users may
    /// write, one under a directory someone else could swap it out of, and a
    /// link another user owns (UnsafeOwnershipError; see `StateDirectory`):
    /// its mode is changed only when it is tokend's.
    public init(directory: String, key: StateKey? = nil, metrics: Metrics = Metrics()) throws {
        self.directory = directory
        self.key = key
        self.metrics = metrics
        _ = try StateDirectory.open(directory)
    }

    public func path(for session: String) -> String { "\(directory)/\(session).session" }

    public func file(for session: String) -> SessionFile {
        SessionFile(session: session, path: path(for: session), key: key, metrics: metrics.session(session))
    }
}

/// One session's state file. Writes are serialised on the file's own queue,
/// off the Swift concurrency pool (fsync blocks).
public final class SessionFile: Sendable {
    public let session: String
    public let path: String
    let key: StateKey?
    private let queue: DispatchQueue
    /// The session's instruments: its writes are counted here, and the
    /// session, its cookies and its fleet store count theirs through it.
    public let metrics: SessionMetrics

    init(session: String, path: String, key: StateKey?, metrics: SessionMetrics) {
        self.session = session
        self.path = path
        self.key = key
        self.metrics = metrics
        self.queue = DispatchQueue(label: "tokend.state.\(session)")
    }

    /// What `prepare` found.
    public enum Preparation: Sendable, Equatable {
        case none, plain, sealed
        /// Was plain, is now sealed with the key.
        case migrated
    }

    /// Checks at start that the file can be opened, and seals a plain file
    /// when a key is configured. Throws `refusesStart` errors for a file that
    /// needs a key tokend does not have; leaves corrupt files to `load`.
    public func prepare() throws(StateLoadError) -> Preparation {
        guard let envelope = try readEnvelope() else { return .none }
        switch envelope.encryption {
        case SealedRecord.algorithm:
            _ = try record(in: envelope)
            return .sealed
        case "none" where key != nil:
            guard let stored = envelope.record else { return .plain }
            do {
                try saveNow(stored.record)
            } catch {
                throw StateLoadError(path: path, problem: "could not be sealed with the state key (\(error))", movedTo: nil)
            }
            return .migrated
        default:
            return .plain
        }
    }

    /// The envelope, when the file exists and decodes; nil otherwise (load reports why).
    func readEnvelope() throws(StateLoadError) -> Envelope? {
        try checkOwnership()
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        guard let envelope = try? JSONDecoder().decode(Envelope.self, from: data),
            envelope.format == Envelope.format, envelope.version == Envelope.currentVersion, envelope.session == session
        else { return nil }
        return envelope
    }

    /// The record an envelope carries, opening it when sealed.
    func record(in envelope: Envelope) throws(StateLoadError) -> SessionRecord {
        switch envelope.encryption {
        case "none":
            guard let stored = envelope.record else { throw moveAside("has no record") }
            return stored.record
        case SealedRecord.algorithm:
            guard let key else {
                throw refusal(
                    "is encrypted and no state key is configured: provide the systemd credential "
                        + "\(StateKey.credentialName) or set daemon.state-key-file")
            }
            guard let sealed = envelope.sealed, let bytes = Data(base64Encoded: sealed),
                let plaintext = try? key.open(Array(bytes), session: session),
                let stored = try? JSONDecoder().decode(StoredRecord.self, from: Data(plaintext))
            else {
                throw refusal(
                    "cannot be decrypted with the state key from \(key.source): it was sealed with another key, "
                        + "altered, or copied from another session")
            }
            return stored.record
        default:
            throw refusal("is encrypted with \"\(envelope.encryption)\", which this tokend cannot read")
        }
    }

    /// A state file another user owns or may write is refused, left as it is.
    func checkOwnership() throws(StateLoadError) {
        do {
            try Ownership.check(path, fixMode: "0600")
        } catch {
            var refused = StateLoadError(path: path, problem: "\(error.problem): refused; fix: \(error.fix)", movedTo: nil)
            refused.refusesStart = true
            throw refused
        }
    }

    private func refusal(_ problem: String) -> StateLoadError {
        var error = StateLoadError(path: path, problem: problem + "; the file was left as it is", movedTo: nil)
        error.refusesStart = true
        return error
    }

    /// The stored record, nil when there is none. An unreadable file is moved
    /// aside (never overwritten) and reported.
    public func load() throws(StateLoadError) -> SessionRecord? {
        try checkOwnership()
        guard let data = FileManager.default.contents(atPath: path) else {
            if access(path, F_OK) == 0 { throw moveAside("cannot be read") }
            return nil
        }
        let envelope: Envelope
        do {
            envelope = try JSONDecoder().decode(Envelope.self, from: data)
        } catch {
            throw moveAside("is not a tokend state file (\(decodingProblem(error)))")
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
        return try record(in: envelope)
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
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var envelope = Envelope(
            format: Envelope.format, version: Envelope.currentVersion, session: session, encryption: "none")
        if let key {
            envelope.encryption = SealedRecord.algorithm
            let plaintext = try encoder.encode(StoredRecord(record))
            envelope.sealed = Data(try key.seal(Array(plaintext), session: session)).base64EncodedString()
        } else {
            envelope.record = StoredRecord(record)
        }
        return Array(try encoder.encode(envelope))
    }

    /// Writes the record durably; returns once it is on disk.
    public func save(_ record: SessionRecord) async throws {
        let bytes = try encode(record)
        let (path, metrics) = (self.path, self.metrics)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            queue.async {
                let started = ContinuousClock.now
                let result = Result { try AtomicFile.write(bytes, to: path) }
                metrics.wrote(
                    ok: (try? result.get()) != nil, took: ContinuousClock.now - started,
                    fsync: (try? result.get()) ?? .zero)
                continuation.resume(with: result.map { _ in () })
            }
        }
    }

    /// Runs `work` on the file's write queue, after every save asked for
    /// before it (token files follow the state file, never the other way).
    public func afterSaves(_ work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
    }

    /// Synchronous save, for tests that inject faults between write steps.
    public func saveNow(_ record: SessionRecord, afterStep: (AtomicFile.Step) throws -> Void = { _ in }) throws {
        try AtomicFile.write(try encode(record), to: path, afterStep: afterStep)
    }
}

extension SessionFile {
    /// Whether records can be sealed: a fleet's shared store takes sealed records only.
    public var seals: Bool { key != nil }

    /// The record as a sealed envelope (the same text a state file holds),
    /// for a fleet's shared store. Throws without a state key.
    public func sealedText(_ record: SessionRecord) throws -> String {
        guard key != nil else { throw StateLoadError(path: path, problem: "no state key: a shared record is sealed", movedTo: nil) }
        return String(decoding: try encode(record), as: UTF8.self)
    }

    /// A record written by `sealedText` (on any host holding the same key).
    public func openSealed(_ text: String) throws(StateLoadError) -> SessionRecord {
        guard let envelope = try? JSONDecoder().decode(Envelope.self, from: Data(text.utf8)),
            envelope.format == Envelope.format, envelope.session == session,
            envelope.encryption == SealedRecord.algorithm
        else {
            throw StateLoadError(path: "shared record", problem: "is not a sealed tokend record for session \(session)", movedTo: nil)
        }
        guard envelope.version == Envelope.currentVersion else {
            throw StateLoadError(
                path: "shared record",
                problem: "has version \(envelope.version); this tokend reads version \(Envelope.currentVersion): upgrade this host",
                movedTo: nil)
        }
        return try record(in: envelope)
    }
}
