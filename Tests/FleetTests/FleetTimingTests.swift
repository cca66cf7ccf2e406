import Testing

@testable import Fleet

/// When a host re-reads the fleet's copy and how it waits for another host's
/// lease, with the randomness passed in.
@Suite struct FleetTimingTests {
    let poll = Duration.seconds(10)
    let margin = Duration.seconds(60)
    /// This host's wall clock when its polling began (Unix seconds).
    let wallStart = 1_000_000.0

    func plan(phase: Double = 0.5) -> ReadPlan {
        ReadPlan(poll: poll, refreshMargin: margin, phase: phase)
    }

    /// The instants (seconds since polling began) `plan` reads at up to `until`, each copy read
    /// expiring at `expiresAt`, the jitter and spread given.
    func reads(
        _ plan: ReadPlan, until: Double, expiresAt: Int? = nil, jitter: Double = 0.5, spread: Double = 0
    ) -> [Double] {
        var plan = plan
        var now = 0.0
        var times: [Double] = []
        plan.saw(expiresAt: expiresAt, at: now, wallNow: wallStart, spread: spread)  // the read at start
        while true {
            now += plan.wait(at: now).seconds
            guard now <= until else { return times }
            times.append(now)
            plan.reading(at: now, jitter: jitter)
            plan.saw(expiresAt: expiresAt, at: now, wallNow: wallStart + now, spread: spread)
        }
    }

    @Test func theFirstPollFallsWithinTheFirstIntervalThenOneIntervalWithinTenPercentAfterTheLast() {
        #expect(reads(plan(phase: 0.25), until: 30) == [2.5, 12.5, 22.5])
        #expect(reads(plan(phase: 0.25), until: 30, jitter: 0) == [2.5, 11.5, 20.5, 29.5])
        #expect(reads(plan(phase: 0.25), until: 30, jitter: 1) == [2.5, 13.5, 24.5])
    }

    @Test func aThousandHostsStartedTogetherPollAtSpreadInstants() {
        let firsts = (0..<1000).map { _ in reads(plan(phase: .random(in: 0...1)), until: 10).first ?? 10 }
        #expect(firsts.min()! < 0.5 && firsts.max()! > 9.5, "the first polls spread over the whole interval")
        #expect(Dictionary(grouping: firsts, by: { Int($0) }).values.map(\.count).max()! < 200)
    }

    @Test func aCopyDueForRefreshIsReadOnceBetweenPollsWhichKeepTheirPhase() {
        // Expiry − 60 s is 25 s after start; the spread places the read 0…30 s after that.
        let expiresAt = Int(wallStart) + 85
        #expect(reads(plan(phase: 0.25), until: 45, expiresAt: expiresAt, spread: 0) == [2.5, 12.5, 22.5, 25, 32.5, 42.5])
        #expect(reads(plan(phase: 0.25), until: 45, expiresAt: expiresAt, spread: 0.5) == [2.5, 12.5, 22.5, 32.5, 40, 42.5])
        // On a poll's own instant: one read, not two.
        #expect(reads(plan(phase: 0.5), until: 26, expiresAt: expiresAt - 10, spread: 0) == [5, 15, 25])
    }

    @Test func aThousandHostsReadingAtTheSameInstantDoNotPollInStepAfterwards() {
        // The worst case: every host's refresh read at the same instant, 25 s after start.
        let expiresAt = Int(wallStart) + 85
        let hosts = (0..<1000).map { _ in
            reads(plan(phase: .random(in: 0...1)), until: 60, expiresAt: expiresAt, jitter: .random(in: 0...1))
        }
        #expect(hosts.allSatisfy { times in times.contains { abs($0 - 25) < 0.001 } })
        // Afterwards the fleet's polls in any one second stay near a tenth of it, as before the read.
        let after = hosts.flatMap { $0.filter { $0 >= 26 && $0 < 60 } }
        let perSecond = Dictionary(grouping: after, by: { Int($0) }).values.map(\.count)
        #expect(perSecond.max()! < 200, "\(perSecond)")
    }

    @Test func aCopyAlreadyDueIsNotReadAgainOnlyPolled() {
        #expect(reads(plan(phase: 0.25), until: 30, expiresAt: Int(wallStart) + 30) == [2.5, 12.5, 22.5])
        #expect(reads(plan(phase: 0.25), until: 30, expiresAt: Int(wallStart) - 5) == [2.5, 12.5, 22.5])
    }

    @Test func aNewCopyPlansItsOwnRefreshRead() {
        var plan = plan(phase: 0.25)
        plan.saw(expiresAt: Int(wallStart) + 85, at: 0, wallNow: wallStart, spread: 0)
        #expect(plan.refreshAt == 25)
        plan.reading(at: 25, jitter: 0.5)
        plan.saw(expiresAt: Int(wallStart) + 85, at: 25, wallNow: wallStart + 25, spread: 0.9)
        #expect(plan.refreshAt == nil, "the same copy: read once")
        plan.saw(expiresAt: Int(wallStart) + 3685, at: 26, wallNow: wallStart + 26, spread: 0)
        #expect(plan.refreshAt == 3625)
        plan.saw(expiresAt: nil, at: 27, wallNow: wallStart + 27, spread: 0)
        #expect(plan.refreshAt == nil, "logged out: no token to refresh")
    }

    @Test func aFailedReadIsRetriedAfterTheBackoffNotAtThePoll() {
        var plan = plan(phase: 0.25)
        plan.reading(at: 2.5, jitter: 0.5)
        plan.failed(at: 3.5, retry: .seconds(1))
        #expect(plan.wait(at: 3.5) == .seconds(1))
    }

    @Test func theRefreshReadFallsWithinTheFirstHalfOfTheMargin() {
        let expiresAt = Int(wallStart) + 600
        let read = { (spread: Double) in
            FleetTiming.refreshRead(expiresAt: expiresAt, now: wallStart, refreshMargin: margin, spread: spread)
        }
        #expect(read(0) == wallStart + 540)
        #expect(read(1) == wallStart + 570)
        #expect(FleetTiming.refreshRead(expiresAt: expiresAt, now: wallStart + 541, refreshMargin: margin, spread: 0) == nil)
    }

    @Test func aWaitForAnotherHostsLeaseDoublesToOneSecondWithinItsUpperHalf() {
        var pause = FleetTiming.firstLeaseWait
        var pauses: [Duration] = []
        for jitter in [0.0, 1.0, 0.0, 1.0, 0.0, 1.0] {
            let wait = FleetTiming.leaseWait(pause: pause, roundTrip: .milliseconds(2), remaining: 30, jitter: jitter)
            #expect(wait.sleep == (jitter == 0 ? pause / 2 : pause))
            pauses.append(pause)
            pause = wait.next
        }
        #expect(pauses == [.milliseconds(50), .milliseconds(100), .milliseconds(200), .milliseconds(400),
                           .milliseconds(800), .seconds(1)])
        #expect(pause == .seconds(1))
    }

    @Test func aWaitBehindASlowStoreLastsAtLeastFourRoundTrips() {
        // The store answered in 300 ms (its queue): the waiter sleeps 1.2…2.4 s, not 25…50 ms.
        let slow = FleetTiming.leaseWait(pause: .milliseconds(50), roundTrip: .milliseconds(300), remaining: 30, jitter: 0)
        #expect(slow.sleep == .milliseconds(1200))
        #expect(slow.next == .milliseconds(100), "the pause itself grows as it did")
        let slowest = FleetTiming.leaseWait(pause: .seconds(1), roundTrip: .seconds(2), remaining: 30, jitter: 1)
        #expect(slowest.sleep == .seconds(16))
        // Still never past the lease's expiry.
        #expect(FleetTiming.leaseWait(pause: .seconds(1), roundTrip: .seconds(2), remaining: 3, jitter: 1).sleep
            == .milliseconds(3010))
    }

    @Test func aWaitNeverOutlastsTheLeaseItWaitsFor() {
        // 0.2 s left on the lease: the host looks again just after it runs out, not a second later.
        let wait = FleetTiming.leaseWait(pause: .seconds(1), roundTrip: .zero, remaining: 0.2, jitter: 1)
        #expect(wait.sleep == .milliseconds(210))
        #expect(FleetTiming.leaseWait(pause: .seconds(1), roundTrip: .zero, remaining: 0, jitter: 1).sleep == .milliseconds(10))
    }

    @Test func aHeldLeaseIsRenewedThreeTimesPerLength() {
        // upstream-timeout 10 s: a lease of 15 s, renewed every 5 s; one renewal missed still leaves 5 s.
        #expect(FleetTiming.renewal(of: .seconds(15)) == .seconds(5))
    }
}
