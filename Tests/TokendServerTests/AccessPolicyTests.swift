import Broker
import Config
import Testing
import UnixServer
import Varlink

@testable import TokendServer

/// Who may call what, from the peer's uid, gid and the supplementary groups
/// the kernel recorded at connect: no user or group database is consulted.
@Suite struct AccessPolicyTests {
    func policy(_ configure: (inout AccessSettings) -> Void) throws -> AccessPolicy {
        var settings = AccessSettings()
        configure(&settings)
        return try AccessPolicy(settings)
    }

    @Test func aSupplementaryGroupAdmitsWithoutALookUp() throws {
        let rules = try policy { $0.readGroups = ["4301"] }
        let member = PeerCredentials(pid: 1, uid: 4300, gid: 4300, groups: [4301])
        let outsider = PeerCredentials(pid: 1, uid: 4300, gid: 4300, groups: [4302])
        #expect(rules.allows(member, .read, session: nil))
        #expect(!rules.allows(outsider, .read, session: nil))
        #expect(!rules.allows(member, .admin, session: nil))
    }

    @Test func widerClassesIncludeNarrowerOnes() throws {
        let rules = try policy {
            $0.adminUsers = ["10"]
            $0.cookiesWriteUsers = ["20"]
            $0.readUsers = ["30"]
            $0.readGroups = []
        }
        let admin = PeerCredentials(pid: 1, uid: 10, gid: 10)
        let writer = PeerCredentials(pid: 1, uid: 20, gid: 20)
        let reader = PeerCredentials(pid: 1, uid: 30, gid: 30)
        #expect(rules.allows(admin, .read, session: nil) && rules.allows(admin, .cookiesWrite, session: nil))
        #expect(rules.allows(writer, .cookiesWrite, session: nil) && !rules.allows(writer, .admin, session: nil))
        #expect(rules.allows(reader, .read, session: nil) && !rules.allows(reader, .cookiesWrite, session: nil))
        #expect(!rules.allows(nil, .read, session: nil), "no credentials, no access")
    }

    @Test func standingAtAcceptDecidesSlots() throws {
        let rules = try policy {
            $0.adminUsers = ["10"]
            $0.readUsers = ["30"]
            $0.readGroups = []
        }
        #expect(isAdmin(rules.standing(of: PeerCredentials(pid: 1, uid: 10, gid: 10))))
        #expect(isCaller(rules.standing(of: PeerCredentials(pid: 1, uid: 30, gid: 30))))
        #expect(isRefused(rules.standing(of: PeerCredentials(pid: 1, uid: 40, gid: 40))), "a peer allowed nothing")
        #expect(isRefused(rules.standing(of: nil)))
    }

    @Test func aSessionsOwnRulesCountForStanding() throws {
        var global = AccessSettings()
        global.readGroups = []
        var own = AccessSettings()
        own.readUsers = ["50"]
        var session = SessionSettings(name: "web", tokenEndpoint: nil, clientID: "app")
        session.access = own
        let rules = try AccessPolicy(global, sessions: [session])
        let peer = PeerCredentials(pid: 1, uid: 50, gid: 50)
        #expect(rules.allows(peer, .read, session: "web") && !rules.allows(peer, .read, session: nil))
        #expect(isCaller(rules.standing(of: peer)), "a reader of one session holds a caller's slot")
    }

    func isAdmin(_ standing: VarlinkServer.Standing) -> Bool { if case .admin = standing { true } else { false } }
    func isCaller(_ standing: VarlinkServer.Standing) -> Bool { if case .caller = standing { true } else { false } }
    func isRefused(_ standing: VarlinkServer.Standing) -> Bool { if case .refused = standing { true } else { false } }
}

/// The fast path answers only a plain GetToken it fully understands, for a
/// caller who may read; everything else goes the ordinary way (nil).
@Suite struct FastGetTokenTests {
    let fast: FastGetToken = {
        var settings = AccessSettings()
        settings.readUsers = ["30"]
        settings.readGroups = []
        let policy = try! AccessPolicy(settings)
        return FastGetToken(broker: Broker(sessions: []), policy: { policy })
    }()
    let reader = PeerCredentials(pid: 1, uid: 30, gid: 30)

    @Test func unusualCallsGoTheOrdinaryWay() {
        let method = "io.tokend.Broker.GetToken"
        for call in [
            VarlinkCall(method: "io.tokend.Broker.GetStatus"),
            VarlinkCall(method: method, more: true), VarlinkCall(method: method, oneway: true),
            VarlinkCall(method: method, upgrade: true),
            VarlinkCall(method: method, parameters: ["minValidSeconds": -1]),
            VarlinkCall(method: method, parameters: ["minValidSeconds": "soon"]),
            VarlinkCall(method: method, parameters: ["unknown": 1]),
        ] {
            #expect(fast.answer(call, peer: reader) == nil, "\(call)")
        }
    }

    @Test func aCallerWhoMayNotReadOrAnUnknownSessionIsNotAnsweredHere() {
        let call = VarlinkCall(method: "io.tokend.Broker.GetToken")
        #expect(fast.answer(call, peer: PeerCredentials(pid: 1, uid: 40, gid: 40)) == nil)
        #expect(fast.answer(call, peer: nil) == nil)
        #expect(fast.answer(call, peer: reader) == nil, "no session named default: the service answers NoSuchSession")
    }
}
