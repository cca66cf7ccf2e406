import Broker
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StateStore
import TokendMetrics
import Varlink

extension Daemon {
    /// Every second, what each session's status says goes into the metrics
    /// (its state, its token's expiry; its refreshes, coalesced askers and
    /// failures the session counts into them itself). Every `textfileInterval` the
    /// metrics textfile is rewritten, atomically, for node_exporter.
    func exportMetrics() async {
        let textfile = configuration.withLock { $0.daemon.metricsTextfile }
        var lastWrite = ContinuousClock.now - Self.textfileInterval
        var failing = false
        while !Task.isCancelled {
            await gatherMetrics()
            if let textfile, ContinuousClock.now - lastWrite >= Self.textfileInterval {
                lastWrite = .now
                do {
                    // World-readable: node_exporter runs as a user of its own, and no value is a secret.
                    try AtomicFile.write(Array(metrics.render(.prometheus).utf8), to: textfile, mode: 0o644)
                    if failing { logger.notice("metrics textfile written again", metadata: ["path": "\(textfile)"]) }
                    failing = false
                } catch {
                    if !failing {
                        logger.error("metrics textfile not written", metadata: ["path": "\(textfile)", "problem": "\(error)"])
                    }
                    failing = true
                }
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    static let textfileInterval = Duration.seconds(5)

    /// Each session's status, shown by its instruments.
    func gatherMetrics() async {
        // A session a user added (USER/NAME) is not named in the metrics.
        for session in broker.all where !AccessPolicy.isUsers(session.name) {
            let status = await session.status()
            metrics.session(session.name).show(state: status.state, expiresAt: status.expiresAt)
        }
    }
}

extension ServerMetrics {
    /// Instruments for every method and error of the interfaces a server serves.
    convenience init(_ metrics: Metrics, served interfaces: [VarlinkInterface], hot: String? = nil) {
        self.init(
            metrics, methods: interfaces.flatMap { interface in interface.methods.keys.map { "\(interface.name).\($0)" } },
            errors: interfaces.flatMap { interface in interface.errors.keys.map { "\(interface.name).\($0)" } }
                + ["org.varlink.service.InternalError"], hot: hot)
    }
}
