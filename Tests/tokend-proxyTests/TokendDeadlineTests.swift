import Foundation
import Logging
import Testing
import TokendClient

@testable import ProxyProgram

#if canImport(Glibc)
import Glibc
#endif

/// Every wait on tokend has a deadline (issue 49, finding 5): a tokend that accepts and never answers
/// (stopped, or stuck) costs a request --timeout, then a 504 that says so.
@Suite struct TokendDeadlineTests {
    /// A Unix socket that accepts (the kernel does, into its backlog) and never answers: a stopped tokend.
    final class SilentTokend {
        let path: String
        let fd: CInt

        init() throws {
            path = NSTemporaryDirectory() + "silent-tokend-\(UUID().uuidString.prefix(8)).sock"
            fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { buffer in
                buffer.copyBytes(from: Array(path.utf8))
                buffer[path.utf8.count] = 0
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            try #require(bound == 0 && listen(fd, 16) == 0)
        }

        deinit {
            close(fd)
            unlink(path)
        }
    }

    func credentials(_ tokend: SilentTokend) -> Credentials {
        Credentials(
            session: "default", socket: tokend.path, tokendTimeout: .milliseconds(500),
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    @Test func aTokendThatNeverAnswersIsA504ThatSaysSo() async throws {
        let tokend = try SilentTokend()
        let credentials = credentials(tokend)
        let target = ProofTarget(method: "GET", htu: "https://upstream.example/data")
        let started = ContinuousClock.now
        let error = await #expect(throws: TokendTimedOut.self) {
            try await credentials.fetch(url: "https://upstream.example/data", path: "/data", target: target)
        }
        #expect(ContinuousClock.now - started < .seconds(30), "the deadline, not a hang")
        let answer = Answer.tokendFailed(try #require(error))
        #expect(answer.status == .gatewayTimeout)
        #expect(answer.message.hasPrefix("tokend did not answer within"))
        // The next request waits no longer: it too gets its answer at the deadline.
        await #expect(throws: TokendTimedOut.self) {
            try await credentials.fetch(url: "https://upstream.example/data", path: "/data", target: target)
        }
    }

    @Test func aRefreshAndACookieImportTokendNeverAnswersEndAtTheDeadline() async throws {
        let tokend = try SilentTokend()
        let credentials = credentials(tokend)
        let stale = AccessToken(accessToken: "t0k", tokenType: "Bearer", expiresAt: 2_000_000_000, generation: 1, scope: nil)
        let refreshed = await credentials.refresh(after: stale)
        guard case .none = refreshed else {
            Issue.record("a refresh tokend never answers gives no token: \(refreshed)")
            return
        }
        #expect(await credentials.importCookies(["a=1"], from: "https://upstream.example/") == false)
    }
}
