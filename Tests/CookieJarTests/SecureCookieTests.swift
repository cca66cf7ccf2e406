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
}
