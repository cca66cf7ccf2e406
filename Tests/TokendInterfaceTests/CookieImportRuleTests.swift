import Testing

@testable import TokendInterface

@Suite struct CookieImportRuleTests {
    let rule = CookieImportRule(webOrigins: ["https://app.example.test", "http://127.0.0.1:8080", "not a url"])

    @Test func aWebOriginsHostMovesCookiesOnAnyPortPathAndScheme() {
        #expect(rule.hosts == ["app.example.test", "127.0.0.1"])
        #expect(rule.allows(url: "https://app.example.test/"))
        #expect(rule.allows(url: "http://app.example.test/account"))
        #expect(rule.allows(url: "http://127.0.0.1:9999/x"))
        #expect(rule.allows(url: "https://APP.Example.TEST/"))
    }

    @Test func aParentDomainIsNotAWebOriginsHost() {
        // What a page on evil.example.test setting Domain=example.test asks to import.
        #expect(!rule.allows(url: "https://example.test/"))
        #expect(!rule.allows(url: "http://example.test/"))
    }

    @Test func siblingsChildrenAndLookalikesAreOtherHosts() {
        #expect(!rule.allows(url: "https://evil.example.test/"))
        #expect(!rule.allows(url: "https://sub.app.example.test/"))
        #expect(!rule.allows(url: "https://app.example.test.evil.test/"))
        #expect(!rule.allows(url: "https://evil.test/?https://app.example.test/"))
        #expect(!rule.allows(url: "https://app.example.test@evil.test/"))
    }

    @Test func aURLWithoutAHostMovesNothing() {
        #expect(!rule.allows(url: ""))
        #expect(!rule.allows(url: "app.example.test"))
        #expect(!rule.allows(url: "file:///etc/passwd"))
        #expect(!CookieImportRule(webOrigins: []).allows(url: "https://app.example.test/"))
    }
}
