import Testing
import Varlink

@testable import Persons
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
        #expect(ids.problems.count == 6, "five malformed lines and one unknown name: \(ids.problems)")
        #expect(ids.problems.contains { $0.contains("carol") })
        #expect(ids.person(of: 600005) == 1001)
        for uid: UInt32 in [100000, 200000, 300000, 400000, 500000] { #expect(ids.person(of: uid) == uid) }
    }

    @Test func aNumericOwnerNeedsNoLookupAndARangeMayEndAtTheTopOfTheUidSpace() {
        let ids = SubordinateIDs(parsing: "1234:4294967290:6", resolve: { _ in nil })
        #expect(ids.person(of: 4_294_967_295) == 1234)
        #expect(ids.person(of: 4_294_967_289) == 4_294_967_289)
    }

    @Test func anOverlapOfTwoOwnersIsAPersonOfItsOwn() {
        let ids = SubordinateIDs(
            parsing: "nobody:300000:1000\ndaemon:300000:1000", resolve: { ["nobody": 65534, "daemon": 1][$0] })
        #expect(ids.person(of: 300000) == 300000)
        #expect(ids.person(of: 300999) == 300000, "the whole overlap is one person")
        #expect(ids.person(of: 301000) == 301000)
        #expect(ids.problems.count == 1 && ids.problems[0].contains("300000–300999"), "\(ids.problems)")
    }

    @Test func partlyOverlappingRangesKeepTheirOwnPartsAndShareNone() {
        let ids = SubordinateIDs(
            parsing: "bob:100050:100\nalice:100000:100\nalice:100100:20", resolve: { names[$0] })
        #expect(ids.person(of: 100010) == 1000)
        #expect(ids.person(of: 100049) == 1000)
        #expect(ids.person(of: 100050) == 100050)
        #expect(ids.person(of: 100119) == 100050, "alice's second range still overlaps bob's")
        #expect(ids.person(of: 100120) == 1001)
        #expect(ids.person(of: 100149) == 1001)
        #expect(ids.person(of: 100150) == 100150)
    }

    @Test func oneOwnerListedTwiceIsNoOverlap() {
        let ids = SubordinateIDs(parsing: "alice:100000:100\nalice:100050:100", resolve: { names[$0] })
        #expect(ids.person(of: 100120) == 1000 && ids.person(of: 100000) == 1000)
        #expect(ids.problems.isEmpty)
    }

    @Test func aRangeOwnerInsideAnothersRangeIsItself() {
        let ids = SubordinateIDs(parsing: "alice:1000:100000\n200000:300000:10", resolve: { names[$0] })
        #expect(ids.person(of: 1001) == 1000, "bob (1001) owns no range: /etc/subuid cannot tell him from alice's")
        #expect(ids.person(of: 2000) == 1000)
        #expect(ids.person(of: 1000) == 1000)
        let owner = SubordinateIDs(parsing: "alice:100000:200000\n200000:400000:10", resolve: { names[$0] })
        #expect(owner.person(of: 200000) == 200000, "owns a range: itself")
        #expect(owner.person(of: 200001) == 1000)
        #expect(owner.problems.count == 1 && owner.problems[0].contains("uid 200000"))
    }

    @Test func anUnreadableFileIsNoRangesAndAProblem() throws {
        let missing = SubordinateIDs.load(from: "/nonexistent/subuid")
        #expect(missing.ranges.isEmpty && missing.problems.isEmpty)
        let directory = SubordinateIDs.load(from: "/")
        #expect(directory.ranges.isEmpty && directory.problems.count == 1, "\(directory.problems)")
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
