extension CookieJar {
    /// The jar in the Netscape cookies.txt format read by curl (-b) and wget
    /// (--load-cookies). HttpOnly cookies carry curl's "#HttpOnly_" prefix;
    /// session cookies have expiry 0.
    public func netscapeText(now: Int) -> String {
        var lines = ["# Netscape HTTP Cookie File", "# Written by tokend; contains session cookies, keep it private.", ""]
        for cookie in cookies where !cookie.isExpired(now: now) {
            let domain = (cookie.httpOnly ? "#HttpOnly_" : "") + (cookie.hostOnly ? "" : ".") + cookie.domain
            let fields = [
                domain, cookie.hostOnly ? "FALSE" : "TRUE", cookie.path, cookie.secure ? "TRUE" : "FALSE",
                String(cookie.expiresAt ?? 0), cookie.name, cookie.value,
            ]
            lines.append(fields.joined(separator: "\t"))
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
