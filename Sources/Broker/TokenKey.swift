/// What a caller asks a session's grant for: a resource (RFC 8707) and a
/// scope (RFC 6749 §6, a subset of the session's). Neither: the session's own token.
public struct TokenKey: Hashable, Sendable, CustomStringConvertible {
    public let resource: String?
    /// Space-separated, sorted, without repeats: "b a a" and "a b" are one key.
    public let scope: String?

    public init(resource: String? = nil, scope: String? = nil) {
        self.resource = resource
        self.scope = scope.flatMap { Self.normalized($0) }
    }

    /// The session's own token.
    public static let session = TokenKey()

    public var isSession: Bool { resource == nil && scope == nil }

    public var description: String {
        [resource.map { "resource \($0)" }, scope.map { "scope \"\($0)\"" }].compactMap { $0 }.joined(separator: ", ")
    }

    static func normalized(_ scope: String) -> String? {
        let tokens = Set(scope.split(separator: " ").map(String.init))
        return tokens.isEmpty ? nil : tokens.sorted().joined(separator: " ")
    }

    static func tokens(_ scope: String?) -> Set<String> {
        Set((scope ?? "").split(separator: " ").map(String.init))
    }
}

/// What a session's keys may be, and how many it keeps.
public struct KeyPolicy: Sendable, Equatable {
    public enum Narrowing: String, Sendable {
        /// Learn it from the provider (see SessionActor.refreshTarget).
        case auto
        /// A refresh naming one resource or a narrower scope narrows the refresh token.
        case narrows
        /// Refresh tokens keep the whole grant whatever a refresh asks for (Entra ID).
        case keepsWide = "keeps-wide"
    }

    /// The session's resources, in configuration order.
    public var resources: [String]
    /// The session's configured scope (nil: what the provider granted).
    public var scope: String?
    public var narrowing: Narrowing
    /// Keys held at once; the least recently used goes first.
    public var maximumKeys: Int
    /// Seconds a key may go unused before it is forgotten.
    public var idleLifetime: Int
    /// The resources web pages may ask for (web-resources): the audience rule and GetProof hold pages to them.
    public var webResources: [String] = []
    /// URLs besides the resources GetProof signs for (proof-targets).
    public var proofTargets: [String] = []
    /// Whether resource-access limits who may have some resource's tokens.
    public var restrictsResources = false
    /// The `aud` values each resource's tokens carry besides its URI (resource-audiences).
    public var audiences: [String: [String]] = [:]
    /// Keys one person may have made and held at once.
    public var keysPerPerson = 16
    /// New keys one person may make: a burst of `keysPerPerson`, then this many a minute.
    public var newKeysPerMinute = 4.0

    public init(
        resources: [String] = [], scope: String? = nil, narrowing: Narrowing = .auto, maximumKeys: Int = 64,
        idleLifetime: Int = 86_400
    ) {
        self.resources = resources
        self.scope = scope
        self.narrowing = narrowing
        self.maximumKeys = maximumKeys
        self.idleLifetime = idleLifetime
    }
}
