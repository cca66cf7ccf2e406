import Broker
import Config
import Logging
import Testing
import Varlink

@testable import TokendServer

/// What a call through a share is turned into before the broker methods see
/// it: held to the share's session, resources and scope, made as the creator,
/// and refused once the share has ended.
@Suite struct ShareServiceTests {
    static let creator = PeerCredentials(pid: 77, uid: 4300, gid: 4300, groups: [10], person: 4300)

    static func service(resources: [String] = [], scope: String? = nil, live: Bool = true) -> ShareService {
        let shares = Shares(broker: Broker(sessions: []), logger: Logger(label: "test"))
        let record = Shares.Record(
            id: 1, path: "/tmp/s.sock", session: "work", resources: resources, scope: scope, expiresAt: 0, mode: 0o600,
            creator: creator)
        let tools = Shares.Tools(
            policy: { try! AccessPolicy(AccessSettings()) }, key: { _, _, _, _ in .session }, tokenMethods: [:],
            fanOuts: FanOuts())
        return ShareService(record: record, shares: shares, tools: tools) { live }
    }

    static let caller = CallContext(peer: PeerCredentials(pid: 1, uid: 300_000, gid: 300_000), method: "GetToken")

    func narrowed(_ service: ShareService, _ parameters: JSONObject, method: String = "GetToken") throws -> JSONObject {
        try service.narrow(parameters, Self.caller, method: method).0
    }

    @Test func callsAreMadeAsTheCreatorForTheSharesSession() throws {
        let (parameters, context) = try Self.service().narrow([:], Self.caller, method: "GetToken")
        #expect(parameters == ["session": "work"])
        #expect(context.peer == Self.creator)
        #expect(throws: VarlinkError.permissionDenied) { try narrowed(Self.service(), ["session": "other"]) }
        #expect(throws: VarlinkError.permissionDenied) { try narrowed(Self.service(), ["resource": "https://a.test/"]) }
        #expect(throws: VarlinkError.permissionDenied) { try narrowed(Self.service(), ["scope": "read"]) }
    }

    @Test func aResourceShareGivesItsResourcesOnly() throws {
        let one = Self.service(resources: ["https://mail.test/"])
        #expect(try narrowed(one, [:])["resource"] == "https://mail.test/")
        #expect(throws: VarlinkError.permissionDenied) { try narrowed(one, ["resource": "https://admin.test/"]) }
        let two = Self.service(resources: ["https://mail.test/", "https://files.test/"])
        #expect(throws: VarlinkError.invalidParameter("resource")) { try narrowed(two, [:]) }
        #expect(try narrowed(two, ["resource": "https://files.test/"])["resource"] == "https://files.test/")
    }

    @Test func aScopedShareForcesItsScopeAndGivesNoProofs() throws {
        let scoped = Self.service(scope: "read")
        #expect(try narrowed(scoped, [:])["scope"] == "read")
        #expect(throws: VarlinkError.permissionDenied) { try narrowed(scoped, ["scope": "read write"]) }
        #expect(throws: VarlinkError.permissionDenied) {
            try narrowed(scoped, ["method": "GET", "url": "https://a.test/"], method: "GetProof")
        }
        #expect(try narrowed(Self.service(), ["method": "GET", "url": "https://a.test/"], method: "GetProof")["url"] != nil)
    }

    @Test func cookieChangesAndEndedSharesAreRefused() throws {
        #expect(throws: VarlinkError.permissionDenied) { try narrowed(Self.service(), ["sinceVersion": 0], method: "Subscribe") }
        #expect(throws: VarlinkError.permissionDenied) { try narrowed(Self.service(live: false), [:]) }
    }
}
