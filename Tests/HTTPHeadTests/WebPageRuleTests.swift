import HTTPHead
import Testing

/// The one web-page rule, with each listener's own addresses: the proxy's,
/// the metrics listener's (IPv6 too), and the login listener's, which other
/// sites' pages may navigate to.
@Suite struct WebPageRuleTests {
    func head(_ fields: [(String, String)]) -> HTTPRequestHead {
        let text = "GET / HTTP/1.1\r\n" + fields.map { "\($0.0): \($0.1)\r\n" }.joined() + "\r\n"
        return try! HTTPRequestHead(Array(text.utf8), limits: HeadLimits(bytes: 8192, fields: 64, line: 8192))
    }

    let metrics = WebPageRule(listener: "tokend's metrics listener", ip: "127.0.0.1", port: 9464)

    @Test func theHostMustNameTheListener() {
        #expect(metrics.hosts == ["127.0.0.1:9464", "localhost:9464"])
        #expect(metrics.refusal(for: head([("Host", "127.0.0.1:9464")])) == nil)
        #expect(metrics.refusal(for: head([("Host", "LocalHost:9464")])) == nil)
        for host in ["attacker.example:9464", "127.0.0.1:9465", "127.0.0.1", "localhost", ""] {
            #expect(metrics.refusal(for: head([("Host", host)]))?.status == 421, "\(host)")
        }
        #expect(metrics.refusal(for: head([]))?.status == 421)
        #expect(metrics.refusal(for: head([("Host", "127.0.0.1:9464"), ("Host", "127.0.0.1:9464")]))?.status == 421)
        let v6 = WebPageRule(listener: "x", ip: "::1", port: 9464)
        #expect(v6.hosts == ["[::1]:9464", "localhost:9464"])
        #expect(WebPageRule(listener: "x", ip: "[::1]", port: 80).hosts == ["[::1]:80", "[::1]", "localhost:80", "localhost"])
    }

    @Test func anotherPageIsForbidden() {
        let host = ("Host", "127.0.0.1:9464")
        for origin in ["http://attacker.example", "http://127.0.0.1:9465", "null", "http://127.0.0.1:9464.evil.example", "https://127.0.0.1:9464"] {
            let refusal = metrics.refusal(for: head([host, ("Origin", origin)]))
            #expect(refusal?.status == 403 && refusal?.reason == "Forbidden", "\(origin)")
        }
        for site in ["cross-site", "same-site", "Same-Origin"] {
            #expect(metrics.refusal(for: head([host, ("Sec-Fetch-Site", site)]))?.status == 403, "\(site)")
        }
        // Typed into the address bar, or the listener's own origin.
        #expect(metrics.refusal(for: head([host, ("Sec-Fetch-Site", "none")])) == nil)
        #expect(metrics.refusal(for: head([host, ("Origin", "http://127.0.0.1:9464"), ("Sec-Fetch-Site", "same-origin")])) == nil)
    }

    @Test func whereNoPageCanReachTheListenerAnyHostPassesAndAnyOriginIsForbidden() {
        let unix = WebPageRule(hosts: nil, listener: "the proxy")
        #expect(unix.refusal(for: head([("Host", "anything")])) == nil)
        #expect(unix.refusal(for: head([("Origin", "http://localhost")]))?.status == 403)
    }

    /// The login listener is where the provider sends the browser back: a navigation from another site.
    @Test func aListenerThatAllowsNavigationsTakesTheBrowsersButNotAPagesFetch() {
        let login = WebPageRule(listener: "tokenctl's login listener", ip: "127.0.0.1", port: 41234, allowsNavigations: true)
        let host = ("Host", "127.0.0.1:41234")
        let navigation = [host, ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "document")]
        #expect(login.refusal(for: head(navigation)) == nil)
        #expect(login.refusal(for: head(navigation + [("Origin", "https://provider.example")])) == nil)
        // A page's fetch, image or frame of the callback.
        for (mode, dest) in [("cors", "empty"), ("no-cors", "image"), ("navigate", "iframe")] {
            let request = [host, ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", mode), ("Sec-Fetch-Dest", dest)]
            #expect(login.refusal(for: head(request))?.status == 403, "\(mode) \(dest)")
        }
        // A rebound name is misdirected even when navigating.
        #expect(login.refusal(for: head([("Host", "attacker.example:41234")] + navigation.dropFirst()))?.status == 421)
        // Without the option, the same navigation is refused.
        #expect(metrics.refusal(for: head([("Host", "127.0.0.1:9464")] + navigation.dropFirst()))?.status == 403)
    }
}
