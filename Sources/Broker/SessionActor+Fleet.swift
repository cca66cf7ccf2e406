import CookieJar
import Logging
import StateStore

/// How a write went (see `persist`).
enum PersistOutcome: Equatable {
    case saved
    /// Another host wrote the fleet's copy since this host read it: its copy wins.
    case fenced
    /// Saved here, but the shared store could not be reached.
    case fleetUnreachable(String)
}

/// A session shared by a fleet. Every host keeps the session as before (its
/// state file is a sealed cache), and the fleet's copy in the shared store
/// decides: a host adopts every newer copy it hears of, and writes only while
/// it holds the fleet lock, fenced by the copy's version.
extension SessionActor {
    /// Follows the fleet's copy: notifications, reconnects and periodic re-reads.
    func startFollowingFleet() {
        guard let shared else { return }
        watcher = Task {
            await shared.watch { event in await self.fleetEvent(event) }
        }
    }

    func fleetEvent(_ event: SharedStoreEvent) async {
        switch event {
        case .unavailable(let reason):
            noteStoreProblem(reason)
        case .current(let remote):
            if let problem = storeProblem {
                logger.notice("shared store reachable again", metadata: ["was": "\(problem)"])
                storeProblem = nil
            }
            if fleetBehind, remote?.version == sharedVersion {
                await catchUpFleet()
            } else if let remote {
                await adoptShared(remote)
            } else if sharedVersion == nil, record.phase == .active {
                // The fleet has no copy yet: this host's session becomes it.
                await catchUpFleet()
            }
        }
    }

    func noteStoreProblem(_ reason: String) {
        if storeProblem == nil {
            logger.error("shared store unavailable", metadata: ["problem": "\(reason)"])
        }
        storeProblem = reason
    }

    /// Writes this host's record to the fleet when the fleet has nothing newer.
    /// False when the store could not be reached.
    @discardableResult
    func catchUpFleet() async -> Bool {
        do {
            try await fleetExclusive("catching up") {
                guard fleetBehind || sharedVersion == nil else { return }
                if case .saved = await persist(what: "fleet catch-up") {
                    logger.notice("shared store has this host's session", metadata: ["generation": "\(record.generation)"])
                }
            }
            return true
        } catch {
            // Noted in storeProblem; the next notification or re-read tries again.
            return false
        }
    }

    /// A refreshed token the store does not have yet is written as soon as the
    /// store answers, not at the next poll (which backs off to 10 s): after a
    /// database restart this host's lease lasts one lease length from the
    /// database's start, and another host that takes it over finds only the
    /// marker and replays the spent refresh token. Ends once the store has
    /// answered (written, or another host's copy adopted or refused).
    func writeBehindPromptly() {
        Task {
            while fleetBehind, !stopping {
                try? await Task.sleep(for: .seconds(1))
                guard fleetBehind, !stopping else { return }
                if await catchUpFleet() { return }
            }
        }
    }

    /// Makes a newer fleet copy this host's state: its cookies, its token (for
    /// callers, the fast path, token files and the proactive timer), and tells
    /// subscribers what changed before callers can see it.
    func adoptShared(_ remote: SharedRecord) async {
        // One adoption at a time, so that a version seen as adopted is in `record`.
        await adoptions.take()
        defer { adoptions.pass() }
        if let sharedVersion, remote.version <= sharedVersion { return }
        // Generations never go back: an older one is a rolled-back refresh
        // token (a database writer's doing), and using it would revoke the family.
        guard remote.record.generation >= record.generation else {
            // Said once per copy (and in status), not at every poll.
            let refusal =
                "refused the fleet's copy (version \(remote.version), generation \(remote.record.generation), "
                + "written by \(remote.writtenBy)): it holds an older generation than this host's \(record.generation)"
            if lastError != refusal {
                lastError = refusal
                logger.critical(
                    "refused the fleet's copy: it holds an older generation than this host",
                    metadata: [
                        "version": "\(remote.version)", "generation": "\(remote.record.generation)",
                        "own_generation": "\(record.generation)", "host": "\(remote.writtenBy)",
                    ])
            }
            return
        }
        if fleetBehind {
            logger.critical(
                "fenced off: another host wrote the session before this host's refreshed token reached the store; its copy wins",
                metadata: ["host": "\(remote.writtenBy)"])
            fleetBehind = false
        }
        let before = record
        let next = remote.record
        let cookieChanges = jar.replaceAll(with: next.cookies, now: Int(clock.now()))
        if !cookieChanges.isEmpty { scheduleCookieExpiry() }
        await persist(next, what: "fleet copy", toFleet: false)
        var events = cookieChanges.isEmpty ? [] : [event(.cookies, changes: cookieChanges, of: next)]
        switch (before.phase, next.phase) {
        case (.active, .active) where next.generation != before.generation || next.accessToken != before.accessToken:
            events.append(event(.refreshed, of: next))
        case (.loginRequired, .active), (.loggedOut, .active):
            events.append(event(.loggedIn, of: next))
        case (.active, .loggedOut):
            events.append(event(.loggedOut, of: next))
        case (.active, .loginRequired):
            events.append(event(.loginRequired, of: next))
        default:
            break
        }
        await publish(events, waitForDelivery: true)
        sharedVersion = remote.version
        record = next
        if next.generation > before.generation || next.phase != .active {
            backoff.reset()
            lastError = nil
        }
        logger.debug(
            "adopted the fleet's copy",
            metadata: ["version": "\(remote.version)", "generation": "\(next.generation)", "host": "\(remote.writtenBy)"])
        if inFlight == nil {
            reschedule()
            // Another host is refreshing. Wait for the lock: if that host dies, this one finds its marker.
            if next.phase == .active, next.refreshStartedAt != nil, !stopping {
                let generation = next.generation
                inFlight = Task { try await self.performFleetRefresh(from: generation, onlyIfMarked: true) }
                inFlightRenews = nil
            }
        }
    }

    /// Runs `body` holding the fleet lock, after adopting the fleet's latest
    /// copy; `persist` inside writes through the lease. Local sessions run it as it is.
    /// `forRefresh`: the lease may be taken only at the write (SharedStore.lockForRefresh).
    func fleetExclusive<T>(_ what: String, forRefresh: Bool = false, _ body: () async throws -> T) async throws -> T {
        guard let shared else { return try await body() }
        let held: any SharedLease
        do {
            held = try await (forRefresh ? shared.lockForRefresh() : shared.lock())
        } catch {
            noteStoreProblem("\(error)")
            throw BrokerError.storeUnavailable(name, "\(what): the shared store cannot be reached: \(error)")
        }
        lease = held
        let result: Result<T, any Error>
        do {
            if let remote = try await held.read() { await adoptShared(remote) }
            result = .success(try await body())
        } catch let error as SharedStoreError {
            noteStoreProblem(error.description)
            result = .failure(BrokerError.storeUnavailable(name, "\(what): \(error.description)"))
        } catch {
            result = .failure(error)
        }
        lease = nil
        await held.release()
        return try result.get()
    }

    /// A refresh for the fleet: under the fleet lock, with the fleet's latest
    /// copy. A host that waited while another refreshed finds the new
    /// generation and makes no upstream call; a host that finds a marker (its
    /// writer died mid-refresh) retries once with the stored refresh token.
    /// With `onlyIfMarked` it refreshes only in that case.
    func performFleetRefresh(from generation: Int, onlyIfMarked: Bool) async throws -> Token {
        defer {
            inFlight = nil
            reschedule()
        }
        if !onlyIfMarked, let token = await newerInFleet(than: generation) { return token }
        do {
            return try await fleetExclusive("refresh", forRefresh: true) {
                try requireActive()
                let marked = record.refreshStartedAt != nil
                if marked {
                    logger.warning(
                        "a host stopped during a refresh; retrying once with the stored refresh token",
                        metadata: ["generation": "\(record.generation)"])
                } else if onlyIfMarked || record.generation > generation, let token = validToken(now: clock.now()) {
                    return token
                }
                return try await performRefresh(afterCrash: marked)
            }
        } catch let error as BrokerError where error.code == .storeUnavailable {
            // No refresh without the lock: a still-valid token, or the store's error.
            return try validToken(or: error, now: clock.now())
        }
    }

    /// A compare-and-refresh's first step: one plain read, no lease. When the
    /// store already holds a newer generation and no refresh is under way,
    /// this host adopts it and calls no one; a fleet of stale hosts then takes
    /// no lease at all. Otherwise (still stale, a marker, the store not
    /// answering) the refresh goes on under the lease.
    func newerInFleet(than generation: Int) async -> Token? {
        guard let shared, let remote = try? await shared.read() else { return nil }
        await adoptShared(remote)
        guard record.generation > generation, record.refreshStartedAt == nil else { return nil }
        return validToken(now: clock.now())
    }
}
