import Broker
import Testing

@testable import Fleet

/// How two client connections' backend pids tell what stands between a host
/// and PostgreSQL, and what status says of the check.
@Suite struct StoreCheckTests {
    @Test func aServerConnectionHandedToTheSecondClientIsATransactionPooler() {
        #expect(Pooler.judge(first: 41, second: 41, again: 41, serverPort: 5432, ourPort: 6432) == .transaction)
        #expect(Pooler.judge(first: 41, second: 41, again: 52, serverPort: nil, ourPort: 6432) == .transaction)
    }

    @Test func eachClientKeepingItsOwnServerConnectionIsASessionPoolerOrPostgreSQL() {
        // PostgreSQL answers on the port the host connected to; a pooler reaches it on another, or by its socket.
        #expect(Pooler.judge(first: 41, second: 52, again: 41, serverPort: 5432, ourPort: 5432) == .direct)
        #expect(Pooler.judge(first: 41, second: 52, again: 41, serverPort: 5432, ourPort: 6432) == .session)
        #expect(Pooler.judge(first: 41, second: 52, again: 41, serverPort: nil, ourPort: 6432) == .session)
    }

    @Test func aFirstClientMovedToAnotherServerConnectionCannotBeTold() {
        #expect(Pooler.judge(first: 41, second: 52, again: 63, serverPort: 5432, ourPort: 6432) == .unknown)
    }

    @Test func statusCarriesTheCheckAndItsAge() {
        let asked = ContinuousClock.now
        var sightings = StoreSightings()
        sightings.check = StoreFacts(user: "tokend", missing: ["tokend_shared": ["INSERT"]], pooler: .session, asked: asked)
        let status = sightings.status(
            following: .polling, pollInterval: .seconds(10), statements: 1, connects: 1, hostID: "a",
            now: asked + .seconds(90))
        #expect(status.check == StoreCheckStatus(user: "tokend", missing: ["tokend_shared": ["INSERT"]], pooler: "session", age: 90))
        #expect(StoreSightings().status(
            following: .polling, pollInterval: .seconds(10), statements: 0, connects: 0, hostID: "a", now: asked).check == nil)
    }
}
