import CookieJar
import Testing

let suffixes = PublicSuffixList(text: "// test list\ncom\norg\nuk\nco.uk\n*.ck\n!www.ck\n")
let now = 1_800_000_000

func jar(_ configure: (inout CookiePolicy) -> Void = { _ in }) -> CookieJar {
    var policy = CookiePolicy(publicSuffixes: suffixes)
    configure(&policy)
    return CookieJar(policy: policy)
}

func rejection(_ result: Result<[CookieChange], CookieRejection>) -> String? {
    if case .failure(let rejection) = result { return rejection.description }
    return nil
}

func request(_ url: String) -> CookieRequest { CookieRequest(string: url)! }

extension CookieJar {
    mutating func set(_ header: String, _ url: String, at time: Int = now) -> Result<[CookieChange], CookieRejection> {
        receive(header, from: request(url), now: time)
    }

    func header(_ url: String, at time: Int = now) -> String {
        CookieJar.header(for: cookies(for: request(url), now: time))
    }
}

@Suite struct StorageTests {
    @Test func hostOnlyAndDomainCookies() {
        var jar = jar()
        _ = jar.set("host=1", "https://www.example.com/")
        _ = jar.set("dom=2; Domain=.Example.COM", "https://www.example.com/")
        #expect(jar.header("https://www.example.com/") == "host=1; dom=2")
        #expect(jar.header("https://api.example.com/") == "dom=2")
        #expect(jar.header("https://example.com/") == "dom=2")
        #expect(jar.header("https://badexample.com/") == "")
        #expect(jar.cookies.first { $0.name == "dom" }?.domain == "example.com")
    }

    @Test func domainMustMatchAndNotBePublicSuffix() {
        var jar = jar()
        #expect(rejection(jar.set("a=1; Domain=other.com", "https://www.example.com/")) == "Domain does not match the request host")
        #expect((try? jar.set("a=1; Domain=com", "https://www.example.com/").get()) == nil)
        #expect((try? jar.set("a=1; Domain=co.uk", "https://shop.co.uk/").get()) == nil)
        #expect((try? jar.set("a=1; Domain=x.ck", "https://a.x.ck/").get()) == nil, "wildcard rule")
        #expect((try? jar.set("a=1; Domain=www.ck", "https://a.www.ck/").get()) != nil, "exception rule")
        // A public suffix equal to the host itself makes a host-only cookie.
        _ = jar.set("b=2; Domain=co.uk", "https://co.uk/")
        #expect(jar.cookies.first { $0.name == "b" }?.hostOnly == true)
        // IP addresses only match exactly.
        #expect((try? jar.set("c=3; Domain=0.0.1", "http://10.0.0.1/").get()) == nil)
    }

    @Test func defaultPathAndPathMatching() {
        var jar = jar()
        _ = jar.set("a=1", "https://h.com/app/login?x=1")
        _ = jar.set("b=2; Path=/app/sub", "https://h.com/")
        _ = jar.set("c=3; Path=relative", "https://h.com/docs/page")
        #expect(jar.cookies.map(\.path) == ["/app", "/app/sub", "/docs"])
        #expect(jar.header("https://h.com/app") == "a=1")
        #expect(jar.header("https://h.com/app/sub/x") == "b=2; a=1", "longer path first")
        #expect(jar.header("https://h.com/application") == "", "/app does not path-match /application")
        #expect(jar.header("https://h.com/") == "")
    }

    @Test func orderByPathLengthThenCreation() {
        var jar = jar()
        _ = jar.set("late=1; Path=/", "https://h.com/")
        _ = jar.set("deep=2; Path=/a/b", "https://h.com/")
        _ = jar.set("later=3; Path=/", "https://h.com/")
        _ = jar.set("late=4; Path=/", "https://h.com/")
        #expect(jar.header("https://h.com/a/b/c") == "deep=2; late=4; later=3", "replacement keeps creation time")
    }

    @Test func replacementAndDeletionAreChanges() throws {
        var jar = jar()
        let set = try jar.set("sid=1; Path=/", "https://h.com/").get()
        #expect(set.map(\.action) == [.set] && set.map(\.version) == [1])
        #expect(try jar.set("sid=1; Path=/", "https://h.com/").get().isEmpty, "no change, no version")
        #expect(try jar.set("sid=2; Path=/", "https://h.com/").get().map(\.action) == [.set])
        #expect(try jar.set("sid=; Path=/; Max-Age=0", "https://h.com/").get().map(\.action) == [.delete])
        #expect(jar.cookies.isEmpty && jar.version == 3)
        _ = jar.set("sid=3; Path=/", "https://h.com/")
        let deleted = try jar.set("sid=x; Path=/; Expires=Thu, 01 Jan 1970 00:00:00 GMT", "https://h.com/").get()
        #expect(deleted.map(\.action) == [.delete] && deleted[0].cookie.value == "3")
    }

    @Test func maxAgeWinsOverExpiresAndExpiryIsNoticed() throws {
        var jar = jar()
        _ = jar.set("a=1; Expires=Wed, 01 Jan 2031 00:00:00 GMT; Max-Age=60", "https://h.com/")
        _ = jar.set("b=2; Max-Age=120; Expires=Wed, 01 Jan 2031 00:00:00 GMT", "https://h.com/")
        _ = jar.set("s=session", "https://h.com/")
        #expect(jar.cookies.map(\.expiresAt) == [now + 60, now + 120, nil])
        #expect(jar.nextExpiry == now + 60)
        #expect(jar.header("https://h.com/", at: now + 60) == "b=2; s=session", "never returned once expired")
        let expired = jar.removeExpired(now: now + 60)
        #expect(expired.map(\.cookie.name) == ["a"] && expired[0].action == .delete)
        #expect(jar.nextExpiry == now + 120)
    }

    @Test func lifetimeIsCapped() {
        var jar = jar()
        _ = jar.set("a=1; Max-Age=999999999", "https://h.com/")
        #expect(jar.cookies[0].expiresAt == now + 400 * 86_400)
    }

    @Test func secureRules() {
        var jar = jar()
        #expect((try? jar.set("a=1; Secure", "http://h.com/").get()) == nil, "Secure from http")
        _ = jar.set("a=1; Secure", "https://h.com/")
        _ = jar.set("b=2; Secure", "http://127.0.0.1:8000/")
        #expect(jar.header("http://h.com/") == "")
        #expect(jar.header("https://h.com/") == "a=1")
        #expect(jar.header("http://127.0.0.1:9/") == "b=2", "loopback is a secure context")
        #expect((try? jar.set("c=3; SameSite=None", "https://h.com/").get()) == nil)
        _ = jar.set("c=3; SameSite=lax; HttpOnly", "https://h.com/")
        #expect(jar.cookies.last?.sameSite == .lax && jar.cookies.last?.httpOnly == true)
    }

    @Test func prefixes() {
        var jar = jar()
        #expect((try? jar.set("__Secure-a=1", "https://h.com/").get()) == nil)
        #expect((try? jar.set("__Secure-a=1; Secure", "https://h.com/").get()) != nil)
        #expect((try? jar.set("__Host-b=1; Secure", "https://h.com/x/y").get()) == nil, "needs Path=/")
        #expect((try? jar.set("__Host-b=1; Secure; Path=/; Domain=h.com", "https://h.com/").get()) == nil)
        #expect((try? jar.set("__host-b=1; Secure; Path=/", "https://h.com/").get()) != nil)
    }

    @Test func limitsEvictOldestAndRejectHuge() throws {
        var jar = jar { $0.maximumPerDomain = 3; $0.maximumTotal = 4 }
        for index in 0..<3 { _ = jar.set("c\(index)=v", "https://a.com/") }
        let changes = try jar.set("c3=v", "https://a.com/").get()
        #expect(changes.map(\.action) == [.set, .delete] && changes[1].cookie.name == "c0")
        _ = jar.set("x=1", "https://b.com/")
        _ = jar.set("y=1", "https://c.com/")
        #expect(jar.cookies.count == 4 && !jar.cookies.contains { $0.name == "c1" }, "total limit evicts oldest")
        let huge = String(repeating: "v", count: 4096)
        #expect(rejection(jar.set("big=\(huge)", "https://a.com/")) == "name and value exceed the cookie size limit")
    }

    @Test func ignoredHeaders() {
        var jar = jar()
        for header in ["", "novalue", "=nameless", "a=b\u{0}c", "  ; Path=/"] {
            #expect((try? jar.set(header, "https://h.com/").get()) == nil, "\(header)")
        }
        _ = jar.set("  spaced  =  value  ; Path = /p ; Max-Age=abc", "https://h.com/")
        #expect(jar.cookies.first.map { [$0.name, $0.value, $0.path] } == ["spaced", "value", "/p"])
        #expect(jar.cookies.first?.expiresAt == nil, "bad Max-Age ignored")
    }

    @Test func removeAllDeletesEveryCookie() {
        var jar = jar()
        _ = jar.set("a=1", "https://h.com/")
        _ = jar.set("b=2", "https://h.com/")
        let changes = jar.removeAll()
        #expect(changes.map(\.action) == [.delete, .delete] && changes.map(\.version) == [3, 4])
        #expect(jar.cookies.isEmpty)
    }
}

@Suite struct ChangeLogTests {
    @Test func reconnectGetsMissedChangesOrSnapshot() {
        var jar = jar { $0.changeLogCapacity = 3 }
        for index in 0..<5 { _ = jar.set("c\(index)=v", "https://h.com/") }
        #expect(jar.changes(since: 5) == .changes([]))
        guard case .changes(let missed) = jar.changes(since: 3) else {
            Issue.record("expected changes")
            return
        }
        #expect(missed.map(\.version) == [4, 5])
        #expect(jar.changes(since: 1) == .snapshot(jar.cookies), "log starts after version 2")
        #expect(jar.changes(since: 99) == .snapshot(jar.cookies), "a future version is unknown")
        let restored = CookieJar(policy: jar.policy, cookies: jar.cookies, version: jar.version)
        #expect(restored.changes(since: 5) == .changes([]))
        #expect(restored.changes(since: 4) == .snapshot(jar.cookies), "a restart empties the log")
    }
}

@Suite struct ExportTests {
    @Test func netscapeFormat() {
        var jar = jar()
        _ = jar.set("a=1; Max-Age=60", "https://h.com/x/y")
        _ = jar.set("b=2; Domain=h.com; Path=/; Secure; HttpOnly", "https://h.com/")
        let lines = jar.netscapeText(now: now).split(separator: "\n")
        #expect(lines.first == "# Netscape HTTP Cookie File")
        #expect(lines.contains("h.com\tFALSE\t/x\tFALSE\t\(now + 60)\ta\t1"))
        #expect(lines.contains("#HttpOnly_.h.com\tTRUE\t/\tTRUE\t0\tb\t2"))
    }
}

@Suite struct PublicSuffixTests {
    @Test(.enabled(if: (try? PublicSuffixList(contentsOfFile: PublicSuffixList.debianPath)) != nil, "publicsuffix not installed"))
    func debianList() throws {
        let list = try PublicSuffixList(contentsOfFile: PublicSuffixList.debianPath)
        #expect(list.ruleCount > 5000)
        #expect(list.isPublicSuffix("com") && list.isPublicSuffix("co.uk") && list.isPublicSuffix("github.io"))
        #expect(!list.isPublicSuffix("example.com") && !list.isPublicSuffix("bbc.co.uk"))
    }

    @Test func implicitRule() {
        #expect(PublicSuffixList.implicitOnly.isPublicSuffix("localhost"))
        #expect(!PublicSuffixList.implicitOnly.isPublicSuffix("example.com"))
    }
}
