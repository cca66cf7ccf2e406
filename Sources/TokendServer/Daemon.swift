import Broker
import Config
import CookieJar
import Fleet
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import Loopback
import TokendMetrics
import OAuth
import Secrets
import ServiceLifecycle
import StateStore
import Synchronization
import Systemd
import TokendInterface
import UnixSignals
import Varlink
import UnixServer

#if canImport(Glibc)
import Glibc
#endif

/// tokend as one service: sessions, the Varlink socket, systemd notification,
/// the watchdog, reload on SIGHUP and graceful shutdown.
public final class Daemon: Service, CustomStringConvertible {
    public static let version = Release.version

    let configPath: String
    let environment: [String: String]
    let store: StateStore
    /// Held for the process's life: no second tokend on this state.
    let owner: OwnerLock
    let broker: Broker
    let logger: Logger
    let testHooks: Bool
    /// The configuration in force (sessions may change on reload).
    let configuration: Mutex<Configuration>
    let reloadProblem = Mutex<String?>(nil)
    let access: Mutex<AccessPolicy>
    /// Read once at start: refuses cookies whose Domain is a public suffix.
    let cookiePolicy: CookiePolicy
    /// When answers the server loop gives again may no longer hold (see ReuseStamp).
    let reuse = ReuseStamp()
    /// The one registry GetMetrics, the metrics textfile and /metrics render.
    let metrics: Metrics
    /// Users' shares, served on the server's loop (Shares).
    let shares: Shares
    /// Closes what callers passed and tokend does not keep, off the loop and the pool.
    let closer = DescriptorCloser()
    /// The sessions users added (AddSession), kept in the state directory.
    let userSessions: UserSessions

    public var description: String { "tokend" }

    /// Builds every session from the configuration. Throws a description of
    /// what is wrong (unreadable secret, state directory not writable).
    public init(configuration: Configuration, configPath: String, environment: [String: String], logger: Logger) throws {
        self.configPath = configPath
        self.environment = environment
        self.logger = logger
        #if TOKEND_TEST_HOOKS
        self.testHooks = environment["TOKEND_TEST_HOOKS"] == "1"
        #else
        self.testHooks = false
        #endif
        self.configuration = Mutex(configuration)
        let metrics = Metrics()
        self.metrics = metrics
        let key: StateKey?
        do {
            key = try StateKey.load(environment: environment, keyFile: configuration.daemon.stateKeyFile)
        } catch {
            throw DaemonSetupError(error.description)
        }
        if let key {
            logger.info("state files are sealed (AES-256-GCM)", metadata: ["key": "\(key.source)"])
        } else {
            logger.notice(
                "state files are not encrypted at rest",
                metadata: ["fix": "tokend --generate-state-key, then LoadCredentialEncrypted=tokend.state-key or daemon.state-key-file"])
        }
        store = try StateStore(directory: configuration.daemon.stateDirectory, key: key, metrics: metrics)
        owner = try OwnerLock.acquire(directory: store.directory)
        cookiePolicy = CookiePolicy(publicSuffixes: Self.loadPublicSuffixes(logger: logger))
        userSessions = try UserSessions(store: store)
        access = Mutex(try Self.policy(configuration, users: userSessions.all))
        var sessions: [SessionActor] = []
        for settings in configuration.sessions {
            sessions.append(
                try Self.makeSession(
                    settings, store: store, cookiePolicy: cookiePolicy, hostID: configuration.daemon.hostID,
                    reuse: reuse, logger: logger, checkpoint: Self.crashPoint(environment, hooks: testHooks),
                    tpm: configuration.daemon.tpmInUse))
        }
        for record in userSessions.all {
            sessions.append(
                try Self.makeSession(
                    record.settings, store: store, cookiePolicy: cookiePolicy, hostID: nil, reuse: reuse, logger: logger,
                    tpm: configuration.daemon.tpmInUse, user: record, outbound: configuration.userSessions))
        }
        broker = Broker(sessions: sessions)
        shares = Shares(
            broker: broker, logger: logger, stateDirectory: store.directory, closer: closer,
            checkpoint: Self.crashPoint(environment, hooks: testHooks))
    }

    /// The access policy of `configuration`, with the sessions users added.
    static func policy(_ configuration: Configuration, users: [UserSessionRecord]) throws -> AccessPolicy {
        var policy = try AccessPolicy(configuration.access, sessions: configuration.sessions)
        policy.users = try UserSessionRules(configuration.userSessions, records: users)
        return policy
    }

    /// `user`: a session a user added, with its own state file name; its
    /// instruments stay out of the exported metrics, which do not name it, and
    /// every request it makes goes through the outbound checks of `outbound`.
    static func makeSession(
        _ settings: SessionSettings, store: StateStore, cookiePolicy: CookiePolicy, hostID: String?, reuse: ReuseStamp,
        logger: Logger, checkpoint: (@Sendable (String) -> Void)? = nil, tpm: String? = nil,
        user: UserSessionRecord? = nil, outbound: UserSessionSettings? = nil
    ) throws -> SessionActor {
        let unexported = Metrics()
        let metrics = user == nil ? store.metrics : unexported
        let file = user.map { store.file(for: settings.name, fileName: $0.fileName, metrics: unexported) }
            ?? store.file(for: settings.name)
        do {
            if try file.prepare() == .migrated {
                logger.notice("state file sealed with the state key", metadata: ["session": "\(settings.name)"])
            }
        } catch where error.refusesStart {
            throw DaemonSetupError(error.description)
        } catch {
            // A corrupt file: the session reports it (and moves it aside) when it starts.
        }
        let tokenFiles = try settings.tokenFiles.map { entry in
            guard let group = entry.group else { return TokenFile(path: entry.path, group: nil, mode: entry.mode) }
            guard let gid = try? AccessPolicy.gid(group) else {
                throw DaemonSetupError("session \(settings.name): token-files: no group named \"\(group)\"")
            }
            return TokenFile(path: entry.path, group: gid, mode: entry.mode)
        }
        var sessionCookies = cookiePolicy
        sessionCookies.accept = AcceptPolicy(rawValue: settings.acceptCookies) ?? .always
        return SessionActor(
            name: settings.name, policy: settings.policy,
            endpoint: try settings.endpoint(
                metrics: ProviderMetrics(session: settings.name, in: metrics), outbound: user == nil ? nil : outbound?.outbound),
            file: file, logger: logger, cookiePolicy: sessionCookies, webOrigins: settings.webOrigins,
            gitHosts: settings.gitHosts, gitUsername: settings.gitUsername, redirectURI: settings.redirectURI,
            keys: settings.keyPolicy, tokenFiles: tokenFiles,
            checkpoint: checkpoint,
            shared: try sharedStore(
                settings, file: file, hostID: hostID, logger: logger,
                metrics: FleetMetrics(session: settings.name, in: metrics)),
            dpop: try settings.dpopSettings(tpm: tpm),
            tokenChanged: { reuse.changed() })
    }

    /// The fleet's store for a session with `shared-store`; nil for a local session.
    static func sharedStore(
        _ settings: SessionSettings, file: SessionFile, hostID: String?, logger: Logger, metrics: @autoclosure () -> FleetMetrics
    ) throws -> (any SharedStore)? {
        guard let url = settings.sharedStore else { return nil }
        let prefix = "session \(settings.name): shared-store"
        guard file.seals else {
            throw DaemonSetupError(
                "\(prefix) needs a state key (the database only ever holds sealed records): create one with "
                    + "`tokend --generate-state-key` and give every host of the fleet the same key")
        }
        let address: StoreAddress
        do {
            address = try StoreAddress(url)
        } catch {
            throw DaemonSetupError("\(prefix): \(error.description)")
        }
        var password: String?
        if let path = settings.sharedStorePasswordFile {
            let data = try settings.readCredential(CredentialFile(key: "shared-store-password-file", path: path))
            password = String(decoding: data, as: UTF8.self).trimming(.newlines)
        }
        let host = hostID ?? ProcessInfo.processInfo.hostName
        logger.info("session shared by a fleet", metadata: ["session": "\(settings.name)", "store": "\(address)", "host": "\(host)"])
        return PostgresStore(
            session: settings.name, address: address, password: password, codec: file, hostID: host,
            lockWait: .seconds(settings.upstreamTimeout + 20), leaseTime: .seconds(settings.upstreamTimeout + 5),
            refreshMargin: .seconds(settings.refreshMargin), logger: logger, metrics: metrics())
    }

    /// Debian's copy of the Public Suffix List (package publicsuffix); without
    /// it only single-label domains count as public suffixes.
    static func loadPublicSuffixes(logger: Logger) -> PublicSuffixList {
        do {
            return try PublicSuffixList(contentsOfFile: PublicSuffixList.debianPath)
        } catch {
            logger.warning(
                "public suffix list unreadable; only single-label cookie domains are refused",
                metadata: ["path": "\(PublicSuffixList.debianPath)", "fix": "apt install publicsuffix"])
            return .implicitOnly
        }
    }

    /// Serves until SIGTERM or SIGINT. Throws `DaemonFailure` when the socket
    /// cannot be set up or the server's loop stops on an error: a tokend that
    /// serves nobody ends (non-zero), so that systemd restarts it or says why.
    public func run() async throws {
        await broker.startAll()
        let daemon = configuration.withLock { $0.daemon }
        let stored = ListenFDs.stored()  // shares kept in systemd's file descriptor store
        let inherited = ListenFDs.take(named: "varlink")
        let source: ListenSource = inherited.map { .fileDescriptor($0) } ?? .path(daemon.socket, mode: daemon.socketMode)
        let server = makeServer(source: source)
        let logger = self.logger
        // Watchdog pings start only after READY=1.
        let (readiness, becameReady) = AsyncStream<Void>.makeStream()
        let failure: DaemonFailure? = await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                try await server.run {
                    self.shares.restore(stored)
                    let status = await self.statusLine()
                    Notifier.ready(status: status)
                    becameReady.yield()
                    becameReady.finish()
                    logger.notice(
                        "started",
                        metadata: [
                            "socket": "\(inherited.map { "fd \($0) (socket activation)" } ?? daemon.socket)",
                            "status": "\(status)",
                        ])
                }
                // The server returns only when cancelled; before that, it has stopped serving.
                if !Task.isCancelled { throw DaemonFailure("the server's loop stopped", kind: .serverFailed) }
                return false
            }
            group.addTask {
                for await _ in readiness { break }
                await self.watchdog(server: server)
                return false
            }
            group.addTask {
                await self.reloadOnHangup(server: server)
                return false
            }
            group.addTask {
                await self.publishStatus()
                return false
            }
            group.addTask {
                await self.exportMetrics()
                return false
            }
            // SIGTERM/SIGINT: the one task that ends with true.
            group.addTask {
                try? await gracefulShutdown()
                return true
            }
            #if TOKEND_TEST_HOOKS
            if testHooks {
                group.addTask {
                    await self.hangOnSignal(server: server)
                    return false
                }
            }
            #endif
            // Serve until asked to stop or until the server fails, whichever comes first.
            var failure: DaemonFailure?
            do {
                while let asked = try await group.next(), !asked {}
            } catch {
                failure = DaemonFailure(error)
                logger.critical("not serving: stopping", metadata: ["problem": "\(error)"])
                Notifier.status("failed: \(error)")
            }
            Notifier.stopping(status: "stopping: finishing refreshes in flight")
            logger.notice("stopping")
            // In-flight refreshes finish and are persisted; subscribers are told.
            await broker.stopAll()
            group.cancelAll()
            return failure
        }
        if let failure { throw failure }
        logger.notice("stopped")
    }

    func makeServer(source: ListenSource) -> VarlinkServer {
        let logger = self.logger
        // A token's reply is made once, for the fast path and the service alike.
        let tokenReplies = TokenReplies()
        let service = VarlinkService(
            info: ServiceInfo(vendor: "tokend", product: "tokend", version: Self.version, url: "https://tokend.invalid/"),
            implementations: [
                brokerImplementation(
                    broker, policy: { self.access.withLock { $0 } },
                    limiter: ForcedRefreshLimiter(perMinute: configuration.withLock { $0.daemon.forcedRefreshesPerMinute }),
                    tokenReplies: tokenReplies, metrics: metrics, logger: logger, shares: shares,
                    userSessionMethods: userSessionMethods(), beforeLogin: { try await self.registerAgainIfForgotten($0) })
            ],
            internalError: VarlinkError(BrokerInterface.Error.internalError),
            onUnexpectedError: { method, error in
                logger.error("call failed unexpectedly", metadata: ["method": "\(method)", "error": "\(type(of: error))"])
            })
        var limits = VarlinkServer.Limits()
        let settings = configuration.withLock { $0.daemon }
        limits.maximumConnections = settings.maxConnections
        limits.maximumConnectionsPerUser = settings.maxConnectionsPerUser ?? max(1, settings.maxConnections / 2)
        limits.idleTimeout = .seconds(Int64(settings.idleTimeout))
        limits.frameTimeout = .seconds(Int64(settings.frameTimeout))
        limits.writeTimeout = .seconds(Int64(settings.writeTimeout))
        let server = VarlinkServer(
            service: service, source: source, limits: limits, logger: logger,
            oversizedFrameError: VarlinkError(BrokerInterface.Error.requestTooLarge, ["limit": .int(limits.maximumFrameLength)]),
            overloadedError: VarlinkError(
                BrokerInterface.Error.tooManyConnections, ["limit": .int(limits.maximumConnections)]),
            fastPath: FastGetToken(broker: broker, policy: { self.access.withLock { $0 } }, tokenReplies: tokenReplies)
                .handler, fastPathStamp: { [reuse] in reuse.value },
            admission: { peer in self.access.withLock { $0 }.standing(of: peer) },
            subordinateIDs: loadSubordinateIDs(),
            metrics: ServerMetrics(
                metrics, served: [VarlinkInterface.service, BrokerInterface.declaration], hot: FastGetToken.getToken),
            http: settings.metricsListen.map { metricsListener($0) },
            descriptors: VarlinkServer.Descriptors(
                method: BrokerInterface.method("ExpectDescriptor"), drain: Self.drainsDescriptors(environment),
                closer: closer,
                pendingError: { pending, limit in
                    VarlinkError(BrokerInterface.Error.descriptorsPending, ["pending": .int(pending), "limit": .int(limit)])
                }))
        shares.attach(server)
        return server
    }

    /// TOKEND_DESCRIPTORS=drain: take descriptors as on a kernel without
    /// SO_PASSRIGHTS (before 6.16, Debian bookworm's own), where the kernel
    /// could refuse them — for trying that path on a newer kernel.
    static func drainsDescriptors(_ environment: [String: String]) -> Bool {
        environment["TOKEND_DESCRIPTORS"] == "drain"
    }

    /// Test builds with TOKEND_TEST_HOOKS=1: the kill -9 campaign's crash point.
    static func crashPoint(_ environment: [String: String], hooks: Bool) -> (@Sendable (String) -> Void)? {
        #if TOKEND_TEST_HOOKS
        return hooks ? CrashPoint(environment: environment)?.checkpoint : nil
        #else
        return nil
        #endif
    }

    /// "2 sessions: 1 active, 1 login required", plus a failed reload.
    func statusLine() async -> String {
        var counts: [String: Int] = [:]
        let sessions = broker.all
        for session in sessions { counts[await session.status().state, default: 0] += 1 }
        let order = ["active", "refreshing", "backingOff", "loginRequired", "loggedOut"]
        let words = ["loginRequired": "login required", "loggedOut": "logged out", "backingOff": "backing off"]
        let parts = order.compactMap { state in counts[state].map { "\($0) \(words[state] ?? state)" } }
        var line = "\(sessions.count) session\(sessions.count == 1 ? "" : "s"): \(parts.joined(separator: ", "))"
        if let problem = reloadProblem.withLock({ $0 }) { line += "; last reload failed, old configuration kept: \(problem)" }
        return line
    }

    /// Keeps STATUS= current as sessions change state.
    func publishStatus() async {
        var last = ""
        while !Task.isCancelled {
            let line = await statusLine()
            if line != last {
                Notifier.status(line)
                last = line
            }
            try? await Task.sleep(for: .seconds(2))
        }
    }
}

extension SessionSettings {
    var policy: RefreshPolicy {
        RefreshPolicy(refreshMargin: refreshMargin, minValid: minValid, defaultLifetime: defaultLifetime)
    }

    /// The session's endpoint client, from its settings and the secret and key
    /// files they name; an error names what is unusable (`tokend --check-config` asks too).
    /// The provider's answers are counted in `metrics`.
    public func endpoint(metrics: ProviderMetrics? = nil, outbound: OutboundPolicy? = nil) throws -> HTTPTokenEndpoint {
        try checkCredentialModes()
        var secret: Secret?
        if let clientSecretFile {
            let data = try readCredential(CredentialFile(key: "client-secret-file", path: clientSecretFile))
            secret = Secret(String(decoding: data, as: UTF8.self).trimming(.whitespacesAndNewlines))
        } else if let clientSecretValue {
            secret = Secret(clientSecretValue)
        }
        var key: ClientKey?
        if let clientKeyFile {
            let data = try readCredential(CredentialFile(key: "client-key-file", path: clientKeyFile))
            do {
                key = try ClientKey(pem: String(decoding: data, as: UTF8.self), keyID: clientKeyID)
            } catch {
                throw DaemonSetupError("session \(name): client key \(error)")
            }
        }
        guard let auth = OAuth.ClientAuthentication(rawValue: clientAuth.rawValue) else {
            throw DaemonSetupError("session \(name): client-auth \(clientAuth.rawValue) is not supported")
        }
        let credentials = ClientCredentials(clientID: clientID, secret: secret, authentication: auth, key: key)
        if let problem = credentials.unusable {
            throw DaemonSetupError("session \(name): \(problem) (\(clientSecretFile ?? clientKeyFile ?? "no file"))")
        }
        if pushedAuthorization, issuer == nil {
            throw DaemonSetupError(
                "session \(name): pushed-authorization = true needs an issuer: the pushed authorization request endpoint comes from its discovery document")
        }
        var endpoints = ProviderEndpoints(
            issuer: issuer, token: tokenEndpoint, revocation: revocationEndpoint, authorization: authorizationEndpoint,
            deviceAuthorization: deviceAuthorizationEndpoint)
        endpoints.introspection = introspectionEndpoint
        return HTTPTokenEndpoint(
            endpoints: endpoints,
            credentials: credentials,
            scope: scope, timeout: .seconds(upstreamTimeout), pushesAuthorization: pushedAuthorization,
            redirectURI: redirectURI, resources: resources, metrics: metrics, outbound: outbound)
    }
}

/// Why tokend stops serving: its description names the socket and the
/// reason; `kind` decides tokend's exit status (tokend(8)).
public struct DaemonFailure: Error, CustomStringConvertible {
    public enum Kind: Sendable {
        /// The socket cannot be created, bound or listened on.
        case socketUnusable
        /// Another program (another tokend, say) listens at the socket.
        case socketInUse
        /// The server's loop stopped on an error while serving.
        case serverFailed
    }
    public let description: String
    public let kind: Kind

    init(_ description: String, kind: Kind) {
        self.description = description
        self.kind = kind
    }

    init(_ error: Error) {
        description = "\(error)"
        if let known = error as? DaemonFailure {
            kind = known.kind
        } else if let setup = error as? SocketSetupError {
            kind = setup.errno == EADDRINUSE ? .socketInUse : .socketUnusable
        } else {
            kind = .serverFailed
        }
    }
}

public struct DaemonSetupError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
