extension CookieJar {
    /// RFC 6265bis §5.7 step 16, "leave Secure cookies alone": a cookie from a
    /// non-secure origin may not replace, delete or shadow a Secure cookie of
    /// the same name whose domain matches its own (either way) and whose path
    /// its path matches. A loopback literal over http is a secure origin
    /// (CookieRequest.secure), so it keeps replacing its own Secure cookies.
    func shadowsSecureCookie(name: String, domain: String, path: String) -> Bool {
        cookies.contains { old in
            old.secure && old.name == name
                && (Self.domainMatches(domain, old.domain) || Self.domainMatches(old.domain, domain))
                && CookieRequest(host: "", path: path, secure: false).pathMatches(old.path)
        }
    }

    /// §5.1.3 for two cookie domains (lowercase, without a leading dot).
    static func domainMatches(_ host: String, _ domain: String) -> Bool {
        CookieRequest(host: host, path: "/", secure: false).domainMatches(domain)
    }
}
