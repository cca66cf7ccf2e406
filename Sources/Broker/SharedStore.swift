import StateStore

/// A session's copy shared by the hosts of a fleet (the Fleet module keeps it
/// in PostgreSQL). Writes happen under the fleet-wide lock and are fenced: a
/// write succeeds only against the version it read.
public protocol SharedStore: Sendable {
    /// Who writes: `[daemon] host-id`.
    var hostID: String { get }
    /// Takes the session's fleet-wide lock, waiting while another host holds it.
    func lock() async throws -> any SharedLease
    /// The lock for a refresh: a store may answer a host that waited while the fleet's copy moved on
    /// (another host's refresh, most often) with a lease it takes only if the host writes. Only a
    /// refresh may: it writes its marker, fenced, before any upstream call, so losing that write costs
    /// nothing; a login, logout or cookie change must hold the lease from its read to its write.
    func lockForRefresh() async throws -> any SharedLease
    /// The fleet's copy as it is now, without the lock (nil: no host has written one yet):
    /// a compare-and-refresh reads first and takes the lock only if the store is still stale.
    func read() async throws -> SharedRecord?
    /// Runs until cancelled, telling `handle` what the fleet's copy is (after
    /// each notification, each reconnect and each periodic re-read) and when
    /// the store cannot be reached.
    func watch(_ handle: @escaping @Sendable (SharedStoreEvent) async -> Void) async
    /// Closes the lock's connection (the session stops: shutdown, or replaced at reload).
    func close() async
    /// What this host knows of the store now, for status and metrics (nil: nothing to say).
    func fleetStatus() -> FleetStatus?
}

extension SharedStore {
    public func fleetStatus() -> FleetStatus? { nil }

    public func lockForRefresh() async throws -> any SharedLease { try await lock() }

    /// A store without a plain read reads under its lock.
    public func read() async throws -> SharedRecord? {
        let lease = try await lock()
        do {
            let copy = try await lease.read()
            await lease.release()
            return copy
        } catch {
            await lease.release()
            throw error
        }
    }
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

/// A shared session's store as this host sees it (SessionStatus.fleet).
public struct FleetStatus: Sendable, Equatable {
    /// How this host learns of other hosts' writes: "polling", "listening"
    /// (listen=on, and a probe notification came back) or "notificationsLost"
    /// (listen=on, but none arrive: a pooler in transaction mode; polling only).
    public var following: String
    /// Seconds between re-reads of the fleet's copy (poll=), before jitter.
    public var pollInterval: Int
    /// Seconds since this host last read or wrote the fleet's copy (nil: not yet).
    public var copyAge: Double?
    /// Statements sent to the store and connections opened to it since start.
    public var statements: Int
    public var connects: Int
    /// The last statement's round trip, seconds (nil: none answered yet).
    public var lastRoundTrip: Double?
    /// The refresh lease as this host last saw it; nil when it was free or has since run out.
    public var lease: FleetLeaseStatus?
    /// Seconds the database's clock is ahead of this host's, measured by every read and write
    /// (nil: not yet); expiry times go to the store in the database's time.
    public var clockOffset: Double?
    /// What this host found when it asked the store about itself (nil: not asked yet).
    public var check: StoreCheckStatus?

    public init(
        following: String, pollInterval: Int, copyAge: Double?, statements: Int, connects: Int,
        lastRoundTrip: Double?, lease: FleetLeaseStatus?, clockOffset: Double? = nil, check: StoreCheckStatus? = nil
    ) {
        self.clockOffset = clockOffset
        self.check = check
        self.following = following
        self.pollInterval = pollInterval
        self.copyAge = copyAge
        self.statements = statements
        self.connects = connects
        self.lastRoundTrip = lastRoundTrip
        self.lease = lease
    }
}

public struct FleetLeaseStatus: Sendable, Equatable {
    /// The holder's host-id, and the lease's epoch (every take adds one; writes are fenced by it).
    public var holder: String
    public var epoch: Int
    /// Seconds left: the database's figure when last read, less the time since.
    public var remaining: Double
    /// The holder is this host.
    public var heldHere: Bool

    public init(holder: String, epoch: Int, remaining: Double, heldHere: Bool) {
        self.holder = holder
        self.epoch = epoch
        self.remaining = remaining
        self.heldHere = heldHere
    }
}

/// The store as this host found it when it asked (at start, every 10 minutes, and after a refused
/// statement): the role it connects as, what that role may not do on tokend's tables, and what
/// stands between this host and PostgreSQL.
public struct StoreCheckStatus: Sendable, Equatable {
    public var user: String
    /// Table → the privileges tokend uses on it that the role lacks (SELECT, INSERT, UPDATE); empty when none.
    public var missing: [String: [String]]
    /// "direct", "transaction" (a pooler that hands a server connection back after each
    /// transaction), "session" (one server connection held per client connection) or "unknown".
    public var pooler: String
    /// Seconds since the check.
    public var age: Double

    public init(user: String, missing: [String: [String]], pooler: String, age: Double) {
        self.user = user
        self.missing = missing
        self.pooler = pooler
        self.age = age
    }
}
