import StateStore

/// A session's copy shared by the hosts of a fleet (the Fleet module keeps it
/// in PostgreSQL). Writes happen under the fleet-wide lock and are fenced: a
/// write succeeds only against the version it read.
public protocol SharedStore: Sendable {
    /// Who writes: `[daemon] host-id`.
    var hostID: String { get }
    /// Takes the session's fleet-wide lock, waiting while another host holds it.
    func lock() async throws -> any SharedLease
    /// Runs until cancelled, telling `handle` what the fleet's copy is (after
    /// each notification, each reconnect and each periodic re-read) and when
    /// the store cannot be reached.
    func watch(_ handle: @escaping @Sendable (SharedStoreEvent) async -> Void) async
    /// Closes the lock's connection (the session stops: shutdown, or replaced at reload).
    func close() async
}

/// Held between `lock()` and `release()`: this host alone writes the session.
public protocol SharedLease: Sendable {
    /// The fleet's copy, nil when no host has written one yet.
    func read() async throws -> SharedRecord?
    /// Writes `record` if the fleet's copy is still at `expected` (nil: there
    /// is none yet). Returns the new version, or nil when another host has
    /// written since: this host was fenced off and must adopt that copy.
    func write(_ record: SessionRecord, expected: Int64?) async throws -> Int64?
    func release() async
}

public struct SharedRecord: Sendable {
    /// +1 with every write by any host: what writes are fenced with.
    public var version: Int64
    public var record: SessionRecord
    public var writtenBy: String

    public init(version: Int64, record: SessionRecord, writtenBy: String) {
        self.version = version
        self.record = record
        self.writtenBy = writtenBy
    }
}

public enum SharedStoreEvent: Sendable {
    case current(SharedRecord?)
    case unavailable(String)
}

/// The store cannot be reached or refused a statement.
public struct SharedStoreError: Error, Sendable, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}
