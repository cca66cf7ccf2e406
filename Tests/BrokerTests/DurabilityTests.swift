import CookieJar
import Foundation
import OAuth
import Secrets
import StateStore
import TestSupport
import Testing
@testable import Broker

/// Writes that overlap a refresh must not put an older record on disk after
/// the rotated one: a crash then would bring back a refresh token the server
/// has already rotated, and lose the session.
@Suite struct DurabilityTests {
    @Test func cookieWritesDuringRefreshesNeverLeaveAnOlderRefreshTokenOnDisk() async throws {
        let h = try Harness()
        try await h.expiredSession()
        let page = CookieRequest(string: "https://app.example.com/")!
        var stale = 0
        for round in 0..<150 {
            // The answer is held, then released: the actor writes the rotated
            // record (an fsync) while the import arrives.
            h.endpoint.hold()
            let refreshing = Task { try await h.session.refresh(staleGeneration: nil) }
            try await eventually { h.endpoint.waiting == 1 }
            h.endpoint.release()
            if round % 3 > 0 { try await Task.sleep(for: .microseconds(100 * (round % 3))) }
            _ = try await h.session.importCookies(from: page, setCookie: ["round=\(round)"])
            _ = try await refreshing.value
            let current = h.endpoint.seenRefreshTokens.count
            let onDisk = try #require(try h.file.load())
            // The last refresh rotated to "refresh-N"; the disk must hold it.
            if onDisk.refreshToken != Secret("refresh-\(current)") { stale += 1 }
        }
        #expect(stale == 0, "an older record reached the disk after the rotated one in \(stale) of 150 rounds")
    }
}
