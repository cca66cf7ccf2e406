import Testing
import Varlink

@testable import UnixServer

#if canImport(Glibc)
import Glibc
#endif

/// /etc/subuid read once into who owns which uids, and budgets kept per person.
@Suite struct SubordinateIDsTests {
    let names = ["alice": UInt32(1000), "bob": 1001]

    @Test func aUidInsideARangeIsItsOwnerAndAnyOtherIsItself() {
        let ids = SubordinateIDs(parsing: "alice:100000:65536\nbob:165536:65536\n", resolve: { names[$0] })
        #expect(ids.person(of: 100000) == 1000)
        #expect(ids.person(of: 165535) == 1000)
        #expect(ids.person(of: 165536) == 1001)
        #expect(ids.person(of: 231071) == 1001)
        #expect(ids.person(of: 231072) == 231072)
        #expect(ids.person(of: 1000) == 1000)
        #expect(ids.person(of: 99999) == 99999)
    }

    @Test func malformedLinesAndUnknownNamesAreSkipped() {
        let text = """
            # a comment
            alice:100000
            alice:x:10
            alice:200000:0
            :300000:10
            carol:400000:10
            alice:500000:10:extra
            bob:600000:10

            """
        let ids = SubordinateIDs(parsing: text, resolve: { names[$0] })
        #expect(ids.ranges.count == 1)
        #expect(ids.person(of: 600005) == 1001)
        for uid: UInt32 in [100000, 200000, 300000, 400000, 500000] { #expect(ids.person(of: uid) == uid) }
    }

    @Test func aNumericOwnerNeedsNoLookupAndARangeMayEndAtTheTopOfTheUidSpace() {
        let ids = SubordinateIDs(parsing: "1234:4294967290:6", resolve: { _ in nil })
        #expect(ids.person(of: 4_294_967_295) == 1234)
        #expect(ids.person(of: 4_294_967_289) == 4_294_967_289)
    }

    @Test func overlappingRangesBelongToTheOneListedFirst() {
        let ids = SubordinateIDs(parsing: "bob:100050:100\nalice:100000:100", resolve: { names[$0] })
        #expect(ids.person(of: 100010) == 1000)
        #expect(ids.person(of: 100060) == 1001)
        #expect(ids.person(of: 100120) == 1001)
    }
}

extension ServerLoopTests {
    /// This process's uid as a subordinate uid of someone else: its
    /// connections take that person's slots, until the table is reloaded.
    @Test func connectionSlotsAreKeptPerPersonAndFollowAReload() async throws {
        let uid = getuid()
        var limits = Harness.quickLimits()
        limits.maximumConnectionsPerUser = 1
        let harness = try await Harness(
            limits: limits, subordinateIDs: SubordinateIDs(parsing: "4242:\(uid):1", resolve: { _ in nil }))
        let first = try harness.client()
        first.send(TestClient.frame("org.example.test.Echo", "{\"text\":\"a\"}"))
        #expect(first.reply()?.parameters["text"]?.stringValue == "a")
        let persons = try await harness.onLoop { loop in loop.connections.values.map { $0.person } }
        #expect(persons == [4242])
        let second = try harness.client()
        second.send(TestClient.frame("org.example.test.Echo", "{\"text\":\"b\"}"))
        #expect(second.reply()?.error == "org.example.test.TooMany")
        harness.server.reloadSubordinateIDs(SubordinateIDs())
        let third = try harness.client()
        third.send(TestClient.frame("org.example.test.Echo", "{\"text\":\"c\"}"))
        #expect(third.reply()?.parameters["text"]?.stringValue == "c", "counted as uid \(uid), another person")
        await harness.stop()
    }
}
