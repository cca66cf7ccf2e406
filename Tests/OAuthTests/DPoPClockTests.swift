import DPoP
import Foundation
import Testing
@testable import OAuth

/// How a token endpoint's Date header sets the clock proofs' `iat` follows
/// (RFC 9449 §11.1): a slow answer is no skew, and a skew is never read as
/// further ahead than the answer shows.
@Suite struct DPoPClockTests {
    let endpoint = HTTPTokenEndpoint(
        endpoints: ProviderEndpoints(), credentials: ClientCredentials(clientID: "c", secret: nil, authentication: .none),
        scope: nil, timeout: .seconds(1))

    /// An answer's Date: the server's clock at the moment it stamped the answer, its fraction dropped.
    static func date(stampedAt local: Double, serverAhead skew: Double) -> Double {
        (local + skew).rounded(.down)
    }

    @Test(arguments: [0.01, 0.4, 2.5, 3.0, 9.0])
    func aSlowAnswerOnTheSameClockShowsNoSkew(_ delay: Double) {
        for sentAt in [1_000.0, 1_000.3, 1_000.99] {
            let receivedAt = sentAt + delay
            // Stamped on arrival, at the end of the wait, or anywhere between.
            for stamped in [sentAt, sentAt + delay / 2, receivedAt] {
                let date = Self.date(stampedAt: stamped, serverAhead: 0)
                #expect(HTTPTokenEndpoint.skew(shownBy: date, sentAt: sentAt, receivedAt: receivedAt) == 0)
            }
        }
    }

    /// A skew the answer shows is read never ahead of the server's real one
    /// (no proof is post-dated), and off by at most the round trip and the
    /// Date's lost fraction; one larger than those is always seen.
    @Test(arguments: [-600.0, -30.0, -4.5, 3.5, 30.0, 300.0])
    func aSkewIsReadNoFurtherAheadThanItIs(_ skew: Double) {
        for delay in [0.01, 0.5, 3.0, 9.0] {
            for sentAt in [1_000.0, 1_000.6] {
                let receivedAt = sentAt + delay
                for stamped in [sentAt, receivedAt] {
                    let date = Self.date(stampedAt: stamped, serverAhead: skew)
                    let read = HTTPTokenEndpoint.skew(shownBy: date, sentAt: sentAt, receivedAt: receivedAt)
                    #expect(abs(read - skew) <= delay + 1, "skew \(skew), delay \(delay): read \(read)")
                    if read != 0 { #expect(read <= skew, "skew \(skew), delay \(delay): read \(read)") }
                    if abs(skew) > delay + 1 { #expect(read != 0, "skew \(skew), delay \(delay) went unseen") }
                }
            }
        }
    }

    @Test func aClockTooFarFromTheAnswerIsNotReadAtAll() {
        #expect(HTTPTokenEndpoint.skew(shownBy: .nan, sentAt: 1_000, receivedAt: 1_001) == 0)
        #expect(HTTPTokenEndpoint.skew(shownBy: 1_300, sentAt: 1_000, receivedAt: .infinity) == 0)
    }

    /// The endpoint's reading of an answer: Glewlwyd stopped 3 s with a
    /// refresh waiting, on this host's clock; then the same server 5 minutes ahead.
    @Test func theEndpointKeepsTheClockAnAnswerShows() throws {
        let origin = "https://clock-\(UUID().uuidString.lowercased()).example"
        let header = "Sun, 29 Nov 2026 02:13:34 GMT"
        let stamped = try #require(TokenResponse.imfFixdate(header))
        let slow = HTTPTokenEndpoint.HTTPAnswer(status: 200, retryAfter: nil, setCookie: [], body: [], date: header)
        endpoint.learn(from: slow, origin: origin, sentAt: stamped - 2.8, receivedAt: stamped + 0.3)
        #expect(endpoint.proofServers.serverTime(for: origin, localTime: stamped + 10) == stamped + 10)

        let ahead = HTTPTokenEndpoint.HTTPAnswer(status: 403, retryAfter: nil, setCookie: [], body: [], date: header)
        endpoint.learn(from: ahead, origin: origin, sentAt: stamped - 300.2, receivedAt: stamped - 299.9)
        let read = endpoint.proofServers.serverTime(for: origin, localTime: stamped - 290) - (stamped - 290)
        // Read at the answer's arrival: 299.9 s, under the 300 s the server was ahead (up to its Date's lost fraction).
        #expect(abs(read - 299.9) < 0.001)
    }

    /// A proof's iat is the moment it is signed, set back by the skew tokend
    /// leaves uncorrected: a server whose clock reads that much behind this
    /// host's, or reads it coarsely (milliseconds late), is never handed an
    /// iat from its future.
    @Test func proofsAreSetBackByTheSkewLeftUncorrected() async throws {
        #expect(HTTPTokenEndpoint.iatSetBack >= ProofServers.tolerance && HTTPTokenEndpoint.iatSetBack >= 1)
        let origin = "https://set-back-\(UUID().uuidString.lowercased()).example"
        let before = Date().timeIntervalSince1970
        let proof = try await endpoint.proof(StateProofKey(), htu: origin + "/token", origin: origin, nonce: nil)
        let after = Date().timeIntervalSince1970
        let payload = try #require(Base64URL.decode(String(proof.split(separator: ".")[1])))
        let iat = Double(try JSONDecoder().decode(DPoPProof.Claims.self, from: Data(payload)).iat)
        // Signed at some moment between `before` and `after`, on this host's clock (no skew is known for the origin).
        #expect(iat >= (before - HTTPTokenEndpoint.iatSetBack).rounded(.down))
        #expect(iat <= (after - HTTPTokenEndpoint.iatSetBack).rounded(.down))
    }
}

/// A provider's clock is followed only within ProofServers.followedSkew:
/// beyond it, proofs keep this host's time and the refusal names the skew.
@Suite struct DPoPClockBoundTests {
    let endpoint = HTTPTokenEndpoint(
        endpoints: ProviderEndpoints(), credentials: ClientCredentials(clientID: "c", secret: nil, authentication: .none),
        scope: nil, timeout: .seconds(1))

    /// The answer of a server whose clock is `skew` seconds ahead, seen at `local` on this host's clock.
    func answer(serverAhead skew: Double, at local: Double, origin: String) {
        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.timeZone = TimeZone(identifier: "GMT")
        format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let header = format.string(from: Date(timeIntervalSince1970: local + skew))
        let answer = HTTPTokenEndpoint.HTTPAnswer(status: 200, retryAfter: nil, setCookie: [], body: [], date: header)
        endpoint.learn(from: answer, origin: origin, sentAt: local - 0.1, receivedAt: local)
    }

    @Test(arguments: [400.0 * 86_400, ProofServers.followedSkew + 2, -ProofServers.followedSkew - 2, -400.0 * 86_400])
    func aClockBeyondTheBoundIsNotFollowed(_ skew: Double) {
        let origin = "https://far-\(UUID().uuidString.lowercased()).example"
        let local = 1_795_000_000.0  // an injected clock: every reading is given, none taken from the host
        answer(serverAhead: skew, at: local, origin: origin)
        #expect(endpoint.proofServers.serverTime(for: origin, localTime: local + 5) == local + 5)
        let unfollowed = endpoint.proofServers.unfollowedSkew(for: origin)
        #expect(unfollowed.map { abs($0 - skew) <= 1 } == true, "read \(String(describing: unfollowed))")
        let refused = endpoint.explainingProof(
            .failure(.transient("iat", code: "invalid_dpop_proof")), url: URL(string: origin + "/token")!)
        guard case .failure(let error) = refused else {
            Issue.record("a refusal became a success")
            return
        }
        let seconds = Int(abs(skew).rounded())
        #expect(error.reason.hasPrefix(HTTPTokenEndpoint.proofRefusedReason))
        #expect(error.reason.contains("\(seconds) s \(skew > 0 ? "ahead of" : "behind") this host's"), "\(error.reason)")
        #expect(error.reason.contains("more than the \(Int(ProofServers.followedSkew)) s proofs follow"), "\(error.reason)")
    }

    @Test(arguments: [300.0, -300, ProofServers.followedSkew - 2, 30])
    func aClockWithinTheBoundIsFollowed(_ skew: Double) {
        let origin = "https://near-\(UUID().uuidString.lowercased()).example"
        let local = 1_795_000_000.0
        answer(serverAhead: skew, at: local, origin: origin)
        let followed = endpoint.proofServers.serverTime(for: origin, localTime: local + 5) - (local + 5)
        #expect(abs(followed - skew) <= 1, "followed \(followed)")
        #expect(endpoint.proofServers.unfollowedSkew(for: origin) == nil)
    }

    /// A clock set right again is followed again, and no longer named.
    @Test func aClockSetRightIsForgotten() {
        let origin = "https://mended-\(UUID().uuidString.lowercased()).example"
        let local = 1_795_000_000.0
        answer(serverAhead: 86_400, at: local, origin: origin)
        #expect(endpoint.proofServers.unfollowedSkew(for: origin) != nil)
        answer(serverAhead: 0, at: local + 60, origin: origin)
        #expect(endpoint.proofServers.unfollowedSkew(for: origin) == nil)
        #expect(endpoint.proofServers.skew(for: origin) == 0)
    }
}
