import CookieJar
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What ImportCookies did.
public struct CookieImport: Sendable {
    public var version: Int
    public var applied: Int
    /// One line per refused header: its position, its cookie name when readable, and why.
    public var rejected: [String]
}

extension SessionActor {
    /// The Cookie header the token endpoint gets with the next refresh.
    func cookieHeaderForEndpoint() -> String {
        guard let cookieOrigin else { return "" }
        return CookieJar.header(for: jar.cookies(for: cookieOrigin, now: Int(clock.now())))
    }

    /// Applies the token endpoint's Set-Cookie headers (its answer to a
    /// refresh, success or not). Refused ones are logged by name only.
    func receiveEndpointCookies(_ headers: [String]) -> [CookieChange] {
        guard let cookieOrigin, !headers.isEmpty else { return [] }
        var changes: [CookieChange] = []
        for header in headers {
            switch jar.receive(header, from: cookieOrigin, now: Int(clock.now())) {
            case .success(let applied): changes += applied
            case .failure(let rejection):
                logger.notice(
                    "cookie from token endpoint refused",
                    metadata: ["cookie": "\(SetCookie.parse(header)?.name ?? "?")", "problem": "\(rejection)"])
            }
        }
        if !changes.isEmpty { scheduleCookieExpiry() }
        countCookieChanges(changes)
        return changes
    }

    /// Sets and deletions, for the metrics (expiries are counted where they happen).
    func countCookieChanges(_ changes: [CookieChange]) {
        let deleted = changes.count { $0.action == .delete }
        file.metrics.cookiesChanged(.set, count: changes.count - deleted)
        file.metrics.cookiesChanged(.delete, count: deleted)
    }

    /// Set-Cookie headers a web-side client received from `request`'s URL:
    /// stored, persisted and delivered to subscribers before this returns.
    public func importCookies(from request: CookieRequest, setCookie headers: [String]) async throws -> CookieImport {
        let (changes, outcome) = try await fleetExclusive("importing cookies") {
            try requireActive()  // after the fleet's latest copy is in
            var changes: [CookieChange] = []
            var outcome = CookieImport(version: 0, applied: 0, rejected: [])
            for (index, header) in headers.enumerated() {
                switch jar.receive(header, from: request, now: Int(clock.now())) {
                case .success(let made):
                    outcome.applied += 1
                    changes += made
                case .failure(let rejection):
                    let name = SetCookie.parse(header).map { " (\($0.name))" } ?? ""
                    outcome.rejected.append("setCookie[\(index)]\(name): \(rejection)")
                }
            }
            if !changes.isEmpty {
                scheduleCookieExpiry()
                countCookieChanges(changes)
                await persist(what: "imported cookies")
            }
            return (changes, outcome)
        }
        if !changes.isEmpty {
            await publish([event(.cookies, changes: changes)], waitForDelivery: true)
        }
        return CookieImport(version: jar.version, applied: outcome.applied, rejected: outcome.rejected)
    }

    /// Deletes the cookies a request to `request` would carry (the whole jar
    /// without one), only those named `name` when given: persisted, then each
    /// deletion delivered to subscribers before this returns.
    public func deleteCookies(matching request: CookieRequest?, name: String?) async throws -> (version: Int, deleted: Int) {
        let changes = try await fleetExclusive("deleting cookies") {
            let changes = jar.remove(matching: request, name: name, now: Int(clock.now()))
            if !changes.isEmpty {
                scheduleCookieExpiry()
                countCookieChanges(changes)
                await persist(what: "deleted cookies")
            }
            return changes
        }
        if !changes.isEmpty {
            await publish([event(.cookies, changes: changes)], waitForDelivery: true)
        }
        return (jar.version, changes.count)
    }

    /// The cookies a browser would send to `request`, and the jar's version.
    public func cookies(for request: CookieRequest) -> (cookies: [Cookie], version: Int) {
        (jar.cookies(for: request, now: Int(clock.now())), jar.version)
    }

    /// The whole jar as a curl/wget cookies.txt.
    public func netscapeCookies() -> String {
        jar.netscapeText(now: Int(clock.now()))
    }

    /// Removes cookies whose time has come (persisting and telling
    /// subscribers), then plans the next wake-up.
    func expireCookies() {
        let changes = jar.removeExpired(now: Int(clock.now()))
        scheduleCookieExpiry()
        guard !changes.isEmpty else { return }
        file.metrics.cookiesChanged(.expire, count: changes.count)
        logger.debug("cookies expired", metadata: ["count": "\(changes.count)"])
        Task {
            await persist(what: "expired cookies")
            await publish([event(.cookies, changes: changes)], waitForDelivery: false)
        }
    }

    func scheduleCookieExpiry() {
        cookieTimer?.cancel()
        cookieTimer = nil
        guard let at = jar.nextExpiry, !stopping else { return }
        let clock = self.clock
        cookieTimer = Task {
            do {
                try await clock.sleep(until: Double(at))
            } catch {
                return
            }
            self.expireCookies()
        }
    }
}
