import Testing
import TokendInterface

@testable import TokendWebView

@Suite struct CookieMirrorTests {
    @Test func aCookieTokendAddsWhileTheStoreIsBeingWrittenIsAddedNotDeleted() {
        var mirror = CookieMirror()
        mirror.jar = keyed(cookie("sid", "1"))
        let first = mirror.reconcile(store: [:], rule: appTest)
        #expect(first.additions == [cookie("sid", "1")])
        // tokend's event arrives while sid is being written into the store.
        mirror.jar[cookie("late", "1").key] = cookie("late", "1")
        mirror.settled(first)
        #expect(mirror.baseline == keyed(cookie("sid", "1")))
        // The store holds what the first reconcile wrote: late is missing from it, not deleted by the site.
        let second = mirror.reconcile(store: keyed(cookie("sid", "1")), rule: appTest)
        #expect(second.imports.isEmpty)
        #expect(second.additions == [cookie("late", "1")])
        #expect(mirror.jar == keyed(cookie("sid", "1"), cookie("late", "1")))
    }

    @Test func theLostStoreFlagCountsForOneReconcile() {
        var mirror = CookieMirror()
        mirror.jar = keyed(cookie("sid", "1"), cookie("tracker", "1"))
        mirror.baseline = mirror.jar
        mirror.storeLost = true
        let restore = mirror.reconcile(store: [:], rule: appTest)
        #expect(restore.storeWasEmptied && restore.imports.isEmpty && restore.additions.count == 2)
        mirror.settled(restore)
        let logout = mirror.reconcile(store: [:], rule: appTest)
        #expect(!logout.storeWasEmptied && logout.imports.values.joined().count == 2 && mirror.jar.isEmpty)
    }
}

@Suite struct CookieImportTests {
    func domainCookie(_ name: String, _ value: String, _ domain: String) -> Cookie {
        var shared = cookie(name, value, domain: domain)
        shared.hostOnly = false
        return shared
    }

    @Test func aParentDomainCookieAnotherHostSetIsRefusedAndLeavesTheStore() {
        // A page on evil.example.test set Domain=example.test: sent to app.example.test, so mirrored, but not imported.
        let rule = CookieImportRule(webOrigins: ["https://app.example.test"])
        let tossed = domainCookie("sid", "evil", "example.test")
        let work = CookieReconciliation(store: keyed(tossed), baseline: [:], jar: [:], rule: rule)
        #expect(work.imports.isEmpty)
        #expect(work.refused == [tossed])
        #expect(work.jar.isEmpty && work.removals == [tossed])
    }

    @Test func aRefusedChangeToTokendsParentDomainCookieGoesBackToTokendsValue() {
        let rule = CookieImportRule(webOrigins: ["https://app.example.test"])
        let good = domainCookie("sid", "good", "example.test")
        let changed = domainCookie("sid", "evil", "example.test")
        let work = CookieReconciliation(store: keyed(changed), baseline: keyed(good), jar: keyed(good), rule: rule)
        #expect(work.imports.isEmpty && work.refused == [changed])
        #expect(work.additions == [good] && work.removals.isEmpty)
        let deleted = CookieReconciliation(store: [:], baseline: keyed(good), jar: keyed(good), rule: rule)
        #expect(deleted.imports.isEmpty && deleted.refused == [good] && deleted.additions == [good])
    }

    @Test func theWebOriginsOwnHostsCookiesAreImported() {
        let rule = CookieImportRule(webOrigins: ["https://app.example.test"])
        let own = domainCookie("pref", "1", "app.example.test")
        let work = CookieReconciliation(store: keyed(own, cookie("a", "1", domain: "app.example.test")), baseline: [:],
                                        jar: [:], rule: rule)
        #expect(work.refused.isEmpty && work.imports["https://app.example.test/"]?.count == 2)
    }
}
