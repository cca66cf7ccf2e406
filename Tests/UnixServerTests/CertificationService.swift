// org.varlink.certification for the reference suite: it checks every
// argument a client sends against what the previous answer implies, and
// answers with the values the next step expects. Its calls reach these
// handlers only once the declaration (the .varlink resource) accepted them, as
// tokend's do. Test-only: it is built with the tests, never by a user's
// `swift build`.
import Foundation
import Synchronization
import Varlink

let certificationInterface = try! VarlinkInterface(
    description: String(decoding: PackageResources.org_varlink_certification_varlink, as: UTF8.self))

/// Which method each client must call next.
let certificationExpected = Mutex<[String: String]>([:])

private func certificationError(_ wants: JSONValue, _ got: JSONObject) -> VarlinkError {
    VarlinkError("org.varlink.certification.CertificationError", ["wants": wants, "got": .object(got)])
}

/// Checks the step order and the arguments, then moves the client on.
private func step(_ method: String, next: String, _ parameters: JSONObject, wants: JSONObject) throws -> Void {
    guard case .string(let client)? = parameters["client_id"] else {
        throw VarlinkError("org.varlink.certification.ClientIdError")
    }
    let ok = certificationExpected.withLock { table -> Bool in
        guard table[client] == method else { return false }
        table[client] = next
        return true
    }
    guard ok else { throw VarlinkError("org.varlink.certification.ClientIdError") }
    var full = wants
    full["client_id"] = .string(client)
    guard full == parameters else {
        certificationExpected.withLock { $0[client] = nil }
        throw certificationError(.object(full), parameters)
    }
}

private let pi = 3.141592653589793
private let stringSet: JSONValue = ["one": [:], "two": [:], "three": [:]]
private let fooBar: JSONValue = ["foo": "Foo", "bar": "Bar"]
private let myType: JSONValue = [
    "object": ["method": "org.varlink.certification.Test09", "parameters": ["map": fooBar]],
    "enum": "two",
    "struct": ["first": 1, "second": "2"],
    "array": ["one", "two", "three"],
    "dictionary": fooBar,
    "stringset": stringSet,
    "interface": [
        "foo": [nil, ["foo": "foo", "bar": "bar"], nil, ["one": "foo", "two": "bar"]],
        "anon": ["foo": true, "bar": false],
    ],
]

private let replies = (1...10).map { JSONValue.string("Reply number \($0)") }

let certificationImplementation = VarlinkImplementation(
    interface: certificationInterface,
    methods: [
        "Start": .call { parameters, _ in
            guard parameters.isEmpty else { throw certificationError([:], parameters) }
            let client = UUID().uuidString.lowercased()
            certificationExpected.withLock { $0[client] = "Test01" }
            return ["client_id": .string(client)]
        },
        "Test01": .call { p, _ in try step("Test01", next: "Test02", p, wants: [:]); return ["bool": true] },
        "Test02": .call { p, _ in try step("Test02", next: "Test03", p, wants: ["bool": true]); return ["int": 1] },
        "Test03": .call { p, _ in try step("Test03", next: "Test04", p, wants: ["int": 1]); return ["float": 1.0] },
        "Test04": .call { p, _ in
            var p = p
            if let f = p["float"]?.doubleValue { p["float"] = .double(f) }
            try step("Test04", next: "Test05", p, wants: ["float": 1.0])
            return ["string": "ping"]
        },
        "Test05": .call { p, _ in
            try step("Test05", next: "Test06", p, wants: ["string": "ping"])
            return ["bool": false, "int": 2, "float": .double(pi), "string": "a lot of string"]
        },
        "Test06": .call { p, _ in
            try step("Test06", next: "Test07", p, wants: ["bool": false, "int": 2, "float": .double(pi), "string": "a lot of string"])
            return ["struct": ["bool": false, "int": 2, "float": .double(pi), "string": "a lot of string"]]
        },
        "Test07": .call { p, _ in
            try step("Test07", next: "Test08", p,
                wants: ["struct": ["bool": false, "int": 2, "float": .double(pi), "string": "a lot of string"]])
            return ["map": fooBar]
        },
        "Test08": .call { p, _ in
            try step("Test08", next: "Test09", p, wants: ["map": fooBar])
            return ["set": stringSet]
        },
        "Test09": .call { p, _ in
            try step("Test09", next: "Test10", p, wants: ["set": stringSet])
            return ["mytype": myType]
        },
        "Test10": .stream { p, _, out in
            // Optional members may be sent as null or left out.
            var p = p
            if var sent = p["mytype"]?.objectValue {
                for key in ["nullable", "nullable_array_struct"] where sent[key] == .null { sent[key] = nil }
                p["mytype"] = .object(sent)
            }
            try step("Test10", next: "Test11", p, wants: ["mytype": myType])
            for (index, reply) in replies.enumerated() {
                try await out.yield(["string": reply], continues: index < replies.count - 1)
            }
        },
        "Test11": .call { p, context in
            guard context.oneway else { throw certificationError(["oneway": true], p) }
            try step("Test11", next: "End", p, wants: ["last_more_replies": .array(replies)])
            return [:]
        },
        "End": .call { p, _ in
            try step("End", next: "", p, wants: [:])
            if case .string(let client)? = p["client_id"] { certificationExpected.withLock { $0[client] = nil } }
            return ["all_ok": true]
        },
    ])

let certificationService = VarlinkService(
    info: ServiceInfo(vendor: "tokend", product: "varlink-certification", version: "1", url: "https://tokend.invalid/"),
    implementations: [certificationImplementation])
