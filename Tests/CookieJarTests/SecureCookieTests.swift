import CookieJar
import Testing

/// RFC 6265bis §5.7 "leave Secure cookies alone": an http origin cannot
/// replace, delete or shadow a Secure cookie.
@Suite struct SecureCookieTests {
    @Test func httpCannotReplaceASecureCookie() {
        var jar = jar()
        _ = jar.set("sid=GOOD; Secure; HttpOnly", "https://app.example.com/")
        #expect(rejection(jar.set("sid=EVIL", "http://app.example.com/")) != nil)
        #expect(jar.header("https://app.example.com/") == "sid=GOOD")
    }

    @Test func httpCannotDeleteASecureCookie() {
        var jar = jar()
        _ = jar.set("sid=GOOD; Secure", "https://app.example.com/")
        #expect(rejection(jar.set("sid=; Max-Age=0", "http://app.example.com/")) != nil)
        #expect(jar.cookies.count == 1)
    }

    @Test func httpCannotShadowFromAParentDomainASubdomainOrADeeperPath() {
        var jar = jar()
        _ = jar.set("sid=GOOD; Secure; Domain=example.com; Path=/app", "https://app.example.com/app/")
        #expect(rejection(jar.set("sid=EVIL; Domain=example.com", "http://www.example.com/app/x")) != nil)
        #expect(rejection(jar.set("sid=EVIL", "http://app.example.com/app/deeper/x")) != nil, "host-only, longer path")
        #expect(rejection(jar.set("sid=EVIL; Path=/app/in", "http://example.com/")) != nil)
        #expect(jar.header("https://app.example.com/app/in/x") == "sid=GOOD")
    }

    @Test func httpMaySetOtherNamesUnrelatedDomainsAndPathsTheSecureCookieDoesNotCover() {
        var jar = jar()
        _ = jar.set("sid=GOOD; Secure; Path=/app", "https://app.example.com/app/")
        #expect(rejection(jar.set("other=1", "http://app.example.com/")) == nil)
        #expect(rejection(jar.set("sid=2", "http://other.example.org/")) == nil)
        // "/" does not path-match "/app": this cookie is never sent where the Secure one is.
        #expect(rejection(jar.set("sid=3; Path=/", "http://app.example.com/")) == nil)
    }

    @Test func httpsReplacesItsSecureCookie() {
        var jar = jar()
        _ = jar.set("sid=GOOD; Secure", "https://app.example.com/")
        #expect(rejection(jar.set("sid=NEW", "https://app.example.com/")) == nil)
        #expect(jar.header("https://app.example.com/") == "sid=NEW")
    }

    @Test func loopbackHTTPStaysASecureOrigin() {
        var jar = jar()
        _ = jar.set("sid=GOOD; Secure", "http://127.0.0.1:8000/")
        #expect(rejection(jar.set("sid=NEW", "http://127.0.0.1:8000/")) == nil)
        #expect(jar.header("http://127.0.0.1:8000/") == "sid=NEW")
        _ = jar.set("s=GOOD; Secure", "https://localhost/")
        #expect(rejection(jar.set("s=EVIL", "http://localhost/")) != nil, "a loopback name is not a secure origin")
    }

    @Test func httpCannotFloodASecureCookieOutOfItsDomainAndThenReplaceIt() {
        var jar = jar()
        _ = jar.set("sid=GOOD; Secure; HttpOnly", "https://app.example.com/")
        for index in 0..<50 { _ = jar.set("f\(index)=x", "http://app.example.com/") }
        #expect(rejection(jar.set("sid=EVIL", "http://app.example.com/")) != nil)
        #expect(jar.header("https://app.example.com/").hasPrefix("sid=GOOD"))
        #expect(jar.cookies.count == 50 && !jar.cookies.contains { $0.name == "f0" }, "the oldest non-Secure went")
    }

    @Test func httpCannotFloodASecureCookieOutOfTheJar() {
        var jar = jar { $0.maximumTotal = 3 }
        _ = jar.set("sid=GOOD; Secure", "https://app.example.com/")
        for host in ["a", "b", "c", "d"] { _ = jar.set("f=x", "http://\(host).example.org/") }
        #expect(rejection(jar.set("sid=EVIL", "http://app.example.com/")) != nil)
        #expect(jar.header("https://app.example.com/") == "sid=GOOD")
        #expect(jar.cookies.map(\.domain).sorted() == ["app.example.com", "c.example.org", "d.example.org"])
    }

    @Test func anInsecureCookieIsRefusedWhenOnlySecureCookiesCouldMakeRoom() {
        var jar = jar { $0.maximumPerDomain = 2 }
        _ = jar.set("a=1; Secure", "https://app.example.com/")
        _ = jar.set("b=1; Secure", "https://app.example.com/")
        let before = jar.version
        #expect(rejection(jar.set("c=1", "http://app.example.com/")) != nil)
        #expect(jar.version == before && jar.cookies.map(\.name) == ["a", "b"], "nothing changed")
    }

    @Test func evictionTakesExpiredThenNonSecureThenTheOldest() throws {
        var jar = jar { $0.maximumPerDomain = 3 }
        _ = jar.set("s1=1; Secure", "https://app.example.com/")
        _ = jar.set("old=1; Max-Age=10", "https://app.example.com/", at: now)
        _ = jar.set("n1=1", "https://app.example.com/", at: now)
        var changes = try jar.set("s2=1; Secure", "https://app.example.com/", at: now + 20).get()
        #expect(changes.map(\.action) == [.set, .delete] && changes[1].cookie.name == "old", "expired first")
        changes = try jar.set("s3=1; Secure", "https://app.example.com/", at: now + 20).get()
        #expect(changes[1].cookie.name == "n1", "then non-Secure, though s1 is older")
        changes = try jar.set("s4=1; Secure", "https://app.example.com/", at: now + 20).get()
        #expect(changes[1].cookie.name == "s1", "then the oldest, for a secure origin")
    }
}
