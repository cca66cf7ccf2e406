import Deadline
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPExchange
import NIOCore
import Secrets

/// What one guarded exchange brought back.
struct OutboundAnswer: Sendable {
    var status: Int
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    /// The address connected to.
    var address: String

    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    func headers(_ name: String) -> [String] {
        headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }
}

extension OutboundPolicy {
    /// One request to `request.url` through the guard, no redirect followed:
    /// the host resolved and every address checked, then a connection made
    /// for this request to a checked address only — SNI and the certificate
    /// check stay on the name — and closed after. The body is read up to `limit` bytes.
    func fetch(_ request: HTTPRequest, deadline: NIODeadline, limit: Int = maximumBodySize) async throws
        -> OutboundAnswer
    {
        guard let url = URL(string: request.url) else {
            throw AddressRefused(url: String(request.url.prefix(200)), address: nil, reason: "it is not a URL")
        }
        return try await Self.fetch(request, from: try await checkedTarget(url), deadline: deadline, limit: limit)
    }

    /// The checked addresses in turn: the next one only when a connection to
    /// one could not be made (nothing was sent), as `localhost` needs when
    /// ::1 comes first and the server listens on 127.0.0.1 only.
    static func fetch(
        _ request: HTTPRequest, from target: CheckedTarget, deadline: NIODeadline, limit: Int,
        connector: HTTPConnector = .shared
    ) async throws -> OutboundAnswer {
        var failure: any Error = ResolveFailed(host: target.host, problem: "no address to connect to")
        for address in target.addresses {
            do {
                let response = try await connector.send(
                    request, connectingTo: address.description, deadline: deadline, limit: limit)
                return OutboundAnswer(
                    status: response.status, headers: response.headers, body: response.body, address: address.description)
            } catch {
                guard Outbound.isConnectFailure(error) else { throw error }
                failure = error
            }
        }
        throw failure
    }
    /// One request of a discovery step, within the time left until
    /// `deadline`. Throws AddressRefused, or DiscoveryFailed naming `step`.
    func exchange(_ request: HTTPRequest, step: String, until deadline: ContinuousClock.Instant) async throws
        -> OutboundAnswer
    {
        let url = String(request.url.prefix(300))
        let left = deadline - ContinuousClock.now
        guard left > .zero else { throw DiscoveryFailed(step: step, url: url, status: nil, reason: "no time was left for it") }
        let clientDeadline = NIODeadline.now() + Outbound.timeAmount(left)
        do {
            guard let answer = try await within(left, { try await self.fetch(request, deadline: clientDeadline) }) else {
                throw DiscoveryFailed(step: step, url: url, status: nil, reason: "no answer in time")
            }
            return answer
        } catch let refusal as AddressRefused {
            throw refusal
        } catch let failure as DiscoveryFailed {
            throw failure
        } catch let error as HTTPExchangeError where error.isTooManyBytes {
            throw DiscoveryFailed(
                step: step, url: url, status: nil, reason: "it answered with more than \(Self.maximumBodySize) bytes")
        } catch let error as HTTPExchangeError where error.isDeadlineExceeded {
            throw DiscoveryFailed(step: step, url: url, status: nil, reason: "no answer in time")
        } catch {
            let said = Redactor.none.clean(String(describing: error))
            throw DiscoveryFailed(step: step, url: url, status: nil, reason: "unreachable: \(said)")
        }
    }

    /// A GET, redirects followed here (at most 3), each hop resolved and
    /// checked again, never from https to http. The answer and the URL that gave it.
    func get(_ url: URL, step: String, accept: String = "application/json", until deadline: ContinuousClock.Instant)
        async throws -> (OutboundAnswer, URL)
    {
        var target = url
        for _ in 0...Self.maximumRedirects {
            var request = HTTPRequest(url: target.absoluteString)
            request.addHeader(name: "Accept", value: accept)
            let answer = try await exchange(request, step: step, until: deadline)
            guard [301, 302, 303, 307, 308].contains(answer.status) else { return (answer, target) }
            guard let location = answer.header("Location"), let next = URL(string: location, relativeTo: target)?.absoluteURL
            else {
                let shown = Redactor.none.clean(answer.header("Location") ?? "no Location", limit: 120)
                throw DiscoveryFailed(
                    step: step, url: target.absoluteString, status: answer.status, reason: "it redirects to \(shown)")
            }
            if target.scheme?.lowercased() == "https", next.scheme?.lowercased() != "https" {
                throw AddressRefused(
                    url: next.absoluteString, address: nil,
                    reason: "\(target.absoluteString) redirects there, from https to \(next.scheme ?? "no scheme")")
            }
            target = next
        }
        throw DiscoveryFailed(
            step: step, url: url.absoluteString, status: nil, reason: "it redirects more than \(Self.maximumRedirects) times")
    }
}

extension Outbound {
    /// The connection was not made: nothing of the request reached anyone.
    static func isConnectFailure(_ error: any Error) -> Bool {
        (error as? HTTPExchangeError)?.connectionNotMade == true
    }

    static func timeAmount(_ duration: Duration) -> TimeAmount {
        let (seconds, attoseconds) = duration.components
        let nanoseconds = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !nanoseconds.overflow else { return .nanoseconds(.max) }
        return .nanoseconds(nanoseconds.partialValue.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue)
    }
}
