import Foundation

/// An integer member of a JSONSerialization object: a number or a numeric
/// string; nil for anything else, `true` and `false` included.
///
/// `number is Bool` cannot tell them apart: on Linux, NSNumber(1) is Bool is
/// true, so a server's `"interval": 1` would be lost. JSONSerialization makes
/// booleans with objCType "c" and integers with "q".
func jsonInteger(_ value: Any?) -> Int? {
    switch value {
    case let number as NSNumber:
        guard String(cString: number.objCType) != "c" else { return nil }
        return number.intValue
    case let text as String:
        return Int(text.trimmingCharacters(in: .whitespaces))
    default:
        return nil
    }
}
