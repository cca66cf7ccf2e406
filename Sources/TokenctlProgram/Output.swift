#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// A time as every human output of tokenctl writes it (tokenctl(1), CONVENTIONS): local "10:42" today,
/// "2026-05-28 10:42" on another day, then how far it is: "10:42 (in 5 min)". --json writes RFC 3339.
func humanTime(_ unix: Int, now: Int = Int(Date().timeIntervalSince1970), zone: Zone = .local) -> String {
    StatusAdvice.time(unix, now: now, zone: zone)
}

/// `arguments` as C's printf writes them with `format` (as `String(format:)` did: it formats numbers
/// with the C library too).
func cFormat(_ format: String, _ arguments: CVarArg...) -> String {
    withVaList(arguments) { list in
        var buffer = [CChar](repeating: 0, count: 512)
        let length = Int(vsnprintf(&buffer, buffer.count, format, list))
        guard length >= buffer.count else { return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) } }
        return withVaList(arguments) { again in
            buffer = [CChar](repeating: 0, count: length + 1)
            _ = vsnprintf(&buffer, buffer.count, format, again)
            return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        }
    }
}

func jsonText(_ value: JSONValue) -> String { JSONWriter.string(value) }

/// A Unix time as RFC 3339 in UTC: "2026-12-01T23:41:33Z".
func rfc3339(_ unix: Int) -> String {
    Date(timeIntervalSince1970: TimeInterval(unix)).formatted(Date.ISO8601FormatStyle())
}

/// tokenctl's JSON conventions on top of tokend's wire values (Unix seconds, modes as numbers):
/// a time (a key ending in "At" or "Since": expiresAt, stateSince, ...) is RFC 3339 text, a file
/// mode octal text ("0600"). Every `--json` goes through here.
func cliJSON(_ value: JSONValue) -> JSONValue {
    switch value {
    case .object(let object):
        var converted: [String: JSONValue] = [:]
        for (key, value) in object {
            if key == "mode", case .int(let mode) = value {
                converted[key] = .string("0" + String(mode, radix: 8))
            } else if key.hasSuffix("At") || key.hasSuffix("Since"), case .int(let time) = value {
                converted[key] = .string(rfc3339(time))
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
    if let owner = status.owner { print("owner:        \(owner) (a session of their own)") }
    if let subject = status.subject {
        let name = status.username.map { "\($0) " } ?? ""
        let email = status.email.map { "<\($0)> " } ?? ""
        print("user:         \(name)\(email)(subject \(subject))")
    }
    print("generation:   \(status.generation)")
    if let expiresAt = status.expiresAt { print("expires:      \(humanTime(expiresAt))") }
    if let last = status.lastRefreshAt { print("last refresh: \(humanTime(last))") }
    if let next = status.nextRefreshAt { print("next refresh: \(humanTime(next))") }
    print("refreshes:    \(status.refreshes) (coalesced callers: \(status.coalesced), failures: \(status.failures))")
    if let store = status.store {
        print("fleet:        host \(status.hostId ?? "?"), shared copy version \(status.sharedVersion.map(String.init) ?? "none")")
        print("store:        \(store)")
    }
    if let error = status.lastError { print("last error:   \(error)") }
}
