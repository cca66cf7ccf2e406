import Broker
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import Synchronization
import Systemd
import TokendInterface
import UnixServer
import Varlink

/// tokend's shares: listening sockets users handed in (CreateShare), each
/// served on the server's loop as a restricted service (ShareService) until
/// its TTL or its revocation. A share's calls are made as its creator, with
/// the creator's credentials kept from CreateShare: whoever connects gets no
/// more than the creator may have, checked again on every call.
final class Shares: Sendable {
    /// Per person (uid, with its subordinate uids): shares held, and connections through them all.
    static let perPerson = 16
    static let connectionsPerPerson = 64
    static let defaultTTL = 3600
    static let maximumTTL = 30 * 86400
    /// Resources one share may name.
    static let maximumResources = 16

    struct Record: Sendable {
        let id: UInt64
        let path: String
        let session: String
        let resources: [String]
        let scope: String?
        let expiresAt: Int
        let mode: Int
        /// The creator as it called CreateShare: every call through the share is made as this peer.
        let creator: PeerCredentials
    }

    struct Entry {
        let record: Record
        let listener: SideListener
        let expiry: Task<Void, Never>
    }

    typealias KeyCheck = @Sendable (SessionActor, String?, String?, CallContext) async throws -> TokenKey

    /// What the share methods need of the broker methods, given once they are made.
    struct Tools: Sendable {
        let policy: @Sendable () -> AccessPolicy
        /// The key a call names, refused when the caller may not have it (BrokerMethods' `key`).
        let key: KeyCheck
        /// GetToken, Refresh and GetProof as every caller gets them, access checks included.
        let tokenMethods: [String: MethodHandler]
        let fanOuts: FanOuts
    }

    let broker: Broker
    let logger: Logger
    /// Where the live shares' records are kept for a restart under systemd (Shares+Store); nil: nowhere.
    let stateDirectory: String?
    let entries = Mutex<[UInt64: Entry]>([:])
    let nextID = Atomic<UInt64>(1)
    let server = Mutex<VarlinkServer?>(nil)
    let tools = Mutex<Tools?>(nil)
    let keyCheck = Mutex<KeyCheck?>(nil)
    /// The sessions' subscribers, shared with the broker methods: share subscribers join the same fan-outs.
    let fanOuts = FanOuts()

    /// Where the listening sockets people hand in are closed: never on the
    /// loop or the pool (connections waiting on one may hold descriptors).
    let closer: DescriptorCloser

    /// Test builds: the kill -9 checkpoint (CrashPoint), here "share-record-removed".
    let checkpoint: (@Sendable (String) -> Void)?

    init(
        broker: Broker, logger: Logger, stateDirectory: String? = nil, closer: DescriptorCloser = DescriptorCloser(),
        checkpoint: (@Sendable (String) -> Void)? = nil
    ) {
        self.closer = closer
        self.broker = broker
        self.logger = logger
        self.stateDirectory = stateDirectory
        self.checkpoint = checkpoint
    }

    /// The server whose loop serves the shares' sockets.
    func attach(_ server: VarlinkServer) {
        self.server.withLock { $0 = server }
    }

    func useKeys(_ key: @escaping KeyCheck) {
        keyCheck.withLock { $0 = key }
    }

    func configure(policy: @escaping @Sendable () -> AccessPolicy, tokenMethods: [String: MethodHandler]) {
        guard let key = keyCheck.withLock({ $0 }) else { return }
        tools.withLock { $0 = Tools(policy: policy, key: key, tokenMethods: tokenMethods, fanOuts: fanOuts) }
    }

    func wire(_ record: Record, connections: Int) -> BrokerInterface.Share {
        BrokerInterface.Share(
            path: record.path, session: record.session, resources: record.resources, scope: record.scope,
            expiresAt: record.expiresAt, connections: connections, mode: record.mode)
    }

    /// Serves `fd` as the share `record` until its TTL; the server owns `fd` from here on.
    /// `store`: kept in systemd's file descriptor store too (not when it came from there).
    func start(_ record: Record, listener fd: CInt, ttl: Int, store: Bool = true) throws -> BrokerInterface.Share {
        guard let server = server.withLock({ $0 }), let tools = tools.withLock({ $0 }) else {
            closer.close(fd, for: record.creator.person)
            throw VarlinkError(BrokerInterface.Error.internalError)
        }
        if store { Notifier.store(fd, name: Self.storeName(record.id)) }
        let side = try server.serve(
            listener: fd,
            service: ShareService(record: record, shares: self, tools: tools) { [weak self] in self?.isLive(record.id) ?? false }
                .service,
            person: record.creator.person,
            limit: Self.connectionsPerPerson,
            // One share takes at most half of its creator's places, so that the far side of one (an
            // `ssh -R` forward, a container) cannot lock the creator out of the others.
            ownLimit: Self.connectionsPerPerson / 2,
            limitError: VarlinkError(BrokerInterface.Error.tooManyShares, ["limit": .int(Self.connectionsPerPerson)]))
        let expiry = Task { [weak self] in
            try? await Task.sleep(for: .seconds(ttl))
            guard !Task.isCancelled else { return }
            self?.end(record.id, because: "expired")
        }
        let admitted = entries.withLock { entries in
            // Checked again here, where it is decided: two calls at once cannot both take the last place.
            guard entries.values.count(where: { $0.record.creator.person == record.creator.person }) < Self.perPerson else {
                return false
            }
            entries[record.id] = Entry(record: record, listener: side, expiry: expiry)
            return true
        }
        guard admitted else {
            expiry.cancel()
            server.stopServing(side)
            Notifier.removeStored(name: Self.storeName(record.id))
            throw VarlinkError(BrokerInterface.Error.tooManyShares, ["limit": .int(Self.perPerson)])
        }
        persist()
        logger.notice(
            "share created",
            metadata: [
                "path": "\(record.path)", "session": "\(record.session)", "resources": "\(record.resources)",
                "scope": "\(record.scope ?? "")", "ttl": "\(ttl)", "peer.uid": "\(record.creator.uid)",
                "peer.pid": "\(record.creator.pid)",
            ])
        return wire(record, connections: 0)
    }

    /// Ends a share: its socket and every connection through it are closed on the loop's next turn.
    func end(_ id: UInt64, because reason: String) {
        guard let entry = entries.withLock({ $0.removeValue(forKey: id) }) else { return }
        entry.expiry.cancel()
        server.withLock { $0 }?.stopServing(entry.listener)
        // The record goes first: a crash before systemd drops its copy of the socket then finds the
        // socket without a record at start, and `restore` closes it, instead of serving the share again.
        persist()
        checkpoint?("share-record-removed")
        Notifier.removeStored(name: Self.storeName(entry.record.id))
        logger.notice(
            "share ended",
            metadata: ["path": "\(entry.record.path)", "session": "\(entry.record.session)", "reason": "\(reason)"])
    }

    /// Ends every share of `session` (a session removed).
    func endAll(of session: String, because reason: String) {
        let ids = entries.withLock { $0.values.filter { $0.record.session == session }.map(\.record.id) }
        for id in ids { end(id, because: reason) }
    }

    /// Shares the peer may see: its own (by uid); root sees every one.
    func visible(to peer: PeerCredentials) -> [(Record, Int)] {
        entries.withLock { entries in
            entries.values.filter { peer.uid == 0 || $0.record.creator.uid == peer.uid }
                .sorted { $0.record.id < $1.record.id }
                .map { ($0.record, $0.listener.connections) }
        }
    }

    func held(by person: UInt32) -> Int {
        entries.withLock { $0.values.count(where: { $0.record.creator.person == person }) }
    }

    func isLive(_ id: UInt64) -> Bool {
        entries.withLock { $0[id] != nil }
    }
}
