import CookieJar
import Testing

/// The store's own controls: the accept policy and deletion by URL and name.
@Suite struct ControlsTests {
    @Test func neverAcceptsNothing() {
        var j = jar { $0.accept = .never }
        #expect(rejection(j.set("a=1", "https://app.example.com/")) != nil)
        #expect(j.cookies.isEmpty)
    }

    @Test func sameDomainRefusesParentDomainCookies() {
        var j = jar { $0.accept = .sameDomain }
        #expect(rejection(j.set("host=1", "https://app.example.com/")) == nil)
        #expect(rejection(j.set("explicit=1; Domain=app.example.com", "https://app.example.com/")) == nil)
        #expect(rejection(j.set("parent=1; Domain=example.com", "https://app.example.com/"))?.contains("same-domain") == true)
        #expect(j.header("https://app.example.com/") == "host=1; explicit=1")
        var always = jar()
        #expect(rejection(always.set("parent=1; Domain=example.com", "https://app.example.com/")) == nil)
    }

    @Test func deleteByURLAndName() {
        var j = jar()
        _ = j.set("a=1; Path=/", "https://app.example.com/")
        _ = j.set("b=1; Path=/admin", "https://app.example.com/")
        _ = j.set("c=1; Domain=example.com", "https://app.example.com/")
        _ = j.set("d=1", "https://other.example.org/")
        let byName = j.remove(matching: request("https://app.example.com/"), name: "a", now: now)
        #expect(byName.map(\.cookie.name) == ["a"] && byName.allSatisfy { $0.action == .delete })
        // The URL decides: /admin's cookie is not sent to /, the domain cookie is.
        let byURL = j.remove(matching: request("https://app.example.com/"), name: nil, now: now)
        #expect(Set(byURL.map(\.cookie.name)) == ["c"])
        #expect(Set(j.cookies.map(\.name)) == ["b", "d"])
        let all = j.remove(matching: nil, name: nil, now: now)
        #expect(all.count == 2 && j.cookies.isEmpty)
        #expect(j.version == 8)  // four sets, four deletions
    }
}
