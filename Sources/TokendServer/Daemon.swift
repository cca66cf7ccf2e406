import Broker
import Config
import Foundation
import Logging
import NIOPosix
import OAuth
import Secrets
import ServiceLifecycle
import StateStore
import TokendInterface
import Varlink
import VarlinkNIO

/// tokend as one service: sessions, the Varlink socket, graceful shutdown.
public struct Daemon: Service, CustomStringConvertible {
    let configuration: Configuration
    let broker: Broker
    let server: VarlinkServer
    let logger: Logger

    public static let version = "0.1.0"

    public var description: String { "tokend" }

    /// Builds every session from the configuration. Throws a description of
    /// what is wrong (unreadable secret, state directory not writable).
    public init(configuration: Configuration, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
        let store = try StateStore(directory: configuration.daemon.stateDirectory)
        var sessions: [SessionActor] = []
        for settings in configuration.sessions {
            sessions.append(
                SessionActor(
                    name: settings.name, policy: settings.policy, endpoint: try settings.endpoint(),
                    file: store.file(for: settings.name), logger: logger))
        }
        broker = Broker(sessions: sessions)
        let service = VarlinkService(
            info: ServiceInfo(vendor: "tokend", product: "tokend", version: Self.version, url: "https://tokend.invalid/"),
            implementations: [brokerImplementation(broker, logger: logger)],
            internalError: VarlinkError(BrokerInterface.Error.internalError),
            onUnexpectedError: { method, error in
                logger.error("call failed unexpectedly", metadata: ["method": "\(method)", "error": "\(type(of: error))"])
            })
        server = VarlinkServer(
            service: service,
            source: .path(configuration.daemon.socket, mode: configuration.daemon.socketMode),
            logger: logger,
            oversizedFrameError: VarlinkError(BrokerInterface.Error.requestTooLarge, ["limit": .int(1 << 20)]))
    }

    public func run() async throws {
        await broker.startAll()
        let logger = self.logger
        let socket = configuration.daemon.socket
        let count = configuration.sessions.count
        await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await server.run {
                    logger.notice("started", metadata: ["socket": "\(socket)", "sessions": "\(count)"])
                }
            }
            // Serve until SIGTERM/SIGINT (or the server fails).
            try? await gracefulShutdown()
            logger.notice("stopping")
            // In-flight refreshes finish and are persisted; subscribers are told.
            await broker.stopAll()
            group.cancelAll()
        }
        logger.notice("stopped")
    }
}

extension SessionSettings {
    var policy: RefreshPolicy {
        RefreshPolicy(refreshMargin: refreshMargin, minValid: minValid, defaultLifetime: defaultLifetime)
    }

    func endpoint() throws -> HTTPTokenEndpoint {
        var secret: Secret?
        if let clientSecretFile {
            guard let data = FileManager.default.contents(atPath: clientSecretFile) else {
                throw DaemonSetupError("session \(name): client secret file \(clientSecretFile) cannot be read")
            }
            secret = Secret(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        let auth = OAuth.ClientAuthentication(rawValue: clientAuth.rawValue)!
        return HTTPTokenEndpoint(
            tokenURL: tokenEndpoint, revocationURL: revocationEndpoint,
            credentials: ClientCredentials(clientID: clientID, secret: secret, authentication: auth),
            scope: scope, timeout: .seconds(upstreamTimeout))
    }
}

public struct DaemonSetupError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
