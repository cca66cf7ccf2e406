import Testing

@testable import TokendInterface

@Suite struct WebResourceRuleTests {
    let rule = WebResourceRule(webResources: [
        "https://api.example.test/mail", "http://127.0.0.1:8080/", "https://files.example.test/docs/", "not a url",
    ])

    @Test func aURLUnderAResourcesPathIsWithinIt() {
        #expect(rule.resources.count == 3)
        #expect(rule.allows(url: "https://api.example.test/mail"))
        #expect(rule.allows(url: "https://api.example.test/mail/inbox?unread=1#top"))
        #expect(rule.allows(url: "https://API.Example.TEST:443/mail/x"))
        #expect(rule.allows(url: "http://127.0.0.1:8080/anything/at/all"))
        #expect(rule.allows(url: "http://127.0.0.1:8080"))
        #expect(rule.allows(url: "https://files.example.test/docs/a.txt"))
    }

    @Test func thePathMatchesAtASegmentBoundary() {
        #expect(!rule.allows(url: "https://api.example.test/mailbox"))
        #expect(!rule.allows(url: "https://api.example.test/"))
        #expect(!rule.allows(url: "https://files.example.test/docs"))
        #expect(!rule.allows(url: "https://api.example.test/Mail/inbox"))
    }

    @Test func schemeHostAndPortMustBeTheResources() {
        #expect(!rule.allows(url: "http://api.example.test/mail"))
        #expect(!rule.allows(url: "https://api.example.test:8443/mail"))
        #expect(!rule.allows(url: "https://evil.example.test/mail"))
        #expect(!rule.allows(url: "https://api.example.test.evil.test/mail"))
        #expect(!rule.allows(url: "http://127.0.0.1:8081/"))
        #expect(!rule.allows(url: "http://127.0.0.1/"))
        #expect(!rule.allows(url: "http://localhost:8080/"))
    }

    @Test func dotSegmentsCredentialsAndOtherSchemesAreRefused() {
        #expect(!rule.allows(url: "https://api.example.test/mail/../admin"))
        #expect(!rule.allows(url: "https://api.example.test/mail/%2E%2e/admin"))
        #expect(!rule.allows(url: "https://api.example.test/mail/./x"))
        // Path parameters: Tomcat, Jetty and Spring resolve "..;x" as "..".
        #expect(!rule.allows(url: "https://api.example.test/mail/..;/admin"))
        #expect(!rule.allows(url: "https://api.example.test/mail/%2e%2e;/admin"))
        #expect(!rule.allows(url: "https://api.example.test/mail/..;x/..;x/admin"))
        #expect(!rule.allows(url: "https://api.example.test/mail/..%3Bx/admin"))
        #expect(!rule.allows(url: "https://api.example.test/mail/.;x/x"))
        #expect(rule.allows(url: "https://api.example.test/mail/inbox;v=2"), "a parameter on an ordinary segment is fine")
        #expect(rule.allows(url: "https://api.example.test/mail/...;x"), "three dots are a name")
        #expect(!rule.allows(url: "https://api.example.test/mail/..%2Fadmin"))
        #expect(!rule.allows(url: "https://api.example.test/mail%2f..%2fadmin"))
        #expect(!rule.allows(url: "https://api.example.test/mail/..%5Cadmin"))
        #expect(!rule.allows(url: "https://api.example.test/mail/..\\admin"))
        #expect(!rule.allows(url: "https://user:pw@api.example.test/mail"))
        #expect(!rule.allows(url: "ftp://api.example.test/mail"))
        #expect(!rule.allows(url: "/mail"))
        #expect(!rule.allows(url: ""))
        #expect(WebResourceRule(webResources: []).allows(url: "https://api.example.test/mail") == false)
    }
}
