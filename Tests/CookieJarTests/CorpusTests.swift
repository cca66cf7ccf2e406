import CookieJar
import Foundation
import Testing

/// The IETF http-state working group's cookie suite, read in place from
/// ../shared/cookie-corpus (or $COOKIE_CORPUS). When the folder is absent the
/// suite is reported as skipped, never as passed.
enum Corpus {
    static let directory: URL = {
        if let path = ProcessInfo.processInfo.environment["COOKIE_CORPUS"] { return URL(fileURLWithPath: path) }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("../shared/cookie-corpus/http-state").standardized
    }()
    static let present = FileManager.default.fileExists(atPath: directory.appendingPathComponent("parser.json").path)

    struct ParserCase: Decodable {
        struct Pair: Decodable, Equatable {
            var name: String
            var value: String
        }
        var test: String
        var received: [String]
        var sent: [Pair]
        var sentTo: String?
        enum CodingKeys: String, CodingKey {
            case test, received, sent
            case sentTo = "sent-to"
        }
    }

    struct DateCase: Decodable {
        var test: String
        var expected: String?
    }

    /// Cases that do not pass, with the reason; README lists the same.
    static let knownFailures: [String: String] = [
        "DISABLED_CHROMIUM0022": "NUL in the value: RFC 6265bis §5.7 ignores the whole header; the case expects truncation",
        "DISABLED_CHROMIUM0023": "CR in the value: RFC 6265bis §5.7 ignores the whole header; the case expects truncation",
        "DISABLED_PATH0029": "path matching compares the percent-encoded path as sent (f%6Fo is not foo), as RFC 6265 §5.1.4 does",
    ]

    /// 2011-06-01: the suite's era, before its cookies' expiry dates (2019, 2027).
    static let clock = 1_306_886_400

    static func parserCases() throws -> [ParserCase] {
        try JSONDecoder().decode([ParserCase].self, from: Data(contentsOf: directory.appendingPathComponent("parser.json")))
    }

    /// The file may begin with `//` comment lines.
    static func dateCases(_ name: String) throws -> [DateCase] {
        let text = try String(contentsOf: directory.appendingPathComponent("dates/\(name)"), encoding: .utf8)
        let json = text.split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }.joined(separator: "\n")
        return try JSONDecoder().decode([DateCase].self, from: Data(json.utf8))
    }

    static func run(_ testCase: ParserCase, publicSuffixes: PublicSuffixList) -> [ParserCase.Pair] {
        var jar = CookieJar(policy: CookiePolicy(publicSuffixes: publicSuffixes))
        let base = URL(string: "http://home.example.org:8888/cookie-parser?\(testCase.test)")!
        let from = CookieRequest(url: base)!
        for header in testCase.received {
            _ = jar.receive(header, from: from, now: clock)
        }
        let target = testCase.sentTo.flatMap { URL(string: $0, relativeTo: base)?.absoluteURL }
            ?? URL(string: "http://home.example.org:8888/cookie-parser-result?\(testCase.test)")!
        return jar.cookies(for: CookieRequest(url: target)!, now: clock).map { .init(name: $0.name, value: $0.value) }
    }
}

@Suite("http-state corpus", .enabled(if: Corpus.present, "../shared/cookie-corpus is absent"))
struct CorpusTests {
    let publicSuffixes = (try? PublicSuffixList(contentsOfFile: PublicSuffixList.debianPath)) ?? .implicitOnly

    @Test func parserCases() throws {
        let cases = try Corpus.parserCases()
        #expect(cases.count == 222)
        var passed = 0
        var failures: [String] = []
        for testCase in cases {
            let sent = Corpus.run(testCase, publicSuffixes: publicSuffixes)
            if sent == testCase.sent {
                passed += 1
                #expect(Corpus.knownFailures[testCase.test] == nil, "\(testCase.test) passes now: update the list")
            } else if Corpus.knownFailures[testCase.test] == nil {
                failures.append("\(testCase.test): got \(sent.map { "\($0.name)=\($0.value)" }), "
                    + "expected \(testCase.sent.map { "\($0.name)=\($0.value)" })")
            }
        }
        print("http-state parser corpus: \(passed)/\(cases.count) pass")
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }

    @Test(arguments: ["examples.json", "bsd-examples.json"])
    func dateCases(file: String) throws {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        let cases = try Corpus.dateCases(file)
        #expect(!cases.isEmpty)
        var failures: [String] = []
        for dateCase in cases {
            let expected = dateCase.expected.flatMap { formatter.date(from: $0) }.map { Int($0.timeIntervalSince1970) }
            #expect((dateCase.expected == nil) == (expected == nil), "expected value unreadable: \(dateCase.expected!)")
            let parsed = CookieDate.parse(dateCase.test)
            if parsed != expected { failures.append("\(dateCase.test): got \(String(describing: parsed))") }
        }
        print("http-state \(file): \(cases.count - failures.count)/\(cases.count) pass")
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }
}
