/// One session's cookies: storage (RFC 6265 §5.3), retrieval (§5.4) and a
/// version that grows by one with every change. A value type: the session
/// actor owns it and persists it.
public struct CookieJar: Sendable {
    public private(set) var cookies: [Cookie]
    public private(set) var version: Int
    var nextCreationIndex: Int
    var log: ChangeLog
    public let policy: CookiePolicy

    public init(policy: CookiePolicy, cookies: [Cookie] = [], version: Int = 0) {
        self.policy = policy
        self.cookies = Self.renumberedIfHostile(cookies)
        self.version = version
        self.nextCreationIndex = (self.cookies.map(\.creationIndex).max() ?? -1) + 1
        self.log = ChangeLog(capacity: policy.changeLogCapacity, baseVersion: version)
    }

    /// Stores one Set-Cookie header received in answer to `request`.
    /// Returns the changes it caused (none when it changed nothing).
    public mutating func receive(
        _ header: String, from request: CookieRequest, now: Int
    ) -> Result<[CookieChange], CookieRejection> {
        guard let parsed = SetCookie.parse(header) else { return .failure(.unparseable) }
        if policy.accept == .never { return .failure(.acceptNever) }
        switch makeCookie(parsed, request: request, now: now) {
        case .failure(let rejection): return .failure(rejection)
        case .success(let cookie): return store(cookie, secureOrigin: request.secure, now: now)
        }
    }

    /// §5.3 steps 2–10 (with 6265bis prefixes, SameSite=None and the lifetime cap).
    func makeCookie(_ parsed: SetCookie, request: CookieRequest, now: Int) -> Result<Cookie, CookieRejection> {
        guard parsed.name.utf8.count + parsed.value.utf8.count <= policy.maximumCookieSize else {
            return .failure(.tooLarge)
        }
        var expiresAt: Int?
        if let maxAge = parsed.maxAge {
            expiresAt = maxAge <= 0 ? Int.min : Self.saturatingSum(now, min(maxAge, policy.maximumLifetime))
        } else if let expires = parsed.expires {
            expiresAt = min(expires, Self.saturatingSum(now, policy.maximumLifetime))
        }
        var domain = request.host
        var hostOnly = true
        if let attribute = parsed.domain {
            if policy.publicSuffixes.isPublicSuffix(attribute) {
                guard attribute == request.host else { return .failure(.publicSuffix) }
            } else {
                guard request.domainMatches(attribute) else { return .failure(.domainMismatch) }
                domain = attribute
                hostOnly = false
            }
        }
        if policy.accept == .sameDomain && domain != request.host { return .failure(.acceptSameDomain) }
        if parsed.secure && !request.secure { return .failure(.insecureOrigin) }
        if parsed.sameSite == SameSite.none && !parsed.secure { return .failure(.sameSiteNone) }
        let path = parsed.path ?? request.defaultPath
        let lowered = parsed.name.lowercased()
        if lowered.hasPrefix("__secure-") && !parsed.secure { return .failure(.prefix) }
        if lowered.hasPrefix("__host-") && (!parsed.secure || !hostOnly || parsed.path != "/") {
            return .failure(.prefix)
        }
        if !request.secure && shadowsSecureCookie(name: parsed.name, domain: domain, path: path) {
            return .failure(.shadowsSecure)
        }
        return .success(
            Cookie(
                name: parsed.name, value: parsed.value, domain: domain, hostOnly: hostOnly, path: path,
                expiresAt: expiresAt, secure: parsed.secure, httpOnly: parsed.httpOnly, sameSite: parsed.sameSite,
                creationIndex: nextCreationIndex))
    }

    /// `a + b`, held at Int.max or Int.min instead of trapping.
    static func saturatingSum(_ a: Int, _ b: Int) -> Int {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b > 0 ? Int.max : Int.min) : sum
    }

    /// §5.3 steps 11–12: replace or delete a cookie of the same identity, or
    /// add it after making room (see `evictions`); nothing changes when no
    /// room may be made for it.
    mutating func store(_ cookie: Cookie, secureOrigin: Bool, now: Int) -> Result<[CookieChange], CookieRejection> {
        var changes: [CookieChange] = []
        var cookie = cookie
        if let index = cookies.firstIndex(where: { $0.sameIdentity(as: cookie) }) {
            let old = cookies.remove(at: index)
            if cookie.isExpired(now: now) {
                changes.append(record(.delete, old))
                return .success(changes)
            }
            cookie.creationIndex = old.creationIndex
            cookies.insert(cookie, at: index)
            if old != cookie { changes.append(record(.set, cookie)) }
            return .success(changes)
        }
        if cookie.isExpired(now: now) { return .success(changes) }
        guard let evicted = evictions(toAdmit: cookie, secureOrigin: secureOrigin, now: now) else {
            return .failure(.noRoomBesideSecure)
        }
        nextCreationIndex += 1
        cookies.append(cookie)
        changes.append(record(.set, cookie))
        for victim in evicted {
            guard let index = cookies.firstIndex(where: { $0.sameIdentity(as: victim) }) else { continue }
            changes.append(record(.delete, cookies.remove(at: index)))
        }
        return .success(changes)
    }

    /// §5.4: the cookies a browser would send to `request`, longest path
    /// first, then oldest first. Expired cookies are never returned.
    public func cookies(for request: CookieRequest, now: Int) -> [Cookie] {
        cookies.filter { cookie in
            (cookie.hostOnly ? request.host == cookie.domain : request.domainMatches(cookie.domain))
                && request.pathMatches(cookie.path) && (!cookie.secure || request.secure)
                && !cookie.isExpired(now: now)
        }.sorted { a, b in
            a.path.utf8.count != b.path.utf8.count
                ? a.path.utf8.count > b.path.utf8.count : a.creationIndex < b.creationIndex
        }
    }

    /// The Cookie header for these cookies ("" for none).
    public static func header(for cookies: [Cookie]) -> String {
        cookies.map { "\($0.name)=\($0.value)" }.joined(separator: "; ")
    }

    /// Removes cookies whose time has come.
    public mutating func removeExpired(now: Int) -> [CookieChange] {
        var changes: [CookieChange] = []
        while let index = cookies.firstIndex(where: { $0.isExpired(now: now) }) {
            changes.append(record(.delete, cookies.remove(at: index)))
        }
        return changes
    }

    /// The earliest expiry among stored cookies: when removeExpired has work.
    public var nextExpiry: Int? {
        cookies.compactMap(\.expiresAt).min()
    }

    /// Empties the jar (logout, login required): one deletion per cookie.
    /// Deletes the cookies a request to `request`'s URL would carry (all of
    /// them without a URL), only those named `name` when given.
    public mutating func remove(matching request: CookieRequest?, name: String?, now: Int) -> [CookieChange] {
        let targets = request.map { cookies(for: $0, now: now) } ?? cookies
        var changes: [CookieChange] = []
        for cookie in targets where name == nil || cookie.name == name {
            guard let index = cookies.firstIndex(where: { $0.sameIdentity(as: cookie) }) else { continue }
            changes.append(record(.delete, cookies.remove(at: index)))
        }
        return changes
    }

    public mutating func removeAll() -> [CookieChange] {
        let removed = cookies
        cookies.removeAll()
        return removed.map { record(.delete, $0) }
    }

    /// Makes the jar hold exactly `others` (another host's copy of the
    /// session's jar): a deletion for each cookie not among them, a set for
    /// each new or changed one. The version stays this jar's own. Cookies
    /// expired by `now` are left out (this jar has already removed them).
    public mutating func replaceAll(with others: [Cookie], now: Int) -> [CookieChange] {
        let others = others.filter { !$0.isExpired(now: now) }
        var changes: [CookieChange] = []
        while let index = cookies.firstIndex(where: { mine in !others.contains { $0.sameIdentity(as: mine) } }) {
            changes.append(record(.delete, cookies.remove(at: index)))
        }
        for other in others where !cookies.contains(other) {
            cookies.removeAll { $0.sameIdentity(as: other) }
            cookies.append(other)
            changes.append(record(.set, other))
        }
        cookies = Self.renumberedIfHostile(cookies)
        nextCreationIndex = max(nextCreationIndex, (cookies.map(\.creationIndex).max() ?? -1) + 1)
        return changes
    }

    /// Above this a creation index did not come from a jar (2^53: a million
    /// cookies a second for centuries stays below it); `nextCreationIndex`
    /// counts up from the largest index, so it must not start near Int.max.
    public static let maximumCreationIndex = 1 << 53

    /// Cookies loaded from outside (a state file, another host's copy) whose
    /// indexes lie outside 0...maximumCreationIndex are renumbered 0, 1, 2, …
    /// in their existing order: only the order matters (§5.4), and a hostile
    /// index must not overflow the next one.
    static func renumberedIfHostile(_ cookies: [Cookie]) -> [Cookie] {
        let sane = 0...maximumCreationIndex
        guard cookies.contains(where: { !sane.contains($0.creationIndex) }) else { return cookies }
        let order = cookies.indices.sorted { (cookies[$0].creationIndex, $0) < (cookies[$1].creationIndex, $1) }
        var renumbered = cookies
        for (rank, index) in order.enumerated() { renumbered[index].creationIndex = rank }
        return renumbered
    }

    mutating func record(_ action: CookieChange.Action, _ cookie: Cookie) -> CookieChange {
        version += 1
        let change = CookieChange(action: action, cookie: cookie, version: version)
        log.append(change)
        return change
    }

    /// What a subscriber that saw everything up to `version` has missed.
    public func changes(since version: Int) -> ChangesSince {
        if version == self.version { return .changes([]) }
        if let missed = log.changes(since: version) { return .changes(missed) }
        return .snapshot(cookies)
    }
}

public enum ChangesSince: Sendable, Equatable {
    /// Every change after the given version, oldest first.
    case changes([CookieChange])
    /// The log no longer reaches back (or the version is unknown): the whole jar.
    case snapshot([Cookie])
}
