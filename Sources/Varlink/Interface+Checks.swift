/// The declaration compiled once into checks over parsed JSON, as sd-varlink
/// validates every call against its interface before dispatch. Named types
/// become indexes (no name lookup while checking, and recursive types need
/// no cycle); a call costs one lookup per declared member.
///
/// Absent and null are the same (Varlink's `?T`). A member the declaration
/// does not have is refused, unless it is null: null says nothing, and a
/// client built against a newer declaration sends its new optional members
/// as null to an older server.
struct InterfaceChecks: Sendable {
    indirect enum Check: Sendable {
        case bool, int, float, string, object
        case nullable(Check)
        case array(Check)
        case map(Check)
        case enumeration(Set<String>)
        case structure(Members)
        case named(Int)
    }

    struct Members: Sendable {
        let members: [(name: String, check: Check, optional: Bool)]
    }

    let types: [Check]
    let inputs: [String: Members]
    let outputs: [String: Members]

    init(types declared: [String: VarlinkType], methods: [String: VarlinkMethod]) {
        let names = declared.keys.sorted()
        var index: [String: Int] = [:]
        for (position, name) in names.enumerated() { index[name] = position }
        func compile(_ type: VarlinkType) -> Check {
            switch type {
            case .bool: .bool
            case .int: .int
            case .float: .float
            case .string: .string
            case .object: .object
            case .nullable(let inner): .nullable(compile(inner))
            case .array(let element): .array(compile(element))
            case .map(let value): .map(compile(value))
            case .enumeration(let values): .enumeration(Set(values))
            case .structure(let fields): .structure(members(fields))
            // The parser refuses undeclared names; nothing else builds a VarlinkInterface.
            case .named(let name): index[name].map { .named($0) } ?? .enumeration([])
            }
        }
        func members(_ fields: [VarlinkField]) -> Members {
            Members(members: fields.map { field in
                if case .nullable(let inner) = field.type { (field.name, compile(inner), true) } else { (field.name, compile(field.type), false) }
            })
        }
        types = names.map { compile(declared[$0]!) }
        inputs = methods.mapValues { members($0.input) }
        outputs = methods.mapValues { members($0.output) }
    }

    /// The first member of `object` that `members` does not accept, or nil.
    func firstInvalid(_ object: JSONObject, _ members: Members) -> String? {
        var present = 0
        for member in members.members {
            switch object[member.name] {
            case nil:
                if !member.optional { return member.name }
            case .null?:
                present += 1
                if !member.optional { return member.name }
            case let value?:
                present += 1
                if !accepts(value, member.check) { return member.name }
            }
        }
        guard present < object.count else { return nil }
        return object.first { key, value in !value.isNull && !members.members.contains { $0.name == key } }?.key
    }

    func accepts(_ value: JSONValue, _ check: Check) -> Bool {
        switch (check, value) {
        case (.bool, .bool), (.string, .string), (.object, .object), (.float, .int), (.float, .double): return true
        case (.int, _): return value.intValue != nil
        case (.nullable(let inner), _): return value.isNull || accepts(value, inner)
        case (.array(let element), .array(let values)): return values.allSatisfy { accepts($0, element) }
        case (.map(let check), .object(let values)): return values.values.allSatisfy { accepts($0, check) }
        case (.enumeration(let names), .string(let name)): return names.contains(name)
        case (.structure(let members), .object(let object)): return firstInvalid(object, members) == nil
        case (.named(let index), _): return accepts(value, types[index])
        default: return false
        }
    }
}

extension VarlinkInterface {
    /// The parameter a call of `method` names wrongly: missing, of the wrong
    /// type, or not declared. Nil when the call is valid, or the method is
    /// not declared.
    public func invalidParameter(_ parameters: JSONObject, method: String) -> String? {
        checks.inputs[method].flatMap { checks.firstInvalid(parameters, $0) }
    }

    /// The same for a reply of `method`: what a client may rely on.
    public func invalidReplyParameter(_ parameters: JSONObject, method: String) -> String? {
        checks.outputs[method].flatMap { checks.firstInvalid(parameters, $0) }
    }
}
