import Config
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import StateStore
import Synchronization

/// What defines a session a user added (AddSession): kept in the state
/// directory's `user-sessions.json` (sealed with the state key when there is
/// one: a registered client's secret may be in it), read at start.
struct UserSessionRecord: Codable, Sendable, Equatable {
    /// The person who added it (a uid; its subordinate uids count as it).
    var owner: UInt32
    /// The owner's user name when it was added: the first half of its full name.
    var ownerName: String
    /// The name its owner gave it.
    var name: String
    var issuer: String
    var clientID: String
    /// What the authorization server gave with a client tokend registered (RFC 7591).
    var clientSecret: String?
    var registrationAccessToken: String?
    var registrationClientURI: String?
    var registered: Bool
    var resources: [String]
    var scope: String?
    var dpop: Bool
    /// The loopback redirect URI the client was registered with (a port chosen at add time).
    var redirectURI: String
    var addedAt: Int

    /// USER/NAME: no name in tokend.toml has a '/'.
    var fullName: String { "\(ownerName)/\(name)" }
    /// Its state file's name: '@' starts no session name in tokend.toml, and uid and name are unique together.
    var fileName: String { "@\(owner).\(name)" }

    /// The settings its session runs with (plain http only where [user-sessions] allows loopback http).
    var settings: SessionSettings {
        var settings = SessionSettings(name: fullName, tokenEndpoint: nil, clientID: clientID)
        settings.issuer = issuer
        settings.clientAuth = clientSecret == nil ? .none : .post
        settings.clientSecretValue = clientSecret
        settings.redirectURI = redirectURI
        settings.scope = scope
        settings.resources = resources
        settings.dpop = dpop
        return settings
    }
}

/// The sessions users added, as records; the daemon runs a session for each.
final class UserSessions: Sendable {
    private let records: Mutex<[String: UserSessionRecord]>
    /// Names being added (AddSession between its checks and its record), with their owners:
    /// counted with the records, so that concurrent adds cannot pass per-person or take one name twice.
    private let reserved = Mutex<[String: UInt32]>([:])
    private let document: SealedDocument
    private let adds = Mutex<[UInt32: (tokens: Double, at: Double)]>([:])

    /// Adds per person: bursts of `addBurst`, then one every `addEvery` seconds.
    static let addBurst = 5.0
    static let addEvery = 120.0

    /// Reads the records; throws when they exist and cannot be read (tokend does not start without them).
    init(store: StateStore) throws {
        document = store.document("user-sessions")
        var byName: [String: UserSessionRecord] = [:]
        if let bytes = try document.read() {
            do {
                for record in try JSONDecoder().decode([UserSessionRecord].self, from: Data(bytes)) {
                    byName[record.fullName] = record
                }
            } catch {
                throw DaemonSetupError("\(document.path): not a list of user sessions (\(decodingProblem(error)))")
            }
        }
        records = Mutex(byName)
    }

    var all: [UserSessionRecord] { records.withLock { Array($0.values) }.sorted { $0.fullName < $1.fullName } }

    func record(_ fullName: String) -> UserSessionRecord? { records.withLock { $0[fullName] } }

    func count(of person: UInt32) -> Int { records.withLock { $0.values.filter { $0.owner == person }.count } }

    /// Why `fullName` cannot be added for `person` now, else nil and the name is held until `release`.
    enum Refusal: Error { case exists, tooMany }
    func reserve(_ fullName: String, for person: UInt32, limit: Int) throws(Refusal) {
        try reserved.withLock { (reserved) throws(Refusal) in
            guard record(fullName) == nil, reserved[fullName] == nil else { throw .exists }
            guard count(of: person) + reserved.values.filter({ $0 == person }).count < limit else { throw .tooMany }
            reserved[fullName] = person
        }
    }

    /// Ends a reservation (the record is kept by then, or the add failed).
    func release(_ fullName: String) { _ = reserved.withLock { $0.removeValue(forKey: fullName) } }

    /// Keeps `record` durably (on disk before this returns); nothing changes when writing fails.
    func insert(_ record: UserSessionRecord) throws {
        try change { $0[record.fullName] = record }
    }

    /// Forgets a record durably.
    func remove(_ fullName: String) throws {
        try change { $0[fullName] = nil }
    }

    private func change(_ edit: (inout [String: UserSessionRecord]) -> Void) throws {
        try records.withLock { records in
            var next = records
            edit(&next)
            let sorted = next.values.sorted { $0.fullName < $1.fullName }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            try document.write(Array(try encoder.encode(sorted)))
            records = next
        }
    }

    /// nil when `person` may add a session now (and it is counted); else the seconds until it may.
    func takeAdd(for person: UInt32, now: Double = Date().timeIntervalSince1970) -> Int? {
        adds.withLock { buckets in
            var bucket = buckets[person] ?? (Self.addBurst, now)
            bucket.tokens = min(Self.addBurst, bucket.tokens + max(0, now - bucket.at) / Self.addEvery)
            bucket.at = now
            defer { buckets[person] = bucket }
            guard bucket.tokens >= 1 else { return max(1, Int(((1 - bucket.tokens) * Self.addEvery).rounded(.up))) }
            bucket.tokens -= 1
            return nil
        }
    }
}
