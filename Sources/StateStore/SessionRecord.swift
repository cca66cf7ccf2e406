import CookieJar
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Secrets

/// Everything tokend keeps about one session across restarts.
public struct SessionRecord: Sendable, Equatable {
    public enum Phase: String, Sendable, Codable {
        /// Holds a refresh token.
        case active
        /// The server refused the grant (or there never was one): a new login is needed.
        case loginRequired
        /// Logged out on purpose.
        case loggedOut
    }

    public var phase: Phase
    /// Why the session is not active, for status and errors.
    public var reason: String?
    public var refreshToken: Secret?
    public var accessToken: Secret?
    public var tokenType: String?
    public var scope: String?
    /// Unix seconds.
    public var expiresAt: Int?
    /// Where expiresAt came from: "expires_in", "jwt" or "default".
    public var expirySource: String?
    /// +1 on every successful refresh; never goes back, also across logins.
    public var generation: Int
    public var lastRefreshAt: Int?
    /// Set, durably, before a refresh request is sent; cleared with its result.
    /// Found set at start: the previous process died mid-refresh.
    public var refreshStartedAt: Int?
    /// The session's cookie jar and its version (persistent and session cookies alike).
    public var cookies: [Cookie]
    public var cookieVersion: Int
    /// Who logged in (OpenID Connect `sub`, `preferred_username`, `email`).
    public var subject: String?
    public var username: String?
    public var email: String?
    /// The last good discovery document (JSON), reused when the issuer is
    /// unreachable at the next start. Kept across logins and logouts.
    public var providerMetadata: String?
    /// In a fleet's shared record: the row version it was sealed for, so a
    /// database writer cannot move an old sealed record to a newer version.
    public var fleetVersion: Int64?
    /// Why a lifetime in this record is not what its source said (clamped or
    /// ignored), for the session's status. Never written to disk.
    public var lifetimeNote: String?
    /// Tokens for other (resource, scope) keys, from the same grant.
    public var keyedTokens: [KeyedToken] = []
    /// How keyed tokens are refreshed ("shared-audience" or "per-resource"),
    /// once known, and why: learnt from the provider, kept across restarts.
    public var strategy: String?
    public var strategyReason: String?
    /// The resources the login asked the provider for (RFC 8707): the only
    /// ones a refresh may name, since asking for more is refused and, at some
    /// providers, taken as narrowing. Empty for a grant made without resources.
    public var grantResources: [String] = []
    /// The grant's resources are what the configuration listed when a refresh
    /// token was handed in (Login): the provider may have granted fewer.
    public var grantResourcesAssumed = false
    /// The DPoP key the grant is bound to (dpop = true), from the login that made the grant.
    public var dpopKey: DPoPKeyRecord?
    /// The session's resources the provider confirmed the current access
    /// token covers (its JWT `aud` or introspection); nil when it did not
    /// say, and the token is taken to cover every resource of the grant.
    public var audience: [String]?

    public init(
        phase: Phase, reason: String? = nil, refreshToken: Secret? = nil, accessToken: Secret? = nil,
        tokenType: String? = nil, scope: String? = nil, expiresAt: Int? = nil, expirySource: String? = nil,
        generation: Int = 0, lastRefreshAt: Int? = nil, refreshStartedAt: Int? = nil, cookies: [Cookie] = [],
        cookieVersion: Int = 0, subject: String? = nil, username: String? = nil, email: String? = nil
    ) {
        self.phase = phase
        self.reason = reason
        self.refreshToken = refreshToken
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.scope = scope
        self.expiresAt = expiresAt
        self.expirySource = expirySource
        self.generation = generation
        self.lastRefreshAt = lastRefreshAt
        self.refreshStartedAt = refreshStartedAt
        self.cookies = cookies
        self.cookieVersion = cookieVersion
        self.subject = subject
        self.username = username
        self.email = email
    }
}

/// The on-disk form of a record; the only place secrets become plain strings.
struct StoredRecord: Codable {
    var phase: SessionRecord.Phase
    var reason: String?
    var refreshToken: String?
    var accessToken: String?
    var tokenType: String?
    var scope: String?
    var expiresAt: Int?
    var expirySource: String?
    var generation: Int
    var lastRefreshAt: Int?
    var refreshStartedAt: Int?
    /// Absent in files written before cookies existed.
    var cookies: [Cookie]?
    var cookieVersion: Int?
    var subject: String?
    var username: String?
    var email: String?
    var providerMetadata: String?
    var fleetVersion: Int64?
    /// Absent in files written before keyed tokens existed.
    var keyed: [StoredKeyedToken]?
    var strategy: String?
    var strategyReason: String?
    /// Absent in files written before resources existed: a grant made without any.
    var grantResources: [String]?
    var grantResourcesAssumed: Bool?
    /// Absent for sessions without DPoP.
    var dpopKey: StoredDPoPKey?
    var audience: [String]?

    init(_ record: SessionRecord) {
        phase = record.phase
        reason = record.reason
        refreshToken = record.refreshToken?.reveal()
        accessToken = record.accessToken?.reveal()
        tokenType = record.tokenType
        scope = record.scope
        expiresAt = record.expiresAt
        expirySource = record.expirySource
        generation = record.generation
        lastRefreshAt = record.lastRefreshAt
        refreshStartedAt = record.refreshStartedAt
        cookies = record.cookies
        cookieVersion = record.cookieVersion
        subject = record.subject
        username = record.username
        email = record.email
        providerMetadata = record.providerMetadata
        fleetVersion = record.fleetVersion
        keyed = record.keyedTokens.isEmpty ? nil : record.keyedTokens.map(StoredKeyedToken.init)
        strategy = record.strategy
        strategyReason = record.strategyReason
        grantResources = record.grantResources.isEmpty ? nil : record.grantResources
        grantResourcesAssumed = record.grantResourcesAssumed ? true : nil
        dpopKey = record.dpopKey.map(StoredDPoPKey.init)
        audience = record.audience
    }

    var record: SessionRecord {
        // Times come back within what tokend would have written: a file from a
        // build that took an absurd lifetime (or edited by hand) loads, clamped.
        let lastRefreshAt = lastRefreshAt.map(SessionRecord.clampedTime)
        let (expiresAt, note) = SessionRecord.storedExpiry(
            expiresAt, issuedAt: lastRefreshAt ?? Int(Date().timeIntervalSince1970))
        var record = SessionRecord(
            phase: phase, reason: reason, refreshToken: refreshToken.map(Secret.init),
            accessToken: accessToken.map(Secret.init), tokenType: tokenType, scope: scope, expiresAt: expiresAt,
            expirySource: expirySource, generation: SessionRecord.clampedCounter(generation),
            lastRefreshAt: lastRefreshAt, refreshStartedAt: refreshStartedAt.map(SessionRecord.clampedTime),
            cookies: cookies ?? [], cookieVersion: SessionRecord.clampedCounter(cookieVersion ?? 0), subject: subject,
            username: username, email: email)
        record.providerMetadata = providerMetadata
        record.fleetVersion = fleetVersion
        record.keyedTokens = (keyed ?? []).map(\.token)
        record.strategy = strategy
        record.strategyReason = strategyReason
        record.grantResources = grantResources ?? []
        record.grantResourcesAssumed = grantResourcesAssumed ?? false
        record.dpopKey = dpopKey?.key
        record.audience = audience
        record.lifetimeNote = note
        return record
    }
}

/// The versioned envelope. `encryption` is "none" (the record in `record`)
/// or "aes-256-gcm" (the record's JSON sealed in `sealed`: base64 of nonce,
/// ciphertext and tag, with format, version and session name as
/// authenticated data).
struct Envelope: Codable {
    static let format = "tokend-session"
    static let currentVersion = 1

    var format: String
    var version: Int
    var session: String
    var encryption: String
    var record: StoredRecord?
    var sealed: String?
}

enum SealedRecord {
    static let algorithm = "aes-256-gcm"
}

// MARK: Lifetimes from outside

/// A provider's `expires_in`, a JWT's `exp` and a stored `expiresAt` are
/// outside numbers: tokend believes at most `maximumLifetime`, so that no
/// sum or conversion made from them can overflow (a crash here would be
/// durable: the value is stored before the next call reads it).
extension SessionRecord {
    /// 366 days. Access tokens live minutes to hours (a day at most with the
    /// providers tokend knows); a longer claim is a provider's bug or an
    /// attack, and refreshing once a year costs nothing. Any time up to a year
    /// ahead, in nanoseconds, fits an Int64 many times over.
    public static let maximumLifetime = 366 * 86_400
    /// 9999-12-31T23:59:59Z: no time tokend keeps lies outside 0...latestTime.
    public static let latestTime = 253_402_300_799

    /// 2^62. Counters tokend keeps (generation, the cookie version) grow by
    /// one per refresh or cookie change and never come near it; a stored
    /// value above it was not written by tokend and, near Int.max, would trap
    /// at the next `+= 1` (at every start, since the value is persisted).
    public static let maximumCounter = 1 << 62
    /// Where such a counter is put: far enough below `maximumCounter` that
    /// it grows for 2^62 more steps before it could be clamped again (so a
    /// loaded counter never goes back), and still exact as a JSON double.
    public static let clampedCounterValue = 1 << 53

    /// A stored counter: kept when within 0...maximumCounter, else clamped
    /// (negative to 0, too large to clampedCounterValue). Clamped rather than
    /// moved aside as corrupt: that would cost the refresh token for a value
    /// that only orders events, and the clamped value still grows.
    public static func clampedCounter(_ counter: Int) -> Int {
        if counter < 0 { return 0 }
        return counter > maximumCounter ? clampedCounterValue : counter
    }

    /// `time` within 0...latestTime.
    public static func clampedTime(_ time: Int) -> Int {
        min(max(time, 0), latestTime)
    }

    /// When a token issued at `issuedAt` with `lifetime` seconds expires: a
    /// lifetime above `maximumLifetime` counts as that, with a note saying so;
    /// one of zero or less is no lifetime (nil, with a note), and the caller
    /// uses its next source.
    public static func expiry(issuedAt: Int, lifetime: Int, source: String) -> (expiresAt: Int?, note: String?) {
        let issuedAt = clampedTime(issuedAt)
        guard lifetime > 0 else {
            return (nil, "the provider's \(source) (\(lifetime) s) is not a lifetime: ignored")
        }
        guard lifetime <= maximumLifetime else {
            return (
                issuedAt + maximumLifetime,
                "the provider's \(source) (\(lifetime) s) exceeds \(maximumLifetime / 86_400) days: clamped to that"
            )
        }
        return (issuedAt + lifetime, nil)
    }

    /// An expiry read back from disk, no later than `maximumLifetime` after `issuedAt`.
    static func storedExpiry(_ expiresAt: Int?, issuedAt: Int) -> (Int?, note: String?) {
        guard let expiresAt else { return (nil, nil) }
        let latest = clampedTime(issuedAt) + maximumLifetime
        guard expiresAt > latest || expiresAt < 0 else { return (expiresAt, nil) }
        let clamped = min(max(expiresAt, 0), latest)
        return (clamped, "the stored expiry (\(expiresAt)) lay beyond \(maximumLifetime / 86_400) days: clamped to \(clamped)")
    }
}
