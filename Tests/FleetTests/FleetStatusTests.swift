import Broker
import Testing

@testable import Fleet

/// What status says of the store, from what the host has seen of it: the
/// lease's time left by the database's clock less the time since, the copy's
/// age, and how the host follows the fleet.
@Suite struct FleetStatusTests {
    let seen = ContinuousClock.now

    func status(
        _ sightings: StoreSightings, after elapsed: Duration, following: Following = .polling
    ) -> FleetStatus {
        sightings.status(
            following: following, pollInterval: .seconds(10), statements: 12, connects: 3, hostID: "app-1",
            now: seen + elapsed)
    }

    func lease(holder: String, remaining: Duration) -> StoreSightings {
        StoreSightings(lease: LeaseSighting(holder: holder, epoch: 17, remaining: remaining, seen: seen))
    }

    @Test func aLeasesTimeLeftIsTheDatabasesFigureLessTheTimeSince() {
        let sighting = LeaseSighting(holder: "app-2", epoch: 17, remaining: .seconds(14), seen: seen)
        #expect(sighting.left(at: seen + .seconds(4)) == .seconds(10))
        #expect(sighting.left(at: seen + .seconds(20)) == .zero)
        let shown = status(lease(holder: "app-2", remaining: .seconds(14)), after: .seconds(4)).lease
        #expect(shown == FleetLeaseStatus(holder: "app-2", epoch: 17, remaining: 10, heldHere: false))
    }

    @Test func aLeaseThatHasRunOutSinceItWasSeenIsNotShownHeld() {
        #expect(status(lease(holder: "app-2", remaining: .seconds(14)), after: .seconds(14)).lease == nil)
    }

    @Test func thisHostsOwnLeaseIsShownHeldHere() {
        let shown = status(lease(holder: "app-1", remaining: .seconds(15)), after: .seconds(1)).lease
        #expect(shown?.heldHere == true && shown?.remaining == 14)
    }

    @Test func theCopysAgeCountsFromTheLastReadOrWrite() {
        #expect(status(StoreSightings(copySeen: seen), after: .milliseconds(2500)).copyAge == 2.5)
        #expect(status(StoreSightings(), after: .seconds(30)).copyAge == nil, "never read: no age")
    }

    @Test func theRoundTripAndCountsAreTheStoresOwn() {
        let shown = status(StoreSightings(lastRoundTrip: .microseconds(1500)), after: .zero)
        #expect(shown.lastRoundTrip == 0.0015 && shown.statements == 12 && shown.connects == 3 && shown.pollInterval == 10)
    }

    @Test func listenFallsBackToPollingUnlessItsProbeIsHeard() {
        #expect(Following(probeHeard: true) == .listening)
        #expect(Following(probeHeard: false) == .notificationsLost, "the notification stream ended")
        #expect(Following(probeHeard: nil) == .notificationsLost, "the wait for the probe ran out")
        #expect(status(StoreSightings(), after: .zero, following: Following(probeHeard: nil)).following == "notificationsLost")
        #expect(status(StoreSightings(), after: .zero, following: .polling).following == "polling")
    }
}
