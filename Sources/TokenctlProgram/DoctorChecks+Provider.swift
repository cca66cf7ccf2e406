#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The provider answers, over TLS that verifies, and its clock agrees with
/// this machine's. curl asks (the system's CAs, no proxy, as tokend connects).
enum DoctorProviderCheck {
    /// What one GET found.
    struct Answer: Equatable, Sendable {
        var url: String
        /// curl's exit status (0: an HTTP answer came) and its message.
        var curlStatus: Int32
        /// What curl wrote to standard error: on a TLS failure several lines
        /// (one per certificate problem); the first names it.
        var curlMessage: String = ""
        /// curl's first line, so the check stays one line.
        var curlSays: String {
            curlMessage.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        }
        var httpStatus: Int?
        /// The answer's Date header, parsed.
        var date: Date?
        /// When the answer arrived, by this machine's clock.
        var receivedAt: Date
    }

    /// Where tokend looks for the discovery document when the session has an
    /// issuer, in its order (OpenID Connect's ISSUER/.well-known/openid-configuration,
    /// then RFC 8414's /.well-known/oauth-authorization-server before the
    /// issuer's path); else the token endpoint.
    static func targets(of session: DoctorSetup.Session) -> (urls: [String], isDiscovery: Bool)? {
        if var issuer = session.issuer {
            while issuer.hasSuffix("/") { issuer.removeLast() }
            var urls = ["\(issuer)/.well-known/openid-configuration"]
            if var components = URLComponents(string: issuer) {
                let path = components.path == "/" ? "" : components.path
                components.path = "/.well-known/oauth-authorization-server" + path
                if let rfc8414 = components.string { urls.append(rfc8414) }
            }
            return (urls, true)
        }
        return session.tokenEndpoint.map { ([$0], false) }
    }

    /// The first discovery URL that answers 200 (or the first answer that
    /// did not come, or the last refusal).
    static func ask(_ urls: [String], curl: DoctorProgram) -> Answer {
        var answer = ask(urls[0], curl: curl)
        for url in urls.dropFirst() where answer.curlStatus == 0 && answer.httpStatus != 200 {
            let next = ask(url, curl: curl)
            if next.curlStatus == 0 { answer = next }
        }
        return answer
    }

    static func ask(_ url: String, curl: DoctorProgram) -> Answer {
        let output = curl.run([
            "--silent", "--show-error", "--noproxy", "*", "--max-time", "10", "--output", "/dev/null",
            "--dump-header", "-", url,
        ])
        var answer = Answer(
            url: url, curlStatus: output?.status ?? 127,
            curlMessage: (output?.standardError ?? "curl cannot be run").trimmingWhitespaceAndNewlines,
            receivedAt: Date())
        for line in (output?.standardOutput ?? "").split(whereSeparator: \.isNewline) {
            if line.hasPrefix("HTTP/") {
                answer.httpStatus = line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
            } else if line.lowercased().hasPrefix("date:") {
                answer.date = httpDate(line.dropFirst(5).trimmingWhitespace)
            }
        }
        return answer
    }

    /// RFC 9110's IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT").
    static func httpDate(_ text: String) -> Date? {
        HTTPDate.parse(text).map { Date(timeIntervalSince1970: TimeInterval($0)) }
    }

    static func judge(_ answer: Answer, session: String, isDiscovery: Bool) -> DoctorResult {
        let check = "provider (\(session))"
        let key = isDiscovery ? "issuer" : "token-endpoint"
        let tls = answer.url.lowercased().hasPrefix("https:") ? ", TLS verified" : ""
        switch answer.curlStatus {
        case 0:
            guard let status = answer.httpStatus else {
                return .fail(check, "\(answer.url) gave no HTTP answer", fix: "check sessions.\(session).\(key)")
            }
            if isDiscovery {
                return status == 200
                    ? .ok(check, "\(answer.url) answers (HTTP 200\(tls))")
                    : .fail(
                        check, "\(answer.url) answers HTTP \(status)",
                        fix: "check sessions.\(session).issuer: the provider's discovery document is at ISSUER/.well-known/openid-configuration")
            }
            return status >= 500
                ? .fail(check, "the token endpoint \(answer.url) answers HTTP \(status)",
                        fix: "the provider is failing: ask its operators, tokend keeps retrying meanwhile")
                : .ok(check, "the token endpoint \(answer.url) answers (HTTP \(status) to a GET\(tls))")
        case 35, 51, 53, 54, 58, 59, 60, 64, 66, 77, 80, 82, 83, 90, 91:
            return .fail(
                check, "TLS to \(answer.url) does not verify: \(answer.curlSays)",
                fix: "put the provider's CA in /usr/local/share/ca-certificates/ and run update-ca-certificates, or have the provider serve its whole chain")
        case 6:
            return .fail(check, "\(answer.url): the host name does not resolve (\(answer.curlSays))",
                         fix: "check sessions.\(session).\(key) and DNS (resolvectl query HOST)")
        case 7, 52, 55, 56:
            return .fail(check, "\(answer.url) refuses or drops the connection (\(answer.curlSays))",
                         fix: "start the provider, or open the way to it from this host (firewall, routes)")
        case 28:
            return .fail(check, "\(answer.url) did not answer within 10 s",
                         fix: "open the way to the provider from this host (firewall, routes); tokend retries meanwhile")
        case 127:
            return .skip(check, "curl is not installed (apt install curl) to ask \(answer.url)")
        default:
            return .fail(check, "\(answer.url): \(answer.curlSays) (curl status \(answer.curlStatus))",
                         fix: "check sessions.\(session).\(key)")
        }
    }

    /// Seconds this machine's clock is ahead of the provider's (negative: behind).
    static let warnSkew = 10.0
    static let failSkew = 60.0

    static func judgeClock(_ answer: Answer, session: String) -> DoctorResult? {
        let check = "clock (\(session))"
        guard answer.curlStatus == 0 else { return nil }
        guard let date = answer.date else {
            return .skip(check, "\(answer.url) sent no Date header to compare with")
        }
        let skew = answer.receivedAt.timeIntervalSince(date)
        let said = "this machine's clock is \(Int(abs(skew).rounded())) s \(skew >= 0 ? "ahead of" : "behind") the provider's"
        let fix = "turn on time synchronisation: timedatectl set-ntp true (systemd-timesyncd), or chrony"
        if abs(skew) > failSkew { return .fail(check, said + ": tokens look expired or not yet valid", fix: fix) }
        if abs(skew) > warnSkew { return .warn(check, said, fix: fix) }
        return .ok(check, said)
    }
}
