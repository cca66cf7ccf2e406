import CWebKitGTK
import Testing
import TokendInterface

@testable import TokendWebView

func cookie(_ name: String, _ value: String, domain: String = "app.test", httpOnly: Bool = false) -> Cookie {
    Cookie(name: name, value: value, domain: domain, hostOnly: true, path: "/", expiresAt: 2_000_000_000, secure: true,
           httpOnly: httpOnly, sameSite: "Lax")
}

func keyed(_ cookies: Cookie...) -> [CookieKey: Cookie] {
    Dictionary(uniqueKeysWithValues: cookies.map { ($0.key, $0) })
}

/// The session's web origin in these tests: https://app.test.
let appTest = CookieImportRule(webOrigins: ["https://app.test"])

extension CookieReconciliation {
    init(store: [CookieKey: Cookie], baseline: [CookieKey: Cookie], jar: [CookieKey: Cookie], storeLost: Bool = false) {
        self.init(store: store, baseline: baseline, jar: jar, rule: appTest, storeLost: storeLost)
    }
}

@Suite struct CookieReconciliationTests {
    @Test func aStoreThatMatchesNeedsNothing() {
        let all = keyed(cookie("sid", "1", httpOnly: true), cookie("pref", "a"))
        let work = CookieReconciliation(store: all, baseline: all, jar: all)
        #expect(work.imports.isEmpty && work.additions.isEmpty && work.removals.isEmpty)
        #expect(work.jar == all)
    }

    @Test func tokendsChangesGoIntoTheStoreAndNotBackToTokend() {
        let before = keyed(cookie("sid", "1"), cookie("tracker", "1"))
        let jar = keyed(cookie("sid", "2"))  // a refresh: sid replaced, tracker deleted
        let work = CookieReconciliation(store: before, baseline: before, jar: jar)
        #expect(work.imports.isEmpty)
        #expect(work.additions == [cookie("sid", "2")])
        #expect(work.removals == [cookie("tracker", "1")])
    }

    @Test func theSitesSetAndDeleteGoToTokend() {
        let baseline = keyed(cookie("sid", "1"), cookie("old", "x"))
        let store = keyed(cookie("sid", "1"), cookie("new", "y"))
        let work = CookieReconciliation(store: store, baseline: baseline, jar: baseline)
        #expect(work.imports["https://app.test/"]?.sorted() == [
            "new=y; Path=/; Secure; SameSite=Lax; Expires=Wed, 18 May 2033 03:33:20 GMT",
            "old=x; Path=/; Secure; SameSite=Lax; Max-Age=0",
        ])
        #expect(work.jar == store)
        #expect(work.additions.isEmpty && work.removals.isEmpty)
    }

    @Test func aSiteClearingAllItsCookiesIsTakenAsDeletionsNotAsALostStore() {
        // The site's logout clears both its cookies: the store is empty, and stays so.
        let all = keyed(cookie("sid", "1"), cookie("tracker", "1"))
        let work = CookieReconciliation(store: [:], baseline: all, jar: all)
        #expect(!work.storeWasEmptied)
        #expect(work.imports["https://app.test/"]?.sorted() == [
            "sid=1; Path=/; Secure; SameSite=Lax; Max-Age=0", "tracker=1; Path=/; Secure; SameSite=Lax; Max-Age=0",
        ])
        #expect(work.additions.isEmpty && work.jar.isEmpty)
    }

    @Test func aStoreLostWithTheNetworkProcessIsRestoredNotTakenAsDeletions() {
        let all = keyed(cookie("sid", "1"), cookie("tracker", "1"))
        let work = CookieReconciliation(store: [:], baseline: all, jar: all, storeLost: true)
        #expect(work.storeWasEmptied)
        #expect(work.imports.isEmpty)
        #expect(work.additions.count == 2)
        #expect(work.jar == all)
    }

    @Test func aLostStoreKeepsWhatTheSiteSetSinceAndRestoresTheRest() {
        let all = keyed(cookie("sid", "1"), cookie("tracker", "1"))
        // The network process ended; a page already set one cookie in the new store.
        let work = CookieReconciliation(store: keyed(cookie("fresh", "1")), baseline: all, jar: all, storeLost: true)
        #expect(work.storeWasEmptied)
        #expect(work.imports.values.flatMap { $0 } == ["fresh=1; Path=/; Secure; SameSite=Lax; Expires=Wed, 18 May 2033 03:33:20 GMT"])
        #expect(work.additions.map(\.name) == ["sid", "tracker"])
    }

    @Test func theSitesOnlyCookieDeletedIsADeletion() {
        let one = keyed(cookie("only", "1"))
        let work = CookieReconciliation(store: [:], baseline: one, jar: one)
        #expect(!work.storeWasEmptied)
        #expect(work.imports.values.flatMap { $0 } == ["only=1; Path=/; Secure; SameSite=Lax; Max-Age=0"])
        #expect(work.jar.isEmpty)
    }

    @Test func aCookieTheStoreAlreadyHasAsTokendDoesIsNotImported() {
        // Restored after a crash: the store now holds what the jar holds, the baseline is empty.
        let all = keyed(cookie("sid", "1"))
        let work = CookieReconciliation(store: all, baseline: [:], jar: all)
        #expect(work.imports.isEmpty && work.additions.isEmpty)
    }
}

@Suite struct CookieTests {
    @Test func sameInStoreComparesExpiryToTheSecondAndSameSiteOnlyWhenBothSayIt() {
        var other = cookie("sid", "1")
        other.expiresAt = 2_000_000_001
        #expect(cookie("sid", "1").sameInStore(as: other))
        other.expiresAt = 2_000_000_005
        #expect(!cookie("sid", "1").sameInStore(as: other))
        other = cookie("sid", "1")
        other.sameSite = nil
        #expect(cookie("sid", "1").sameInStore(as: other))
        other.expiresAt = nil
        #expect(!cookie("sid", "1").sameInStore(as: other))
        #expect(!cookie("sid", "1").sameInStore(as: cookie("sid", "1", httpOnly: true)))
    }

    @Test func theSetCookieLineNamesDomainOnlyForDomainCookies() {
        var shared = cookie("s", "v", domain: "example.com")
        shared.hostOnly = false
        shared.expiresAt = nil
        #expect(shared.setCookieHeader() == "s=v; Path=/; Domain=example.com; Secure; SameSite=Lax")
        #expect(shared.url == "https://example.com/")
    }

    @Test func aCookieSurvivesTheTripThroughLibsoup() {
        var shared = cookie("sid", "42", domain: "example.com", httpOnly: true)
        shared.hostOnly = false
        for original in [cookie("pref", "a b"), shared] {
            let soup = original.soupCookie()
            defer { soup_cookie_free(soup) }
            #expect(Cookie(soup: soup) == original)
        }
    }

    @Test func libsoupsNoneWithoutSecureIsAnUnsetSameSite() {
        var plain = cookie("a", "1")
        plain.secure = false
        plain.sameSite = "None"
        let soup = plain.soupCookie()
        defer { soup_cookie_free(soup) }
        #expect(Cookie(soup: soup).sameSite == nil)
    }

    @Test func webHostsMirrorHostCookiesOfTheirHostsAndDomainCookiesAbove() {
        let hosts = WebHosts(origins: ["https://app.example.com", "http://127.0.0.1:8080"])
        #expect(hosts.mirrors(cookie("a", "1", domain: "127.0.0.1")))
        #expect(!hosts.mirrors(cookie("a", "1", domain: "example.com")))
        var shared = cookie("a", "1", domain: "example.com")
        shared.hostOnly = false
        #expect(hosts.mirrors(shared))
        shared.domain = "other.com"
        #expect(!hosts.mirrors(shared))
        #expect(hosts.contains(url: "http://127.0.0.1:9999/x"))
        #expect(!hosts.contains(url: "https://evil.example/"))
        #expect(TokendWebView.origin(of: "http://127.0.0.1:8080/page?x") == "http://127.0.0.1:8080")
        #expect(TokendWebView.origin(of: "https://app.example.com/") == "https://app.example.com")
    }
}
