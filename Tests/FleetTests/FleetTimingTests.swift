import Testing

@testable import Fleet

/// When a host re-reads the fleet's copy and how it waits for another host's
/// lease, with the randomness passed in.
@Suite struct FleetTimingTests {
    let poll = Duration.seconds(10)
    let margin = Duration.seconds(60)
    let now = 1_000_000.0

    func nextRead(expiresAt: Int? = nil, jitter: Double = 0.5, spread: Double = 0) -> Duration {
        FleetTiming.nextRead(expiresAt: expiresAt, now: now, poll: poll, refreshMargin: margin, jitter: jitter, spread: spread)
    }

    @Test func aHostPollsAtItsIntervalWithinTenPercent() {
        #expect(nextRead(jitter: 0) == .seconds(9))
        #expect(nextRead(jitter: 0.5) == .seconds(10))
        #expect(nextRead(jitter: 1) == .seconds(11))
    }

    @Test func aThousandHostsReadAtSpreadInstants() {
        let reads = (0..<1000).map { _ in nextRead(jitter: Double.random(in: 0...1)) }
        let (first, last) = (reads.min()!, reads.max()!)
        #expect(first >= .seconds(9) && last <= .seconds(11))
        #expect(last - first > .milliseconds(1500), "the reads spread over most of the ±10 % window")
        #expect(Set(reads).count > 900)
    }

    @Test func aCopyDueForRefreshBeforeTheNextPollIsReadAtExpiryLessTheMargin() {
        // Due 5 s from now (expiry − 60 s), plus the host's spread of up to a second.
        #expect(nextRead(expiresAt: Int(now) + 65, jitter: 1, spread: 0) == .seconds(5))
        #expect(nextRead(expiresAt: Int(now) + 65, jitter: 1, spread: 0.75) == .seconds(5.75))
        // Due after the next poll: the poll comes first.
        #expect(nextRead(expiresAt: Int(now) + 75, jitter: 0) == .seconds(9))
    }

    @Test func aCopyAlreadyDueIsReadAtThePollNotInALoop() {
        #expect(nextRead(expiresAt: Int(now) + 30, jitter: 0) == .seconds(9))
        #expect(nextRead(expiresAt: Int(now) - 5, jitter: 1) == .seconds(11))
    }

    @Test func aWaitForAnotherHostsLeaseDoublesToOneSecondWithinItsUpperHalf() {
        var pause = FleetTiming.firstLeaseWait
        var pauses: [Duration] = []
        for jitter in [0.0, 1.0, 0.0, 1.0, 0.0, 1.0] {
            let wait = FleetTiming.leaseWait(pause: pause, remaining: 30, jitter: jitter)
            #expect(wait.sleep == (jitter == 0 ? pause / 2 : pause))
            pauses.append(pause)
            pause = wait.next
        }
        #expect(pauses == [.milliseconds(50), .milliseconds(100), .milliseconds(200), .milliseconds(400),
                           .milliseconds(800), .seconds(1)])
        #expect(pause == .seconds(1))
    }

    @Test func aWaitNeverOutlastsTheLeaseItWaitsFor() {
        // 0.2 s left on the lease: the host looks again just after it runs out, not a second later.
        let wait = FleetTiming.leaseWait(pause: .seconds(1), remaining: 0.2, jitter: 1)
        #expect(wait.sleep == .milliseconds(210))
        #expect(FleetTiming.leaseWait(pause: .seconds(1), remaining: 0, jitter: 1).sleep == .milliseconds(10))
    }

    @Test func aHeldLeaseIsRenewedThreeTimesPerLength() {
        // upstream-timeout 10 s: a lease of 15 s, renewed every 5 s; one renewal missed still leaves 5 s.
        #expect(FleetTiming.renewal(of: .seconds(15)) == .seconds(5))
    }
}
