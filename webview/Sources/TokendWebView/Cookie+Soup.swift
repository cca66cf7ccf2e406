import TokendInterface

typealias Cookie = BrokerInterface.Cookie

/// A cookie's identity in a store: name, domain (without a leading dot) and path.
struct CookieKey: Hashable {
    let name: String
    let domain: String
    let path: String
}

extension BrokerInterface.Cookie {
    var key: CookieKey { CookieKey(name: name, domain: domain, path: path) }

    /// The same cookie as far as requests and pages can tell: value, scope and
    /// flags, and expiry to the second. SameSite is compared only where tokend names it.
    func sameInStore(as other: Cookie) -> Bool {
        name == other.name && value == other.value && domain == other.domain && hostOnly == other.hostOnly
            && path == other.path && secure == other.secure && httpOnly == other.httpOnly
            && (sameSite == nil || other.sameSite == nil || sameSite == other.sameSite)
            && expiresAt.map { abs($0 - (other.expiresAt ?? .min / 2)) <= 1 } ?? (other.expiresAt == nil)
    }

    /// A URL the cookie is sent to: what ImportCookies and the cookie manager take.
    var url: String { "\(secure ? "https" : "http")://\(domain)\(path)" }

    /// The Set-Cookie line that makes tokend's jar hold this cookie (or drop it).
    func setCookieHeader(removed: Bool = false) -> String {
        var parts = ["\(name)=\(value)", "Path=\(path)"]
        if !hostOnly { parts.append("Domain=\(domain)") }
        if secure { parts.append("Secure") }
        if httpOnly { parts.append("HttpOnly") }
        if let sameSite { parts.append("SameSite=\(sameSite)") }
        if removed {
            parts.append("Max-Age=0")
        } else if let expiresAt {
            parts.append("Expires=\(HTTPDate.string(expiresAt))")
        }
        return parts.joined(separator: "; ")
    }

    /// A cookie from WebKit's store (libsoup: a leading dot marks a domain cookie).
    init(soup: OpaquePointer) {
        let domain = String(cString: soup_cookie_get_domain(soup))
        let expires = soup_cookie_get_expires(soup).map { Int(g_date_time_to_unix($0)) }
        let secure = soup_cookie_get_secure(soup) != 0
        // libsoup reports a cookie set without SameSite as None; None without Secure is no valid attribute.
        let sameSite: String? = switch soup_cookie_get_same_site_policy(soup) {
        case SOUP_SAME_SITE_POLICY_STRICT: "Strict"
        case SOUP_SAME_SITE_POLICY_LAX: "Lax"
        default: secure ? "None" : nil
        }
        self.init(
            name: String(cString: soup_cookie_get_name(soup)), value: String(cString: soup_cookie_get_value(soup)),
            domain: domain.hasPrefix(".") ? String(domain.dropFirst()) : domain, hostOnly: !domain.hasPrefix("."),
            path: String(cString: soup_cookie_get_path(soup)), expiresAt: expires,
            secure: secure, httpOnly: soup_cookie_get_http_only(soup) != 0, sameSite: sameSite)
    }

    /// The cookie as libsoup holds it (the caller frees it with `soup_cookie_free`).
    func soupCookie() -> OpaquePointer {
        let cookie = soup_cookie_new(name, value, hostOnly ? domain : ".\(domain)", path, -1)!
        if let expiresAt, let date = g_date_time_new_from_unix_utc(expiresAt) {
            soup_cookie_set_expires(cookie, date)
            g_date_time_unref(date)
        }
        soup_cookie_set_secure(cookie, secure ? 1 : 0)
        soup_cookie_set_http_only(cookie, httpOnly ? 1 : 0)
        switch sameSite {
        case "Strict": soup_cookie_set_same_site_policy(cookie, SOUP_SAME_SITE_POLICY_STRICT)
        case "Lax": soup_cookie_set_same_site_policy(cookie, SOUP_SAME_SITE_POLICY_LAX)
        case "None": soup_cookie_set_same_site_policy(cookie, SOUP_SAME_SITE_POLICY_NONE)
        default: break
        }
        return cookie
    }
}

/// Which cookies a session's web view mirrors: those sent to its web origins' hosts.
/// Of those, the site's changes go to tokend only where the import rule allows.
struct WebHosts {
    let rule: CookieImportRule
    var hosts: Set<String> { rule.hosts }

    init(origins: [String]) {
        rule = CookieImportRule(webOrigins: origins)
    }

    func mirrors(_ cookie: Cookie) -> Bool {
        cookie.hostOnly ? hosts.contains(cookie.domain)
            : hosts.contains { $0 == cookie.domain || $0.hasSuffix(".\(cookie.domain)") }
    }

    func contains(url: String) -> Bool {
        rule.allows(url: url)
    }
}
