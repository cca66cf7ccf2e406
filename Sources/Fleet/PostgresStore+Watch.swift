import Broker
import Deadline
import PostgresWire

/// How a host learns of other hosts' writes.
enum Following: Equatable, Sendable {
    /// Re-reads the row every `poll` (jittered) and when the token is due for refresh.
    case polling
    /// Also LISTENs (`listen=on`), and a probe notification came back.
    case listening
    /// `listen=on`, but notifications never arrive here: a pooler in transaction mode, most likely.
    case notificationsLost
}

struct NotificationsLost: Error {}

extension PostgresStore {
    /// Tells `handle` the fleet's copy at start, at every poll, after every
    /// notification (with `listen=on`), and when the store cannot be reached.
    public func watch(_ handle: @escaping @Sendable (SharedStoreEvent) async -> Void) async {
        guard address.listen else { return await poll(handle) }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.poll(handle) }
            group.addTask { await self.listen(handle) }
            await group.waitForAll()
        }
    }

    /// Reads at start, then as `ReadPlan` says: a poll on a phase of its own and
    /// one extra read of each copy at its refresh; after a failure again in
    /// 1 s, doubling to 10 s.
    func poll(_ handle: @escaping @Sendable (SharedStoreEvent) async -> Void) async {
        let started = ContinuousClock.now
        let elapsed = { (ContinuousClock.now - started).seconds }
        var plan = ReadPlan(poll: address.pollInterval, refreshMargin: refreshMargin, phase: .random(in: 0...1))
        var backoff = Duration.seconds(1)
        while !Task.isCancelled {
            plan.reading(at: elapsed(), jitter: .random(in: 0...1))
            do {
                let current = try await read()
                await handle(.current(current))
                backoff = .seconds(1)
                plan.saw(
                    expiresAt: current?.record.expiresAt, at: elapsed(), wallNow: Self.localNow(),
                    spread: .random(in: 0...1))
            } catch {
                if Task.isCancelled { break }
                await handle(.unavailable(explain(error)))
                plan.failed(at: elapsed(), retry: backoff)
                backoff = min(backoff * 2, .seconds(10))
            }
            try? await Task.sleep(for: plan.wait(at: elapsed()))
        }
    }

    /// LISTEN on a connection of its own, proven by a probe sent on the other
    /// one. A pooler in transaction mode hands the listening server connection
    /// to other clients, and notifications never arrive: then this host says
    /// so and polls only.
    func listen(_ handle: @escaping @Sendable (SharedStoreEvent) async -> Void) async {
        var backoff = Duration.seconds(1)
        var attempt = 0
        while !Task.isCancelled {
            attempt += 1
            var opened: PostgresConnection?
            do {
                let connection = try await link.open(id: -attempt)
                opened = connection
                backoff = .seconds(1)
                try await follow(connection, handle)
            } catch is NotificationsLost {
                following.withLock { $0 = .notificationsLost }
                logger.warning(
                    "LISTEN gets no notifications from this store (a pooler in transaction mode?); polling only",
                    metadata: ["poll": "\(address.pollInterval)"])
                try? await opened?.close()
                return
            } catch {
                // Stopping, or the connection failed (the server closed it, or broke the protocol):
                // polling goes on, and reports the store's state.
                if !Task.isCancelled {
                    logger.warning(
                        "LISTEN connection lost; polling until it is back",
                        metadata: ["error": "\(explain(error))", "retry": "\(backoff)"])
                }
            }
            following.withLock { $0 = .polling }
            try? await opened?.close()
            if Task.isCancelled { break }
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(10))
        }
    }

    func follow(_ connection: PostgresConnection, _ handle: @escaping @Sendable (SharedStoreEvent) async -> Void)
        async throws
    {
        let session = self.session
        let probe = "probe \(hostID) \(UInt64.random(in: 1...UInt64.max))"
        let notifications = try await connection.listen(Self.channel)
        let (probes, arrived) = AsyncStream<Void>.makeStream()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for try await note in notifications {
                    if note.payload == probe { arrived.yield() }
                    // "VERSION SESSION", as a write's pg_notify sends it.
                    let parts = note.payload.split(separator: " ", maxSplits: 1)
                    guard parts.count == 2, parts[1] == session, let version = Int64(parts[0]) else { continue }
                    if version <= self.knownVersion.load(ordering: .relaxed) { continue }
                    await handle(.current(try await self.read()))
                }
                throw SharedStoreError("\(self.address): notifications ended")
            }
            group.addTask {
                try await self.run("probing notifications") { other in
                    _ = try await other.query("SELECT pg_notify(\(Self.channel), \(probe))::text")
                }
                let heard = try await Deadline.within(.seconds(5)) {
                    for await _ in probes { return true }
                    return false
                }
                let outcome = Following(probeHeard: heard)
                guard outcome == .listening else { throw NotificationsLost() }
                self.following.withLock { $0 = outcome }
                self.logger.info("following the fleet by notifications, and by polling")
            }
            defer { group.cancelAll() }
            while try await group.next() != nil {}
        }
    }
}
