import Broker
import Secrets
import Synchronization
import TokendInterface
import Varlink
import UnixServer

/// GetToken answered on the server loop when the session's cached token is
/// good enough and the caller may read: no task or actor hop. Everything
/// else (refresh needed, errors, unusual parameters) returns nil and goes
/// the ordinary way, which applies the same rules.
final class FastGetToken: Sendable {
    let broker: Broker
    let policy: @Sendable () -> AccessPolicy
    /// The reply's parameters, shared with the service's GetToken and Refresh.
    let tokenReplies: TokenReplies
    /// The encoded reply per session and key, for the token it was made for (a key forgotten and
    /// made again starts its generations over: the token itself is compared).
    private let replies = Mutex<[Cached: (token: Secret, expiresAt: Int, bytes: [UInt8])]>([:])

    struct Cached: Hashable {
        var session: String
        var key: TokenKey
    }

    init(broker: Broker, policy: @escaping @Sendable () -> AccessPolicy, tokenReplies: TokenReplies = TokenReplies()) {
        self.broker = broker
        self.policy = policy
        self.tokenReplies = tokenReplies
    }

    var handler: VarlinkServer.FastPath {
        { call, peer in
            guard let (bytes, goodFor) = self.answerAndLife(call, peer: peer) else { return nil }
            // Given again to the same call on the same connection while no token or
            // rule changed, and the token keeps the life asked for (less a second).
            return VarlinkServer.FastReply(bytes: bytes, reusableFor: Self.reuseWindow(goodFor: goodFor))
        }
    }

    /// The longest a reply is given again without asking: past it the call is
    /// answered anew (on this path, at no cost), so no token life, however
    /// long, becomes a Duration the loop cannot add to its clock.
    static let longestReuse = Duration.seconds(3600)

    /// A token good for `goodFor` more seconds may be given again for that, less
    /// a second, at most `longestReuse`; never for a negative or undefined time.
    static func reuseWindow(goodFor: Double) -> Duration {
        let seconds = goodFor - 1
        guard seconds > 0 else { return .zero }
        let longest = Double(longestReuse.components.seconds)
        return .milliseconds(Int64(min(seconds, longest) * 1000))
    }

    static let getToken = BrokerInterface.method("GetToken")

    func answer(_ call: VarlinkCall, peer: PeerCredentials?) -> [UInt8]? {
        answerAndLife(call, peer: peer)?.bytes
    }

    func answerAndLife(_ call: VarlinkCall, peer: PeerCredentials?) -> (bytes: [UInt8], goodFor: Double)? {
        guard call.method == Self.getToken, !call.more, !call.oneway, !call.upgrade else {
            return nil
        }
        var name = Broker.defaultSession
        var minValid: Int?
        var resource: String?
        var scope: String?
        var page: String?
        for (key, value) in call.parameters {
            switch (key, value) {
            case ("session", .string(let session)): name = session
            case ("minValidSeconds", let number):
                guard let seconds = number.intValue, seconds >= 0 else { return nil }
                minValid = seconds
            case ("resource", .string(let named)): resource = named
            case ("scope", .string(let named)): scope = named
            case ("page", .string(let origin)): page = origin
            case (_, .null): continue
            default: return nil
            }
        }
        // Only keys the session already holds are cached: they were checked when first asked for.
        let key = TokenKey(resource: resource, scope: scope)
        let rules = policy()
        name = rules.resolve(name, for: peer)
        guard rules.allows(peer, .read, session: name), resource.map({ rules.allows(peer, resource: $0, session: name) }) ?? true,
            let session = try? broker.session(name),
            // Only a session with resource-access rules asks whether its one token serves all resources.
            rules.resources[name] == nil || session.keyedSnapshots.sharedResources == nil
                || rules.allowsEveryResource(peer, session: name),
            let (token, goodFor) = session.cachedTokenAndLife(minValidSeconds: minValid, key: key)
        else { return nil }
        // The audience rule, as the ordinary way applies it; a refusal is answered there.
        let audienceRule = AudienceRule(policy: rules)
        if audienceRule.applies(to: name, page: page),
            audienceRule.refusal(of: token, session: session, peer: peer, page: page) != nil
        {
            return nil
        }
        let cachedAs = Cached(session: name, key: key)
        let bytes: [UInt8]? = replies.withLock { cache in
            if let cached = cache[cachedAs], cached.token == token.accessToken, cached.expiresAt == token.expiresAt {
                return cached.bytes
            }
            var bytes: [UInt8] = []
            guard let parameters = try? tokenReplies.parameters(for: token) else { return nil }
            VarlinkReply(parameters: parameters).encode(into: &bytes)
            if cache.count >= 1024 { cache.removeAll() }  // keys forgotten long ago
            cache[cachedAs] = (token.accessToken, token.expiresAt, bytes)
            return bytes
        }
        return bytes.map { ($0, goodFor) }
    }
}
