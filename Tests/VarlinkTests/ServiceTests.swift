import Synchronization
import Testing
@testable import Varlink

@Suite struct ServiceTests {
    let interface = try! VarlinkInterface(description: """
        # test
        interface org.example.test
        type T (a: int)
        method Echo(text: string) -> (text: string)
        method Count(to: int) -> (n: int)
        method Declared() -> ()
        method Fail(name: string) -> ()
        error Oops (why: string)
        """)

    var service: VarlinkService {
        VarlinkService(
            info: ServiceInfo(vendor: "v", product: "p", version: "1", url: "u"),
            implementations: [
                VarlinkImplementation(
                    interface: interface,
                    methods: [
                        "Echo": .call { p, _ in ["text": .string(try p.string("text"))] },
                        "Fail": .call { p, _ in throw VarlinkError("org.example.test.\(try p.string("name"))") },
                        "Count": .stream { p, _, out in
                            let n = try p.optionalInt("to") ?? 0
                            for i in 1...n { try await out.yield(["n": .int(i)], continues: i < n) }
                        },
                    ])
            ])
    }

    func replies(_ call: VarlinkCall) async throws -> [VarlinkReply] {
        let collected = Mutex<[VarlinkReply]>([])
        try await service.handle(call, peer: nil) { reply in collected.withLock { $0.append(reply) } }
        return collected.withLock { $0 }
    }

    @Test func readsNamesFromTheDeclaration() {
        #expect(interface.name == "org.example.test")
        #expect(Set(interface.methods.keys) == ["Echo", "Count", "Declared", "Fail"])
        #expect(Set(interface.errors.keys) == ["Oops"])
    }

    @Test func answersGetInfoAndDescriptions() async throws {
        let info = try await replies(VarlinkCall(method: "org.varlink.service.GetInfo"))
        #expect(info.first?.parameters["interfaces"] == ["org.varlink.service", "org.example.test"])
        let description = try await replies(
            VarlinkCall(method: "org.varlink.service.GetInterfaceDescription", parameters: ["interface": "org.example.test"]))
        #expect(description.first?.parameters["description"] == .string(interface.description))
        let missing = try await replies(
            VarlinkCall(method: "org.varlink.service.GetInterfaceDescription", parameters: ["interface": "no.such"]))
        #expect(missing.first?.error == "org.varlink.service.InterfaceNotFound")
    }

    @Test func reportsUnknownAndUnimplementedMethods() async throws {
        #expect(try await replies(VarlinkCall(method: "org.example.test.Nope")).first?.error == "org.varlink.service.MethodNotFound")
        #expect(try await replies(VarlinkCall(method: "no.such.Method")).first?.error == "org.varlink.service.InterfaceNotFound")
        #expect(try await replies(VarlinkCall(method: "noDot")).first?.error == "org.varlink.service.MethodNotFound")
        #expect(try await replies(VarlinkCall(method: "org.example.test.Declared")).first?.error == "org.varlink.service.MethodNotImplemented")
    }

    @Test func invalidParametersAreNamed() async throws {
        let reply = try await replies(VarlinkCall(method: "org.example.test.Echo", parameters: ["text": 5]))
        #expect(reply == [VarlinkReply(.invalidParameter("text"))])
    }

    @Test func callsAreCheckedAgainstTheDeclarationBeforeTheyRun() async throws {
        let ran = Mutex(0)
        let service = VarlinkService(
            info: ServiceInfo(vendor: "v", product: "p", version: "1", url: "u"),
            implementations: [
                VarlinkImplementation(interface: interface, methods: [
                    "Echo": .call { _, _ in ran.withLock { $0 += 1 }; return ["text": "ran"] },
                ])
            ])
        func reply(_ call: VarlinkCall) async throws -> VarlinkReply? {
            let collected = Mutex<[VarlinkReply]>([])
            try await service.handle(call, peer: nil) { reply in collected.withLock { $0.append(reply) } }
            return collected.withLock { $0.first }
        }
        let echo = "org.example.test.Echo"
        #expect(try await reply(VarlinkCall(method: echo, parameters: [:])) == VarlinkReply(.invalidParameter("text")))
        #expect(try await reply(VarlinkCall(method: echo, parameters: ["text": ["x"]])) == VarlinkReply(.invalidParameter("text")))
        #expect(try await reply(VarlinkCall(method: echo, parameters: ["text": "x", "loud": true])) == VarlinkReply(.invalidParameter("loud")))
        #expect(ran.withLock { $0 } == 0)
        #expect(try await reply(VarlinkCall(method: echo, parameters: ["text": "x", "loud": nil]))?.parameters == ["text": "ran"])
        // org.varlink.service's own methods are checked against its declaration too.
        let describe = VarlinkCall(method: "org.varlink.service.GetInterfaceDescription", parameters: ["interface": 1])
        #expect(try await reply(describe) == VarlinkReply(.invalidParameter("interface")))
        #expect(try await reply(VarlinkCall(method: "org.varlink.service.GetInfo", parameters: ["verbose": true]))
            == VarlinkReply(.invalidParameter("verbose")))
        // What a server's fast path asks before answering on its own.
        #expect(service.refusal(of: VarlinkCall(method: echo, parameters: ["text": 1])) == .invalidParameter("text"))
        #expect(service.refusal(of: VarlinkCall(method: "org.example.test.Nope")) == .methodNotFound("org.example.test.Nope"))
        #expect(service.refusal(of: VarlinkCall(method: echo, parameters: ["text": "x"])) == nil)
    }

    @Test func streamingNeedsMoreAndEndsWithoutContinues() async throws {
        let refused = try await replies(VarlinkCall(method: "org.example.test.Count", parameters: ["to": 3]))
        #expect(refused.first?.error == "org.varlink.service.ExpectedMore")
        let streamed = try await replies(VarlinkCall(method: "org.example.test.Count", parameters: ["to": 3], more: true))
        #expect(streamed.map(\.continues) == [true, true, false])
        #expect(streamed.map { $0.parameters["n"] } == [1, 2, 3])
    }

    @Test func onlyDeclaredErrorsGoOut() async throws {
        let declared = try await replies(VarlinkCall(method: "org.example.test.Fail", parameters: ["name": "Oops"]))
        #expect(declared.first?.error == "org.example.test.Oops")
        let undeclared = try await replies(VarlinkCall(method: "org.example.test.Fail", parameters: ["name": "Nope"]))
        #expect(undeclared.first?.error == "org.varlink.service.InternalError")
    }

    @Test func onewayCallsGetNoReply() async throws {
        #expect(try await replies(VarlinkCall(method: "org.example.test.Echo", parameters: ["text": "x"], oneway: true)).isEmpty)
    }
}
