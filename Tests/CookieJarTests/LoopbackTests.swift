import Testing

@testable import CookieJar
@testable import Loopback

/// Loopback is an IP literal in 127/8 or ::1, never a name.
@Suite struct LoopbackTests {
    @Test(arguments: ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "0:0:0:0:0:0:0:1"])
    func literalsAreLoopback(_ host: String) {
        #expect(Loopback.isLiteral(host))
    }

    @Test(arguments: ["localhost", "127.example.com", "127.0.0.1.example", "127.1", "128.0.0.1", "::2", "[::ffff:127.0.0.1]", ""])
    func namesAndOtherAddressesAreNot(_ host: String) {
        #expect(!Loopback.isLiteral(host))
    }

    @Test func secureCookiesGoOverHTTPOnlyToLoopbackLiterals() {
        #expect(CookieRequest(string: "http://127.0.0.1:8000/")?.secure == true)
        #expect(CookieRequest(string: "http://[::1]:8000/")?.secure == true)
        #expect(CookieRequest(string: "http://127.attacker.example/")?.secure == false)
        #expect(CookieRequest(string: "http://localhost/")?.secure == false)
        #expect(CookieRequest(string: "https://app.example/")?.secure == true)
    }

    @Test func httpIsSafeOnlyToLoopbackLiterals() {
        #expect(Loopback.isSafeScheme("https", host: "app.example"))
        #expect(Loopback.isSafeScheme("http", host: "127.0.0.1"))
        #expect(!Loopback.isSafeScheme("http", host: "127.evil.example"))
        #expect(!Loopback.isSafeScheme("http", host: "localhost"))
        #expect(!Loopback.isSafeScheme("ftp", host: "127.0.0.1"))
    }
}
