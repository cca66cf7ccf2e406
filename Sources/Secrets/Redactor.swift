#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Cuts the secrets a request carried (refresh token, access token, client
/// secret, code, verifier, device code) out of whatever a provider answers,
/// in every form a provider can echo them: as sent, percent-encoded in either
/// case, form-encoded (`+` for space), JSON-escaped, base64 and base64url at
/// each alignment inside a longer run (`Basic base64(id:secret)`), with or
/// without padding. Any piece of `fragmentLength` or more bytes of one of
/// these forms goes too, so a text cut short elsewhere leaks nothing useful.
public struct Redactor: Sendable {
    public static let none = Redactor([String]())
    public static let marker = "[redacted]"
    /// Shortest piece of a secret (or of its base64) removed on its own.
    public static let fragmentLength = 12
    /// Shortest base64 run of a short secret that is searched for whole.
    static let shortestBase64 = 6

    /// Every `fragmentLength`-byte window of every long form.
    let windows: Set<Window>
    /// Forms shorter than `fragmentLength`, matched whole.
    let shortForms: [[UInt8]]

    public init(_ secrets: [String]) {
        var windows = Set<Window>()
        var shortForms: [[UInt8]] = []
        for secret in Set(secrets) where !secret.isEmpty {
            let raw = Array(secret.utf8)
            let percent = [false, true].map { percentEncoded(raw, lowercaseHex: $0) }
            // The encoded forms are searched as they are too: in a decoded view
            // an escape just before the secret (`%a` + `a...`) can swallow its start.
            var forms = [raw, Self.slashesEscaped(raw)] + percent
            forms += [false, true].map { percentEncoded(raw, lowercaseHex: $0, plusForSpace: true) }
            for encoded in Set([raw] + percent) {
                forms += Self.base64Cores(of: encoded).filter { $0.count >= Self.shortestBase64 }
            }
            for form in forms {
                if form.count < Self.fragmentLength {
                    shortForms.append(form)
                } else {
                    for start in 0...(form.count - Self.fragmentLength) { windows.insert(Window(form[start...])) }
                }
            }
        }
        self.windows = windows
        self.shortForms = Array(Set(shortForms))
    }

    public init(_ secrets: [Secret]) {
        self.init(secrets.map { $0.reveal() })
    }

    public var isEmpty: Bool { windows.isEmpty && shortForms.isEmpty }

    /// `text` with every form of every secret replaced by `marker`.
    public func redact(_ text: String) -> String {
        guard !isEmpty else { return text }
        let bytes = Array(text.utf8)
        var hidden = [Bool](repeating: false, count: bytes.count)
        for view in DecodedView.all(of: bytes) { mark(view, in: &hidden) }
        guard hidden.contains(true) else { return text }
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if hidden[index] {
                out += Self.marker.utf8
                while index < bytes.count, hidden[index] { index += 1 }
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Provider text made safe to log and return: control characters out
    /// first (they could split a secret), then the secrets, then cut to
    /// `limit` characters, never the other way round. Only a window of the
    /// text is read: a piece cut at its end lies far beyond `limit`.
    public func clean(_ text: String, limit: Int = 200) -> String {
        let visible = String(
            String.UnicodeScalarView(text.unicodeScalars.lazy.filter { $0.value >= 0x20 && $0.value != 0x7F }
                .prefix(max(limit * 8, 2048))))
        return String(redact(visible).prefix(limit))
    }

    func mark(_ view: DecodedView, in hidden: inout [Bool]) {
        let count = view.bytes.count
        func hide(_ start: Int, _ length: Int) {
            for index in view.origin[start].lowerBound..<view.origin[start + length - 1].upperBound { hidden[index] = true }
        }
        if !windows.isEmpty, count >= Self.fragmentLength {
            for start in 0...(count - Self.fragmentLength)
            where windows.contains(Window(view.bytes[start..<(start + Self.fragmentLength)])) {
                hide(start, Self.fragmentLength)
            }
        }
        for form in shortForms where form.count <= count {
            for start in 0...(count - form.count) where view.bytes[start..<(start + form.count)].elementsEqual(form) {
                hide(start, form.count)
            }
        }
    }

    /// The secret as JSON may escape it, each "/" as "\/" (JSONSerialization does, so does PHP's json_encode).
    static func slashesEscaped(_ bytes: [UInt8]) -> [UInt8] {
        bytes.flatMap { $0 == UInt8(ascii: "/") ? [UInt8(ascii: "\\"), $0] : [$0] }
    }

    /// The base64 and base64url characters that depend on `bytes` alone,
    /// for each of the three offsets they can start at inside a longer run:
    /// characters that mix in a neighbour's bits (and padding) are left out.
    static func base64Cores(of bytes: [UInt8]) -> [[UInt8]] {
        var cores: [[UInt8]] = []
        for offset in 0..<3 {
            let encoded = Array((Data(count: offset) + Data(bytes)).base64EncodedString().utf8)
            let firstBit = 8 * offset
            let endBit = 8 * (offset + bytes.count)
            let first = (firstBit + 5) / 6
            let end = endBit / 6
            guard end > first else { continue }
            let core = Array(encoded[first..<end])
            cores.append(core)
            cores.append(core.map { $0 == UInt8(ascii: "+") ? UInt8(ascii: "-") : $0 == UInt8(ascii: "/") ? UInt8(ascii: "_") : $0 })
        }
        return cores
    }
}

/// `Redactor.fragmentLength` bytes, hashed without an allocation.
struct Window: Hashable {
    var high: UInt64 = 0
    var low: UInt32 = 0

    init(_ bytes: some Collection<UInt8>) {
        for (index, byte) in bytes.prefix(Redactor.fragmentLength).enumerated() {
            if index < 8 { high = high << 8 | UInt64(byte) } else { low = low << 8 | UInt32(byte) }
        }
    }
}
