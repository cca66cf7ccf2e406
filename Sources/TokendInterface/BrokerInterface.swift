#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Varlink

/// The io.tokend.Broker interface: its declaration (the .varlink file,
/// embedded at build time) and its error names.
public enum BrokerInterface {
    public static let name = "io.tokend.Broker"

    public static let declaration: VarlinkInterface = {
        let text = String(decoding: PackageResources.io_tokend_Broker_varlink, as: UTF8.self)
        return try! VarlinkInterface(description: text)
    }()

    public enum Error {
        public static let noSuchSession = "io.tokend.Broker.NoSuchSession"
        public static let loginRequired = "io.tokend.Broker.LoginRequired"
        public static let upstreamUnavailable = "io.tokend.Broker.UpstreamUnavailable"
        public static let invalidURL = "io.tokend.Broker.InvalidURL"
        public static let unknownFormat = "io.tokend.Broker.UnknownFormat"
        public static let rateLimited = "io.tokend.Broker.RateLimited"
        public static let tooManyConnections = "io.tokend.Broker.TooManyConnections"
        public static let requestTooLarge = "io.tokend.Broker.RequestTooLarge"
        public static let internalError = "io.tokend.Broker.InternalError"
        public static let noSuchLogin = "io.tokend.Broker.NoSuchLogin"
        public static let loginDenied = "io.tokend.Broker.LoginDenied"
        public static let loginExpired = "io.tokend.Broker.LoginExpired"
        public static let invalidCallback = "io.tokend.Broker.InvalidCallback"
        public static let loginFailed = "io.tokend.Broker.LoginFailed"
        public static let storeUnavailable = "io.tokend.Broker.StoreUnavailable"
        public static let resourceNotAllowed = "io.tokend.Broker.ResourceNotAllowed"
        public static let scopeNotAllowed = "io.tokend.Broker.ScopeNotAllowed"
        public static let targetRefused = "io.tokend.Broker.TargetRefused"
        public static let tooManyKeys = "io.tokend.Broker.TooManyKeys"
        public static let proofNotAvailable = "io.tokend.Broker.ProofNotAvailable"
        public static let keyUnavailable = "io.tokend.Broker.KeyUnavailable"
        public static let noSuchShare = "io.tokend.Broker.NoSuchShare"
        public static let shareRefused = "io.tokend.Broker.ShareRefused"
        public static let tooManyShares = "io.tokend.Broker.TooManyShares"
        public static let descriptorsPending = "io.tokend.Broker.DescriptorsPending"
        public static let flowUnavailable = "io.tokend.Broker.FlowUnavailable"
        public static let sessionExists = "io.tokend.Broker.SessionExists"
        public static let sessionRefused = "io.tokend.Broker.SessionRefused"
        public static let tooManySessions = "io.tokend.Broker.TooManySessions"
        public static let discoveryFailed = "io.tokend.Broker.DiscoveryFailed"
        public static let addressRefused = "io.tokend.Broker.AddressRefused"

        /// Every error the interface declares (a test checks this against the declaration).
        public static let all = [
            noSuchSession, loginRequired, upstreamUnavailable, invalidURL, unknownFormat, rateLimited, tooManyConnections,
            requestTooLarge, internalError, noSuchLogin, loginDenied, loginExpired, invalidCallback, loginFailed,
            storeUnavailable, resourceNotAllowed, scopeNotAllowed, targetRefused, tooManyKeys, proofNotAvailable,
            keyUnavailable, noSuchShare, shareRefused, tooManyShares, descriptorsPending, flowUnavailable,
            sessionExists, sessionRefused, tooManySessions, discoveryFailed, addressRefused,
        ]
    }

    public static func method(_ name: String) -> String { "\(Self.name).\(name)" }

    /// Where tokend listens when nothing else is said: the system socket.
    public static let defaultSocket = "/run/tokend/io.tokend.Broker"

    /// How every client finds tokend: `explicit`, else $TOKEND_SOCKET, else the system socket, else
    /// (no system socket) a per-user tokend's at $XDG_RUNTIME_DIR/tokend/io.tokend.Broker when it exists.
    public static func socketPath(_ explicit: String? = nil) -> String {
        let environment = ProcessInfo.processInfo.environment
        if let path = explicit ?? environment["TOKEND_SOCKET"] { return path }
        if !FileManager.default.fileExists(atPath: defaultSocket), let user = userSocket(environment),
            FileManager.default.fileExists(atPath: user)
        {
            return user
        }
        return defaultSocket
    }

    /// A per-user tokend's socket (`systemctl --user`): $XDG_RUNTIME_DIR/tokend/io.tokend.Broker.
    public static func userSocket(_ environment: [String: String]) -> String? {
        guard let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") else { return nil }
        return runtime + "/tokend/io.tokend.Broker"
    }
}
