import CLinux
import Persons
import Testing

#if canImport(Glibc)
import Glibc
#endif

@testable import ProxyProgram

/// Connection slots: a total, and a share per owner that one owner cannot pass.
@Suite struct AdmissionTests {
    @Test func oneOwnerTakesNoMoreThanItsShareAndLeavesTheRestToOthers() {
        let admission = Admission(limit: 8, perOwner: 4)
        let crowd = (0..<8).map { _ in admission.admit(owner: 65534) }
        #expect(crowd == [true, true, true, true, false, false, false, false])
        #expect(admission.isFull(owner: 65534) && admission.count == 4)
        #expect((0..<4).allSatisfy { _ in admission.admit(owner: 1000) }, "another owner gets the other four")
        #expect(!admission.admit(owner: 1001), "the total holds for everyone")
        #expect(!admission.isFull(owner: 1001), "a refusal over the total takes no share")
        admission.leave(owner: 65534)
        #expect(admission.admit(owner: 1001))
        #expect(admission.count == 8)
    }

    @Test func theUidsOfOnePersonsRangeShareThatPersonsShare() {
        let persons = SubordinateIDs(parsing: "alice:100000:65536\n", resolve: { $0 == "alice" ? 1000 : nil })
        let admission = Admission(limit: 16, perOwner: 4, persons: persons)
        let inner = [1000, 100_000, 100_001, 165_535].map { admission.admit(owner: $0) }
        #expect(inner == [true, true, true, true])
        #expect(!admission.admit(owner: 100_002), "a fifth uid of alice's range is alice, who has her four")
        #expect(admission.isFull(owner: 100_500) && admission.isFull(owner: 1000))
        #expect(admission.admit(owner: 165_536), "the first uid past the range is someone else")
        admission.leave(owner: 100_001)
        #expect(admission.admit(owner: 100_003), "a slot one of her uids freed is hers again")
    }

    @Test func theProxysOwnUserKeepsAReserveThatSeveralOthersTogetherCannotTake() {
        let admission = Admission(limit: 8, perOwner: 4, own: 1000)
        let others = (0..<8).map { admission.admit(owner: 2000 + UInt32($0 / 2)) }  // four people, two each
        #expect(others == [true, true, true, true, false, false, false, false], "others hold 4 together")
        #expect((0..<4).allSatisfy { _ in admission.admit(owner: 1000) }, "the proxy's own user has its 4")
        #expect(!admission.admit(owner: 1000), "and no more than a person's share")
        admission.leave(owner: 2000)
        #expect(admission.admit(owner: 2003), "a slot another left is another's again")
        let whole = Admission(limit: 8, perOwner: 8, own: 1000)
        #expect((0..<8).allSatisfy { _ in whole.admit(owner: 2000) }, "with a share of all, there is no reserve")
        let most = Admission(limit: 8, perOwner: 6, own: 1000)
        #expect((0..<6).allSatisfy { most.admit(owner: 2000 + UInt32($0 % 2)) } && !most.admit(owner: 2002),
            "the reserve is what a share of 6 leaves of 8: 2")
    }

    @Test func withoutAnOwnerOnlyTheTotalCounts() {
        let admission = Admission(limit: 2)
        #expect(admission.admit() && admission.admit() && !admission.admit())
        admission.leave()
        #expect(admission.admit())
    }
}
