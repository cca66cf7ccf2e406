import Foundation
import Glibc
import Testing

@testable import TokenctlProgram

extension Zone {
    /// A zone whose offsets are Foundation's (its own database, ICU's), for tests in named zones.
    init(_ timeZone: TimeZone) {
        self.init { timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval($0))) }
    }
}

/// tokenctl does without Foundation; each helper that replaced one of Foundation's calls answers as
/// that call did, over a table of inputs, odd ones among them.
@Suite struct FoundationReplacementTests {
    @Test func whitespaceAndNewlinesAreFoundationsSets() {
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }
            #expect(Text.isWhitespace(scalar) == CharacterSet.whitespaces.contains(scalar), "U+\(String(value, radix: 16))")
            #expect(Text.isNewline(scalar) == CharacterSet.newlines.contains(scalar), "U+\(String(value, radix: 16))")
        }
    }

    @Test(arguments: [
        "", " ", "a", " a ", "\ta\t", "\na\n", " \r\n a b \r\n ", "\u{A0}a\u{3000}", "\u{2028}a\u{85}", "\u{B}a\u{C}",
        " \u{301}a", "a \u{301}", "a\u{301} ", "\u{200B}a\u{200B}", "\u{FEFF}a", " é ", "\"'x'\"", "'\"", "\"a \" ",
        "\u{1680}\u{2000}\u{200A}\u{202F}\u{205F}x", "🙂 ", " \u{1F3FB}", "\r", "\r\n", "a\r\nb",
    ])
    func trimmingAsFoundation(_ text: String) {
        #expect(text.trimmingWhitespace == text.trimmingCharacters(in: .whitespaces))
        #expect(text.trimmingWhitespaceAndNewlines == text.trimmingCharacters(in: .whitespacesAndNewlines))
        let quotes = CharacterSet(charactersIn: "\"'")
        #expect(text.trimming { $0 == "\"" || $0 == "'" } == text.trimmingCharacters(in: quotes))
        let slice = ("x" + text + "x").dropFirst().dropLast()
        #expect(slice.trimmingWhitespace == slice.trimmingCharacters(in: .whitespaces))
    }

    @Test(arguments: [
        "", "plain", "a & b", "<b>bold</b>", "&amp;", "<<>>&&", "é <é> &é", "🙂<🙂>", "\u{0}<\u{0}", "x&y<z>w",
    ])
    func htmlEscapedAsFoundation(_ text: String) {
        let foundation = text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
        #expect(Text.htmlEscaped(text) == foundation)
    }

    /// Where they differ the new escape is the stricter: Foundation's `replacingOccurrences` compares
    /// composed sequences, so it left a `<` or `&` that a combining mark follows as it was.
    @Test func aMarkAfterAnAngleBracketIsEscapedNow() {
        #expect("<\u{301}b>".replacingOccurrences(of: "<", with: "&lt;") == "<\u{301}b>")
        #expect(Text.htmlEscaped("<\u{301}b>") == "&lt;\u{301}b&gt;")
        #expect(Text.htmlEscaped("&\u{301}") == "&amp;\u{301}")
    }

    static let zones = [
        "UTC", "Europe/Berlin", "Europe/London", "America/New_York", "America/St_Johns", "Asia/Kolkata",
        "Asia/Kathmandu", "Australia/Lord_Howe", "Pacific/Chatham", "Pacific/Kiritimati", "Pacific/Pago_Pago",
        "America/Sao_Paulo", "Africa/Casablanca", "Asia/Tehran", "Europe/Dublin",
    ]

    /// Around midnight, new year, leap days and daylight-saving changes, far and near.
    static let instants: [Int] = [
        0, -1, 86_399, 86_400, 951_782_400, 951_868_799, 1_700_000_000, 1_711_846_800, 1_711_850_399, 1_711_850_400,
        1_729_990_800, 1_730_000_000, 1_735_689_599, 1_735_689_600, 1_767_225_599, 1_767_225_600, 1_780_000_000,
        1_798_761_540, 2_147_483_647, 2_147_483_648, 4_102_444_800, 253_402_300_799, -2_208_988_800, -1_000_000_000,
    ]

    static func foundationClock(_ unix: Int, now: Int, zone: TimeZone) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = zone
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let date = Date(timeIntervalSince1970: TimeInterval(unix))
        let sameDay = calendar.isDate(date, inSameDayAs: Date(timeIntervalSince1970: TimeInterval(now)))
        formatter.dateFormat = sameDay ? "HH:mm" : "yyyy-MM-dd HH:mm"
        return formatter.string(from: date)
    }

    /// `tokenctl status`'s times ("10:42" today, "2026-05-28 10:42" another day) as DateFormatter and
    /// Calendar wrote them, in zones with odd offsets and daylight-saving rules.
    @Test(arguments: zones) func clockAsFoundation(_ name: String) throws {
        let timeZone = try #require(TimeZone(identifier: name))
        let zone = Zone(timeZone)
        for unix in Self.instants {
            for now in [unix, unix + 1, unix - 1, unix + 3600, unix - 3600, unix + 43_200, unix + 86_400, unix - 86_400] {
                #expect(
                    StatusAdvice.clock(unix, now: now, zone: zone) == Self.foundationClock(unix, now: now, zone: timeZone),
                    "\(name) \(unix) now \(now)")
            }
        }
    }

    /// The local zone is the C library's (TZ, else /etc/localtime); for a zone's name, its offsets are
    /// the ones Foundation's TimeZone gives. TZ is put back after.
    @Test func localZoneAsFoundation() throws {
        let saved = getenv("TZ").map { String(cString: $0) }
        defer {
            if let saved { setenv("TZ", saved, 1) } else { unsetenv("TZ") }
            tzset()
        }
        for name in Self.zones {
            let timeZone = try #require(TimeZone(identifier: name))
            for spelling in [name, ":" + name, "/usr/share/zoneinfo/" + name] {
                setenv("TZ", spelling, 1)
                tzset()
                for unix in Self.instants.filter({ (-2_000_000_000...4_200_000_000).contains($0) }) {
                    #expect(
                        Zone.local.offset(unix) == timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(unix))),
                        "TZ=\(spelling) at \(unix)")
                }
            }
        }
    }

    @Test(arguments: instants) func rfc3339AsFoundation(_ unix: Int) {
        #expect(rfc3339(unix) == ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: TimeInterval(unix))))
    }

    static func foundationHTTPDate(_ text: String) -> Int? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text).map { Int($0.timeIntervalSince1970) }
    }

    /// The doctor's reading of a Date header, as DateFormatter read it.
    @Test(arguments: [
        "Sun, 06 Nov 1994 08:49:37 GMT", "Tue, 01 Dec 2026 23:59:59 GMT", "Thu, 01 Jan 1970 00:00:00 GMT",
        "Wed, 31 Dec 2036 23:59:59 GMT", "Tue, 29 Feb 2028 12:00:00 GMT", "Fri, 19 Jan 2038 03:14:08 GMT",
        "sun, 06 nov 1994 08:49:37 GMT", "SUN, 06 NOV 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994", "", "garbage", "Sun, 06 Nov 1994 08:49 GMT", "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:00 GMT", "Sun, 32 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37", "Mon, 06 Nov 1994 08:49:37 GMT", "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sun, 29 Feb 2027 08:49:37 GMT", "Sun 06 Nov 1994 08:49:37 GMT",
    ])
    func httpDateAsFoundation(_ text: String) {
        #expect(HTTPDate.parse(text) == Self.foundationHTTPDate(text), "\(text)")
    }

    @Test(arguments: [0.0, 0.00004, 0.00005, 0.00015, 0.00025, 0.0012345, 0.1234, 1.25, 1e-9, 12.05, 1e6, 1e300, -0.0004])
    func roundTripAsFoundation(_ seconds: Double) {
        let value = seconds * 1000
        #expect(cFormat(", last round trip %.1f ms", value) == String(format: ", last round trip %.1f ms", value))
    }

    @Test func hexAsFoundation() {
        for byte in UInt8.min...UInt8.max {
            #expect(cFormat("%02x", byte) == String(format: "%02x", byte))
        }
    }

    /// tokenctl's `includes` is the standard library's search (Characters compared, canonically
    /// equivalent ones equal); for the words it looks for, it finds what Foundation's `contains` found.
    @Test(arguments: [
        "", "log in again", "please log in again.", "Log In Again", "log  in again", "x.session.corrupt-1",
        "a.session.corrupt", "host:1", "[::1]", "a/b", "ab", "not revoked", "token not revoked: x", "not\u{301} revoked",
        "/run/credentials/tokend.service/x", "/run/credentials/tokend.service", "é/", "e\u{301}/", ":\u{301}", "/\u{301}x",
    ])
    func containsAsFoundation(_ text: String) {
        for needle in ["log in again", ".session.corrupt-", ":", "/", "not revoked", "/run/credentials/tokend.service"] {
            #expect(text.includes(needle) == text.contains(needle), "\(needle) in \(text)")
        }
    }

    /// Without HOME, the home directory is the password database's, as NSHomeDirectory() said.
    @Test func homeDirectoryAsFoundation() {
        let saved = getenv("HOME").map { String(cString: $0) }
        defer { if let saved { setenv("HOME", saved, 1) } }
        #expect(FileManager.default.homeDirectoryForCurrentUser.path == NSHomeDirectory())
        unsetenv("HOME")
        #expect(FileManager.default.homeDirectoryForCurrentUser.path == NSHomeDirectory())
    }

    @Test func doctorLinesPadTheOutcomeAsFoundation() {
        for outcome in [DoctorResult.Outcome.ok, .warn, .fail, .skip] {
            let line = DoctorResult(check: "c", outcome: outcome, detail: "d", fix: nil).line
            #expect(line == outcome.rawValue.padding(toLength: 5, withPad: " ", startingAt: 0) + " c: d")
        }
    }
}
