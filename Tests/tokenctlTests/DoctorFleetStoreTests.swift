import Testing
import TokendInterface

@testable import TokenctlProgram

/// What doctor says of tokend's own look at its fleet store (status's fleet.check).
@Suite struct DoctorFleetStoreTests {
    func fleet(_ check: BrokerInterface.StoreCheck?) -> BrokerInterface.FleetStatus {
        .init(following: "polling", pollInterval: 10, copyAge: 1, statements: 3, connects: 1, lastRoundTrip: 0.001,
              lease: nil, check: check)
    }

    @Test func aMissingPrivilegeIsNamedWithTheGrantThatRestoresIt() throws {
        let check = BrokerInterface.StoreCheck(
            user: "tokend", missing: [.init(table: "tokend_shared", privileges: ["INSERT", "UPDATE"])], pooler: "direct", age: 4)
        let results = DoctorFleetCheck.judgeStore(fleet(check), session: "ci")
        let grants = try #require(results.first { $0.check == "fleet store grants (ci)" })
        #expect(grants.outcome == .fail)
        #expect(grants.detail.contains("tokend_shared (INSERT, UPDATE)") && grants.detail.contains("SQLSTATE 42501"))
        #expect(grants.fix == "the DBA runs: GRANT INSERT, UPDATE ON tokend_shared TO tokend;")
        let two = BrokerInterface.StoreCheck(
            user: "app", missing: [.init(table: "tokend_schema", privileges: ["SELECT"]),
                                   .init(table: "tokend_shared", privileges: ["UPDATE"])], pooler: "direct", age: 4)
        #expect(DoctorFleetCheck.judgeGrants(two, check: "g").fix == "the DBA runs: GRANT SELECT, UPDATE ON tokend_schema, tokend_shared TO app;")
        let none = BrokerInterface.StoreCheck(user: "tokend", missing: [], pooler: "direct", age: 4)
        #expect(DoctorFleetCheck.judgeGrants(none, check: "g").outcome == .ok)
    }

    @Test func onlyASessionModePoolerIsWarnedOf() {
        #expect(DoctorFleetCheck.judgePooler("session", check: "p").outcome == .warn)
        #expect(DoctorFleetCheck.judgePooler("session", check: "p").fix?.hasPrefix("pool_mode = transaction") == true)
        for fine in ["direct", "transaction", "unknown"] {
            #expect(DoctorFleetCheck.judgePooler(fine, check: "p").outcome == .ok)
        }
    }

    @Test func nothingToJudgeBeforeTokendLooked() {
        let results = DoctorFleetCheck.judgeStore(fleet(nil), session: "ci")
        #expect(results.count == 2 && results.allSatisfy { $0.outcome == .skip })
        #expect(DoctorFleetCheck.judgeStore(nil, session: "ci").allSatisfy { $0.outcome == .skip })
    }
}
