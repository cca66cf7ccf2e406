import CookieJar
import Foundation
import Secrets
import Testing
@testable import StateStore

/// A state file's counters are outside numbers too (edited by hand, written
/// by a broken build): what loads can always be counted up from.
@Suite struct HostileCounterTests {
    let directory = NSTemporaryDirectory() + "tokend-counters-\(UUID().uuidString.prefix(8))"

    func loaded(generation: Int, cookieVersion: Int) throws -> SessionRecord? {
        let file = try StateStore(directory: directory).file(for: "default")
        try file.saveNow(
            SessionRecord(
                phase: .active, refreshToken: Secret("r"), generation: generation,
                cookies: [
                    Cookie(
                        name: "a", value: "1", domain: "h.com", hostOnly: true, path: "/", expiresAt: nil, secure: true,
                        httpOnly: false, sameSite: nil, creationIndex: Int.max)
                ], cookieVersion: cookieVersion))
        return try file.load()
    }

    @Test(arguments: [Int.max, Int.max - 1, SessionRecord.maximumCounter + 1, SessionRecord.maximumCounter])
    func aHugeCounterLoadsClampedAndCanStillGrow(counter: Int) throws {
        let record = try #require(try loaded(generation: counter, cookieVersion: counter))
        let expected = counter > SessionRecord.maximumCounter ? SessionRecord.clampedCounterValue : counter
        #expect(record.generation == expected && record.cookieVersion == expected)
        var next = record
        next.generation += 1
        #expect(next.generation > record.generation)
        // The jar built from it takes a change and renumbers the hostile index.
        var jar = CookieJar(
            policy: CookiePolicy(publicSuffixes: PublicSuffixList(text: "com\n")), cookies: record.cookies,
            version: record.cookieVersion)
        #expect(jar.cookies.map(\.creationIndex) == [0])
        _ = jar.receive("b=2", from: CookieRequest(string: "https://h.com/")!, now: 1_800_000_000)
        #expect(jar.version == expected + 1)
    }

    @Test func saneAndNegativeCounters() throws {
        #expect(try loaded(generation: 41, cookieVersion: 7).map { [$0.generation, $0.cookieVersion] } == [41, 7])
        #expect(try loaded(generation: Int.min, cookieVersion: -1).map { [$0.generation, $0.cookieVersion] } == [0, 0])
    }
}
