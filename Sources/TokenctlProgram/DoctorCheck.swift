#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Varlink

/// One line of `tokenctl doctor`: what was checked, how it went, and for
/// anything short of ok the command or setting that fixes it.
struct DoctorResult: Equatable, Sendable {
    enum Outcome: String, Sendable {
        case ok = "ok"
        /// Works, but less safely or less well than it could.
        case warn = "warn"
        case fail = "FAIL"
        /// Does not apply here, or cannot be checked by this user.
        case skip = "skip"
    }

    let check: String
    let outcome: Outcome
    let detail: String
    let fix: String?

    static func ok(_ check: String, _ detail: String) -> DoctorResult {
        DoctorResult(check: check, outcome: .ok, detail: detail, fix: nil)
    }

    static func warn(_ check: String, _ detail: String, fix: String) -> DoctorResult {
        DoctorResult(check: check, outcome: .warn, detail: detail, fix: fix)
    }

    static func fail(_ check: String, _ detail: String, fix: String) -> DoctorResult {
        DoctorResult(check: check, outcome: .fail, detail: detail, fix: fix)
    }

    static func skip(_ check: String, _ detail: String) -> DoctorResult {
        DoctorResult(check: check, outcome: .skip, detail: detail, fix: nil)
    }

    /// The result for `doctor --json`.
    var json: JSONValue {
        var object: [String: JSONValue] = [
            "check": .string(check), "outcome": .string(outcome.rawValue), "detail": .string(detail),
        ]
        if let fix { object["fix"] = .string(fix) }
        return .object(object)
    }

    /// "FAIL  socket: … — fix: …", the outcome padded so the checks line up;
    /// always one line (a tool's several lines are joined with "; ").
    var line: String {
        let outcome = self.outcome.rawValue + String(repeating: " ", count: 5 - self.outcome.rawValue.count)
        let fix = self.fix.map { " — fix: \($0)" } ?? ""
        return "\(outcome) \(check): \(detail)\(fix)"
            .split(whereSeparator: \.isNewline).joined(separator: "; ")
    }
}

extension String {
    /// The mode as chmod takes it: "0660".
    static func octalMode(_ mode: UInt32) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: Swift.max(0, 4 - digits.count)) + digits
    }
}
