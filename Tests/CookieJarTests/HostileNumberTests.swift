import Testing
@testable import CookieJar

/// Numbers in a Set-Cookie header or a stored jar are outside numbers: none
/// of them may trap, now or at the next start.
@Suite struct HostileNumberTests {
    @Test(arguments: [
        ("9223372036854775807", Int.max), ("9223372036854775808", Int.max), ("99999999999999999999999", Int.max),
        ("-9223372036854775807", -Int.max), ("-9223372036854775808", -Int.max), ("-9223372036854775809", -Int.max),
        ("0", 0), ("-0", 0), ("60", 60), ("-1", -1),
    ])
    func maxAgeSaturates(text: String, seconds: Int) {
        #expect(SetCookie.parse("lb=1; Max-Age=\(text)")?.maxAge == seconds)
    }

    @Test func aHugeMaxAgeIsCappedAndANegativeOneDeletes() throws {
        var jar = jar()
        _ = try jar.set("lb=1; Max-Age=9223372036854775808", "https://h.com/").get()
        #expect(jar.cookies.map(\.expiresAt) == [now + 400 * 86_400])
        #expect(try jar.set("lb=1; Max-Age=-9223372036854775809", "https://h.com/").get().map(\.action) == [.delete])
        #expect(jar.cookies.isEmpty)
    }

    @Test func expiryArithmeticSaturatesAtTheEndOfTime() {
        var jar = jar { $0.maximumLifetime = Int.max }
        _ = jar.set("a=1; Max-Age=9223372036854775808", "https://h.com/", at: Int.max - 10)
        _ = jar.set("b=1; Expires=Wed, 01 Jan 2031 00:00:00 GMT", "https://h.com/", at: Int.max - 10)
        // b's date lies before that "now": expired, dropped, and no sum trapped on the way.
        #expect(jar.cookies.map(\.expiresAt) == [Int.max])
        #expect(CookieJar.saturatingSum(Int.min, -1) == Int.min)
    }

    func stored(_ name: String, _ index: Int) -> Cookie {
        Cookie(
            name: name, value: "v", domain: "h.com", hostOnly: true, path: "/", expiresAt: nil, secure: true,
            httpOnly: false, sameSite: nil, creationIndex: index)
    }

    @Test func aHostileCreationIndexIsRenumberedInOrderAtLoad() throws {
        let loaded = [stored("late", Int.max), stored("early", -5), stored("middle", 7)]
        var jar = CookieJar(policy: CookiePolicy(publicSuffixes: suffixes), cookies: loaded)
        #expect(jar.cookies.map(\.name) == ["late", "early", "middle"])
        #expect(jar.cookies.map(\.creationIndex) == [2, 0, 1])
        _ = try jar.set("new=1", "https://h.com/").get()
        #expect(jar.header("https://h.com/") == "early=v; middle=v; late=v; new=1")
        // Sane indexes are kept as they are.
        let sane = CookieJar(policy: jar.policy, cookies: [stored("a", 9), stored("b", 4)])
        #expect(sane.cookies.map(\.creationIndex) == [9, 4] && sane.nextCreationIndex == 10)
    }

    @Test func anotherHostsHostileCreationIndexIsRenumberedToo() throws {
        var jar = jar()
        _ = jar.replaceAll(with: [stored("x", Int.max), stored("y", CookieJar.maximumCreationIndex + 1)], now: now)
        #expect(jar.cookies.map(\.creationIndex) == [1, 0] || jar.cookies.map(\.creationIndex) == [0, 1])
        _ = try jar.set("z=1", "https://h.com/").get()
        #expect(jar.cookies.map(\.creationIndex).max() ?? 0 <= CookieJar.maximumCreationIndex)
    }
}
