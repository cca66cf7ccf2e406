import Deadline
import Foundation
import Logging
import Synchronization
import Testing
import UnixServer
import Varlink

@testable import TokendServer

/// Hostile numbers reach no conversion that traps, and a server that is not
/// turning is never reported healthy.
@Suite struct RobustnessTests {
    @Test(arguments: [1e300, Double.infinity, 9.3e15, 1e10])
    func aTokenGoodForAnyTimeIsReusedForAtMostAnHour(goodFor: Double) {
        #expect(FastGetToken.reuseWindow(goodFor: goodFor) == FastGetToken.longestReuse)
    }

    @Test(arguments: [-1e300, -1, 0, 1, Double.nan, -Double.infinity])
    func aTokenWithoutASecondToSpareIsNotReused(goodFor: Double) {
        #expect(FastGetToken.reuseWindow(goodFor: goodFor) == .zero)
    }

    @Test func aTokenIsReusedForItsLifeLessASecond() {
        #expect(FastGetToken.reuseWindow(goodFor: 90.5) == .milliseconds(89_500))
    }

    @Test func socketFailuresEndTokendWithTheirOwnStatus() {
        let inUse = SocketSetupError(path: "/run/x/sock", operation: "bind", errno: EADDRINUSE, reason: "another program already listens there")
        #expect(DaemonFailure(inUse).kind == .socketInUse && DaemonFailure(inUse).description.contains("/run/x/sock"))
        #expect(DaemonFailure(SocketSetupError(path: "/x/sock", operation: "bind", errno: ENOTDIR)).kind == .socketUnusable)
        #expect(DaemonFailure(CancellationError()).kind == .serverFailed)
    }

    @Test func aServerThatIsNotTurningIsNotHealthy() async {
        let server = VarlinkServer(
            service: VarlinkService(info: ServiceInfo(vendor: "t", product: "t", version: "0", url: "u"), implementations: []),
            source: .path("/nonexistent/sock", mode: 0o600), logger: Logger(label: "test"))
        #expect(await completes(within: .seconds(2)) { try await server.healthCheck() } == false)
    }

    @Test func deadlineReturnsTheWorkOrNil() async throws {
        #expect(try await within(.seconds(30)) { 42 } == 42)
        let started = ContinuousClock.now
        let stuck: Int? = try await within(.milliseconds(50)) {
            // Ignores its cancellation (each nap is a task of its own, which does not inherit it) and
            // ends by itself later: an abandoned body that spun on a cancelled sleep would hold a core.
            let end = ContinuousClock.now + .seconds(2)
            while ContinuousClock.now < end { _ = await Task { try? await Task.sleep(for: .milliseconds(100)) }.value }
            return 1
        }
        #expect(stuck == nil && ContinuousClock.now - started < .seconds(5))
    }
}
