import Foundation
import Testing
import Varlink

@testable import TokendInterface

/// The Codable wire types against io.tokend.Broker.varlink, member by member:
/// for every type and every method's parameters and reply, an object built
/// from the declaration decodes into the Swift type and encodes back to the
/// same members; a declared optional may be left out, a required one may not.
@Suite struct SchemaTests {
    let declaration = Declaration(BrokerInterface.declaration.description)

    @Test func everyMethodIsDeclaredAndEveryDeclaredMethodHasItsTypes() {
        #expect(Set(BrokerInterface.methods.keys) == Set(declaration.methods.keys))
        #expect(BrokerInterface.methods["Subscribe"]?.streams == true)
    }

    @Test func methodParametersAndRepliesMatchTheDeclaration() throws {
        for (name, method) in declaration.methods.sorted(by: { $0.key < $1.key }) {
            let types = try #require(BrokerInterface.methods[name])
            try check(types.parameters, against: method.parameters, what: "\(name) parameters")
            try check(types.reply, against: method.reply, what: "\(name) reply")
        }
    }

    @Test func theNamedTypesMatchTheDeclaration() throws {
        let swift: [String: any Codable.Type] = [
            "Token": BrokerInterface.Token.self, "SessionStatus": BrokerInterface.SessionStatus.self,
            "PendingLogin": BrokerInterface.PendingLogin.self, "Cookie": BrokerInterface.Cookie.self,
            "CookieChange": BrokerInterface.CookieChange.self,
        ]
        #expect(Set(swift.keys) == Set(declaration.types.keys))
        for (name, members) in declaration.types {
            try check(try #require(swift[name]), against: members, what: "type \(name)")
        }
    }

    @Test func theErrorsAreTheDeclaredOnes() {
        let declared = Set(declaration.errors.map { "\(BrokerInterface.name).\($0)" })
        #expect(Set(BrokerInterface.Error.all) == declared)
    }

    /// The three properties above, for one Swift type and one declared member list.
    func check(_ type: any Codable.Type, against members: [Member], what: String) throws {
        let full = declaration.example(of: members)
        let decoded = try decode(type, full)
        let encoded = try JSONValue(encoding: decoded).objectValue ?? [:]
        #expect(Set(encoded.keys) == Set(members.map(\.name)), "\(what): members")
        #expect(JSONValue.object(encoded) == .object(full), "\(what): values round-trip")
        for member in members {
            var without = full
            without[member.name] = nil
            let decodes = (try? decode(type, without)) != nil
            #expect(decodes == member.optional, "\(what): \(member.name) is \(member.optional ? "" : "not ")optional")
        }
    }

    func decode(_ type: any Codable.Type, _ object: JSONObject) throws -> any Encodable {
        try JSONValue.object(object).decode(type)
    }
}

struct Member {
    let name: String
    let type: String
    var optional: Bool { type.hasPrefix("?") }
}

/// Just enough of the Varlink interface grammar for this file: types,
/// methods and errors with flat member lists.
struct Declaration {
    var types: [String: [Member]] = [:]
    var methods: [String: (parameters: [Member], reply: [Member])] = [:]
    var errors: [String] = []

    init(_ text: String) {
        let code = text.split(separator: "\n").map { $0.split(separator: "#", maxSplits: 1).first.map(String.init) ?? "" }
            .joined(separator: " ")
        let pattern = #/(type|method|error)\s+(\w+)\s*\(([^)]*)\)(?:\s*->\s*\(([^)]*)\))?/#
        for match in code.matches(of: pattern) {
            let (kind, name) = (String(match.1), String(match.2))
            let parameters = Self.members(String(match.3))
            switch kind {
            case "type": types[name] = parameters
            case "method": methods[name] = (parameters, Self.members(String(match.4 ?? "")))
            default: errors.append(name)
            }
        }
    }

    static func members(_ list: String) -> [Member] {
        list.split(separator: ",").compactMap { item in
            let parts = item.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            return parts.count == 2 ? Member(name: parts[0], type: parts[1]) : nil
        }
    }

    /// An object with every member set to a value of its declared type.
    func example(of members: [Member]) -> JSONObject {
        var object: JSONObject = [:]
        for member in members { object[member.name] = value(of: member.type) }
        return object
    }

    func value(of type: String) -> JSONValue {
        if type.hasPrefix("?") { return value(of: String(type.dropFirst())) }
        if type.hasPrefix("[]") { return .array([value(of: String(type.dropFirst(2)))]) }
        switch type {
        case "string": return "text"
        case "int": return 7
        case "bool": return true
        default: return .object(example(of: types[type] ?? []))
        }
    }
}
