import Foundation
import Testing
import Varlink

@testable import TokendInterface

/// The Codable wire types against io.tokend.Broker.varlink, read by the one
/// parser the server checks calls with, member by member: for every type and
/// every method's parameters and reply, an object built from the declaration
/// decodes into the Swift type and encodes back to the same members, which the
/// declaration accepts; a declared optional may be left out, a required one
/// may not.
@Suite struct SchemaTests {
    let declaration = BrokerInterface.declaration

    @Test func everyMethodIsDeclaredAndEveryDeclaredMethodHasItsTypes() {
        #expect(Set(BrokerInterface.methods.keys) == Set(declaration.methods.keys))
        #expect(BrokerInterface.methods["Subscribe"]?.streams == true)
    }

    @Test func methodParametersAndRepliesMatchTheDeclaration() throws {
        for (name, method) in declaration.methods.sorted(by: { $0.key < $1.key }) {
            let types = try #require(BrokerInterface.methods[name])
            let parameters = try check(types.parameters, against: method.input, what: "\(name) parameters")
            #expect(declaration.invalidParameter(parameters, method: name) == nil, "\(name): the server accepts what clients send")
            let reply = try check(types.reply, against: method.output, what: "\(name) reply")
            #expect(declaration.invalidReplyParameter(reply, method: name) == nil, "\(name): the reply is as declared")
        }
    }

    @Test func theNamedTypesMatchTheDeclaration() throws {
        let swift: [String: any Codable.Type] = [
            "Token": BrokerInterface.Token.self, "SessionStatus": BrokerInterface.SessionStatus.self,
            "PendingLogin": BrokerInterface.PendingLogin.self, "Cookie": BrokerInterface.Cookie.self,
            "CookieChange": BrokerInterface.CookieChange.self, "KeyedToken": BrokerInterface.KeyedToken.self,
            "ResourceAccess": BrokerInterface.ResourceAccess.self, "DPoPStatus": BrokerInterface.DPoPStatus.self,
            "Share": BrokerInterface.Share.self, "SessionAccess": BrokerInterface.SessionAccess.self,
        ]
        #expect(Set(swift.keys) == Set(declaration.types.keys))
        for (name, type) in declaration.types {
            guard case .structure(let members) = type else {
                Issue.record("type \(name) is not a struct")
                continue
            }
            try check(try #require(swift[name]), against: members, what: "type \(name)")
        }
    }

    @Test func theErrorsAreTheDeclaredOnes() {
        let declared = Set(declaration.errors.keys.map { "\(BrokerInterface.name).\($0)" })
        #expect(Set(BrokerInterface.Error.all) == declared)
    }

    /// The three properties above, for one Swift type and one declared member
    /// list; returns what the Swift type encodes from the full example.
    @discardableResult
    func check(_ type: any Codable.Type, against members: [VarlinkField], what: String) throws -> JSONObject {
        let full = example(of: members)
        let decoded = try decode(type, full)
        let encoded = try JSONValue(encoding: decoded).objectValue ?? [:]
        #expect(Set(encoded.keys) == Set(members.map(\.name)), "\(what): members")
        #expect(JSONValue.object(encoded) == .object(full), "\(what): values round-trip")
        for member in members {
            var without = full
            without[member.name] = nil
            let decodes = (try? decode(type, without)) != nil
            #expect(decodes == member.isOptional, "\(what): \(member.name) is \(member.isOptional ? "" : "not ")optional")
        }
        return encoded
    }

    func decode(_ type: any Codable.Type, _ object: JSONObject) throws -> any Encodable {
        try JSONValue.object(object).decode(type)
    }

    /// An object with every member set to a value of its declared type.
    func example(of members: [VarlinkField]) -> JSONObject {
        var object: JSONObject = [:]
        for member in members { object[member.name] = value(of: member.type) }
        return object
    }

    func value(of type: VarlinkType) -> JSONValue {
        switch type {
        case .bool: true
        case .int: 7
        case .float: 0.5
        case .string: "text"
        case .object: ["any": "thing"]
        case .nullable(let inner): value(of: inner)
        case .array(let element): .array([value(of: element)])
        case .map(let element): .object(["key": value(of: element)])
        case .enumeration(let names): .string(names[0])
        case .structure(let members): .object(example(of: members))
        case .named(let name): value(of: declaration.types[name]!)
        }
    }
}
