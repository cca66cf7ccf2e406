import Loopback
import Varlink

/// A provider's JSON answer as the project's one JSON model (Varlink's
/// JSONValue); nil unless the body is a JSON object.
func providerObject(_ body: [UInt8]) -> JSONObject? {
    (try? JSONParser.parse(body))?.objectValue
}

extension JSONValue {
    /// An integer member of a provider's answer: a number or a numeric string
    /// (some servers quote `expires_in`); nil for anything else, booleans included.
    /// An outside number: a fraction is floored and a finite value beyond Int
    /// saturates, so the caller's clamp (with its note) sees it; NaN and
    /// infinities are no number (nil).
    var lenientInt: Int? {
        switch self {
        case .int(let value): return value
        case .double(let value): return Self.saturatedInt(value)
        case .string(let text):
            let trimmed = text.trimming(.whitespaces)
            if let value = Int(trimmed) { return value }
            // Only JSON-number spellings: Double("nan"), "inf", "0x10" are not.
            guard trimmed.allSatisfy({ "0123456789+-.eE".contains($0) }), let value = Double(trimmed) else {
                return nil
            }
            return Self.saturatedInt(value)
        default: return nil
        }
    }

    /// `value` floored, held within Int; nil when not finite.
    static func saturatedInt(_ value: Double) -> Int? {
        guard value.isFinite else { return nil }
        let floored = value.rounded(.down)
        // Double(Int.max) is 2^63, itself out of range: compare against it exclusively.
        if floored >= Double(Int.max) { return Int.max }
        if floored < Double(Int.min) { return Int.min }
        return Int(floored)
    }
}
