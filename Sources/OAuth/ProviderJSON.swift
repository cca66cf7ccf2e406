import Varlink

/// A provider's JSON answer as the project's one JSON model (Varlink's
/// JSONValue); nil unless the body is a JSON object.
func providerObject(_ body: [UInt8]) -> JSONObject? {
    (try? JSONParser.parse(body))?.objectValue
}

extension JSONValue {
    /// An integer member of a provider's answer: a number or a numeric string
    /// (some servers quote `expires_in`); nil for anything else, booleans included.
    var lenientInt: Int? {
        intValue ?? stringValue.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
    }
}
