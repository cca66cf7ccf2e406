import Secrets

/// A session's token for one (resource, scope) key other than the session's
/// own (RFC 8707 resource indicators, RFC 6749 §6 narrower scope). Its
/// generation counts its own refreshes.
public struct KeyedToken: Sendable, Equatable {
    /// The key: nil for "not named".
    public var resource: String?
    public var scope: String?
    public var accessToken: Secret
    public var tokenType: String
    /// The scope the provider said it granted, when it said.
    public var grantedScope: String?
    /// Unix seconds.
    public var expiresAt: Int
    public var generation: Int
    public var lastRefreshAt: Int
    /// When a caller last asked for this key (Unix seconds): keys nobody asks
    /// for are forgotten.
    public var lastUsedAt: Int
    /// The session's resources the provider confirmed this token covers (its
    /// JWT `aud` or introspection); nil when it did not say: every resource of the grant.
    public var audience: [String]?

    public init(
        resource: String?, scope: String?, accessToken: Secret, tokenType: String, grantedScope: String?, expiresAt: Int,
        generation: Int, lastRefreshAt: Int, lastUsedAt: Int
    ) {
        self.resource = resource
        self.scope = scope
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.grantedScope = grantedScope
        self.expiresAt = expiresAt
        self.generation = generation
        self.lastRefreshAt = lastRefreshAt
        self.lastUsedAt = lastUsedAt
    }
}

/// The on-disk form of a keyed token.
struct StoredKeyedToken: Codable {
    var resource: String?
    var scope: String?
    var accessToken: String
    var tokenType: String
    var grantedScope: String?
    var expiresAt: Int
    var generation: Int
    var lastRefreshAt: Int
    var lastUsedAt: Int
    var audience: [String]?

    init(_ token: KeyedToken) {
        resource = token.resource
        scope = token.scope
        accessToken = token.accessToken.reveal()
        tokenType = token.tokenType
        grantedScope = token.grantedScope
        expiresAt = token.expiresAt
        generation = token.generation
        lastRefreshAt = token.lastRefreshAt
        lastUsedAt = token.lastUsedAt
        audience = token.audience
    }

    /// Loaded within what tokend writes (see SessionRecord's lifetimes).
    var token: KeyedToken {
        let issuedAt = SessionRecord.clampedTime(lastRefreshAt)
        let expiresAt = SessionRecord.storedExpiry(expiresAt, issuedAt: issuedAt).0 ?? issuedAt
        var token = KeyedToken(
            resource: resource, scope: scope, accessToken: Secret(accessToken), tokenType: tokenType,
            grantedScope: grantedScope, expiresAt: expiresAt, generation: SessionRecord.clampedCounter(generation),
            lastRefreshAt: issuedAt, lastUsedAt: SessionRecord.clampedTime(lastUsedAt))
        token.audience = audience
        return token
    }
}
