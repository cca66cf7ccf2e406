import Deadline
import Logging
import Synchronization
import Systemd
import UnixSignals
import UnixServer

extension Daemon {
    /// WATCHDOG=1 every half interval, but only after a health check proves
    /// that the server's loop is turning and every session actor answers. A
    /// hung actor or loop, or a loop that has ended, stops the pings, and
    /// systemd restarts tokend.
    func watchdog(server: VarlinkServer) async {
        guard let interval = Notifier.watchdogInterval() else { return }
        let period = interval / 2
        logger.debug("watchdog enabled", metadata: ["interval": "\(interval)"])
        while !Task.isCancelled {
            if await healthy(within: period, server: server) {
                Notifier.watchdog()
            } else {
                logger.critical("health check failed: withholding the watchdog ping")
            }
            try? await Task.sleep(for: period)
        }
    }

    func healthy(within limit: Duration, server: VarlinkServer) async -> Bool {
        let broker = self.broker
        return await completes(within: limit) {
            try await server.healthCheck()
            for session in broker.all { await session.ping() }
        }
    }

    #if TOKEND_TEST_HOOKS
    /// Test-only (TOKEND_TEST_HOOKS=1): SIGUSR2 hangs the first session
    /// actor, SIGUSR1 the server's loop.
    func hangOnSignal(server: VarlinkServer) async {
        for await signal in await UnixSignalsSequence(trapping: .sigusr2, .sigusr1) {
            if signal == .sigusr1 {
                server.hangLoopForTesting()
                continue
            }
            guard let session = broker.all.first else { continue }
            Task.detached { await session.hangForTesting() }
        }
    }
    #endif
}

/// True if `body` finishes, without throwing, within `limit` (a hung body is abandoned).
func completes(within limit: Duration, _ body: @escaping @Sendable () async throws -> Void) async -> Bool {
    (try? await within(limit, body)) != nil
}
