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

    @Test func replaceAllMakesTheJarAnotherHostsCopy() {
        var mine = jar()
        _ = mine.set("keep=1", "https://app.example.com/")
        _ = mine.set("gone=1", "https://app.example.com/")
        _ = mine.set("changed=old", "https://app.example.com/")
        var theirs = jar()
        _ = theirs.set("keep=1", "https://app.example.com/")
        _ = theirs.set("changed=new", "https://app.example.com/")
        _ = theirs.set("added=1", "https://app.example.com/")
        _ = theirs.set("stale=1; Max-Age=10", "https://app.example.com/")
        let version = mine.version
        let changes = mine.replaceAll(with: theirs.cookies, now: now + 60)
        #expect(changes.filter { $0.action == .delete }.map(\.cookie.name) == ["gone"])
        #expect(Set(changes.filter { $0.action == .set }.map(\.cookie.name)) == ["changed", "added"])
        #expect(mine.header("https://app.example.com/") .contains("changed=new"))
        // An expired cookie of theirs is not brought back; the version is this jar's own, +1 per change.
        #expect(!mine.cookies.contains { $0.name == "stale" })
        #expect(mine.version == version + changes.count)
        #expect(mine.replaceAll(with: theirs.cookies, now: now + 60).isEmpty)
    }
}
