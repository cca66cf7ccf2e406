#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StateStore
import Systemd
import TokendInterface
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// Shares across a restart under systemd: each share's listening socket is
/// kept in the unit's file descriptor store (FDSTORE=1, named
/// `stored-share-ID`), and what it is (path, session, resources, scope,
/// expiry, creator) in `shares.json` in the state directory (no secret). At
/// start, a share whose socket came back, whose record is there and whose
/// TTL has not passed is served again; anything else is dropped: without
/// systemd no socket comes back, and a restart ends every share.
extension Shares {
    struct Stored: Codable {
        var id: UInt64
        var path: String
        var session: String
        var resources: [String]
        var scope: String?
        var expiresAt: Int
        var mode: Int
        var uid: UInt32
        var gid: UInt32
        var groups: [UInt32]
        var pid: Int32
        var person: UInt32
    }

    static func storeName(_ id: UInt64) -> String { "\(ListenFDs.storedPrefix)share-\(id)" }

    var recordsPath: String? { stateDirectory.map { $0 + "/shares.json" } }

    /// Writes the live shares' records (after every change).
    func persist() {
        guard let path = recordsPath else { return }
        let records = entries.withLock { $0.values.map(\.record) }.sorted { $0.id < $1.id }.map { record in
            Stored(
                id: record.id, path: record.path, session: record.session, resources: record.resources,
                scope: record.scope, expiresAt: record.expiresAt, mode: record.mode, uid: record.creator.uid,
                gid: record.creator.gid, groups: record.creator.groups, pid: record.creator.pid,
                person: record.creator.person)
        }
        do {
            try AtomicFile.write(Array(try JSONEncoder().encode(records)), to: path)
        } catch {
            logger.warning("cannot record the shares", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    /// At start, once the server's loop runs: serves again each share whose
    /// socket systemd gave back; closes (and drops from the store) the others.
    func restore(_ passed: [(name: String, fd: CInt)]) {
        let records = recordsPath.flatMap { FileManager.default.contents(atPath: $0) }
            .flatMap { try? JSONDecoder().decode([Stored].self, from: $0) } ?? []
        let byName = Dictionary(records.map { (Self.storeName($0.id), $0) }, uniquingKeysWith: { a, _ in a })
        let now = Int(Date().timeIntervalSince1970)
        if let highest = records.map(\.id).max() { nextID.store(highest + 1, ordering: .relaxed) }
        for (name, fd) in passed {
            guard let stored = byName[name], stored.expiresAt > now, (try? ShareSocket.check(fd, path: stored.path)) != nil
            else {
                closer.close(fd, for: byName[name]?.person ?? UInt32.max)
                Notifier.removeStored(name: name)
                logger.notice("stored share dropped", metadata: ["name": "\(name)"])
                continue
            }
            let record = Record(
                id: stored.id, path: stored.path, session: stored.session, resources: stored.resources,
                scope: stored.scope, expiresAt: stored.expiresAt, mode: stored.mode,
                creator: PeerCredentials(
                    pid: stored.pid, uid: stored.uid, gid: stored.gid, groups: stored.groups, person: stored.person))
            do {
                _ = try start(record, listener: fd, ttl: stored.expiresAt - now, store: false)
            } catch {
                Notifier.removeStored(name: name)
                logger.warning("stored share not served again", metadata: ["path": "\(stored.path)", "error": "\(error)"])
            }
        }
        persist()
    }
}
