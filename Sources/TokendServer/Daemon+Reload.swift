import Broker
import Config
import Logging
import Systemd
import UnixServer
import UnixSignals

extension Daemon {
    /// SIGHUP: re-read the configuration. Unchanged sessions keep their tokens
    /// and connections; added sessions start; removed ones stop cleanly;
    /// changed ones are stopped (persisting) and started anew from their
    /// state file. An invalid file is rejected and the old configuration kept.
    /// [daemon] settings (socket, state directory) need a restart.
    /// /etc/subuid is read again too: whose subordinate uids count as whom.
    func reloadOnHangup(server: VarlinkServer) async {
        for await _ in await UnixSignalsSequence(trapping: .sighup) {
            Notifier.reloading(status: "reloading \(configPath)")
            reloadSubordinateIDs(server: server)
            await reload()
            Notifier.ready(status: await statusLine())
        }
    }

    /// Reads /etc/subuid again: the server puts each new peer's person on its
    /// credentials, which the server's budgets and the forced-refresh limit key by.
    func reloadSubordinateIDs(server: VarlinkServer) {
        server.reloadSubordinateIDs(loadSubordinateIDs())
    }

    /// /etc/subuid as the budgets will count it, each problem in it logged once per load.
    func loadSubordinateIDs() -> SubordinateIDs {
        let ids = SubordinateIDs.load()
        for problem in ids.problems {
            logger.warning("subordinate uid table", metadata: ["problem": "\(problem)"])
        }
        return ids
    }

    func reload() async {
        logger.notice("reloading", metadata: ["config": "\(configPath)"])
        let previous = configuration.withLock { $0 }
        let old = Dictionary(uniqueKeysWithValues: previous.sessions.map { ($0.name, $0) })
        let next: Configuration
        let policy: AccessPolicy
        var started: [SessionActor] = []
        do {
            next = try Configuration.load(path: configPath, environment: environment)
            policy = try Self.policy(next, users: userSessions.all)
            for settings in next.sessions where old[settings.name] != settings {
                started.append(try Self.makeSession(
                    settings, store: store, cookiePolicy: cookiePolicy, hostID: configuration.withLock { $0.daemon.hostID },
                    reuse: reuse, logger: logger, tpm: next.daemon.tpmInUse))
            }
        } catch {
            reloadProblem.withLock { $0 = "\(error)" }
            logger.error("reload failed", metadata: ["problem": "\(error)"])
            return
        }
        let names = Set(next.sessions.map(\.name))
        for name in old.keys where !names.contains(name) {
            if let removed = broker.remove(name) { await removed.stop() }
            metrics.forget(session: name)
        }
        for session in started {
            // Stop the old actor first so its refresh in flight is persisted
            // before the new one loads the state file.
            if let replaced = try? broker.session(session.name) { await replaced.stop() }
            await session.start()
            broker.put(session)
        }
        configuration.withLock {
            $0.sessions = next.sessions
            $0.access = next.access
            $0.userSessions = next.userSessions
        }
        // The users' sessions as they are now (an AddSession may have finished while this reload waited).
        access.withLock { current in
            var policy = policy
            if let users = try? UserSessionRules(next.userSessions, records: userSessions.all) { policy.users = users }
            current = policy
        }
        if next.userSessions != previous.userSessions { await remakeUserSessions() }
        reuse.changed()  // answers the loop gives again were made under the old rules
        reloadProblem.withLock { $0 = nil }
        if next.daemon != previous.daemon {
            logger.warning("[daemon] settings changed; they take effect at the next restart")
        }
        logger.notice(
            "reloaded",
            metadata: [
                "sessions": "\(next.sessions.count)", "restarted": "\(started.map(\.name).joined(separator: ","))",
            ])
    }
}
