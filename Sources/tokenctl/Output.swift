import Foundation
import TokendClient
import Varlink

func formatTime(_ unix: Int) -> String {
    let formatter = ISO8601DateFormatter()
    let seconds = unix - Int(Date().timeIntervalSince1970)
    let relative = seconds >= 0 ? "in \(seconds) s" : "\(-seconds) s ago"
    return "\(formatter.string(from: Date(timeIntervalSince1970: TimeInterval(unix)))) (\(relative))"
}

func jsonText(_ value: JSONValue) -> String { JSONWriter.string(value) }

/// tokenctl's JSON conventions on top of tokend's: a file mode is octal text ("0600").
func cliJSON(_ value: JSONValue) -> JSONValue {
    switch value {
    case .object(let object):
        var converted: [String: JSONValue] = [:]
        for (key, value) in object {
            if key == "mode", case .int(let mode) = value {
                converted[key] = .string("0" + String(mode, radix: 8))
            } else {
                converted[key] = cliJSON(value)
            }
        }
        return .object(converted)
    case .array(let items): return .array(items.map(cliJSON))
    default: return value
    }
}

func printStatus(_ status: SessionStatus) {
    print("session:      \(status.session)")
    print("state:        \(status.state)")
    if let subject = status.subject {
        let name = status.username.map { "\($0) " } ?? ""
        let email = status.email.map { "<\($0)> " } ?? ""
        print("user:         \(name)\(email)(subject \(subject))")
    }
    print("generation:   \(status.generation)")
    if let expiresAt = status.expiresAt { print("expires:      \(formatTime(expiresAt))") }
    if let last = status.lastRefreshAt { print("last refresh: \(formatTime(last))") }
    if let next = status.nextRefreshAt { print("next refresh: \(formatTime(next))") }
    print("refreshes:    \(status.refreshes) (coalesced callers: \(status.coalesced), failures: \(status.failures))")
    if let store = status.store {
        print("fleet:        host \(status.hostId ?? "?"), shared copy version \(status.sharedVersion.map(String.init) ?? "none")")
        print("store:        \(store)")
    }
    if let error = status.lastError { print("last error:   \(error)") }
}
