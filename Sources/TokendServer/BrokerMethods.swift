import Broker
import CookieJar
import Logging
import TokendMetrics
import Secrets
import TokendInterface
import Varlink

/// The io.tokend.Broker method table over a Broker, each method guarded by
/// the access policy in force.
func brokerImplementation(
    _ broker: Broker, policy: @escaping @Sendable () -> AccessPolicy, limiter: ForcedRefreshLimiter,
    tokenReplies: TokenReplies, metrics: Metrics, logger: Logger, shares: Shares? = nil,
    userSessionMethods: [String: MethodHandler] = [:], beforeLogin: (@Sendable (String) async throws -> Void)? = nil
) -> VarlinkImplementation {
    var methods = guarded(
        brokerMethods(
            broker, limiter: limiter, tokenReplies: tokenReplies, metrics: metrics, logger: logger,
            mayRead: { context, session in policy().allows(context.peer, .read, session: session) },
            mayUse: { context, session, resource in
                guard let resource else { return policy().allowsEveryResource(context.peer, session: session) }
                return policy().allows(context.peer, resource: resource, session: session)
            },
            audienceRule: { AudienceRule(policy: policy()) }, shares: shares,
            listed: { context, session in policy().lists(session, to: context.peer) }, beforeLogin: beforeLogin),
        policy: policy, logger: logger)
    // Adding and removing sessions of one's own check who may themselves (UserSessionMethods).
    methods.merge(userSessionMethods) { _, new in new }
    // Any admitted caller may ask about itself; GetAccess checks who may ask about another user.
    methods.merge(accessMethods(broker, policy: policy)) { _, new in new }
    if let shares {
        // A share's token calls are these very methods, made as its creator (ShareService).
        shares.configure(policy: policy, tokenMethods: methods.filter { ShareService.answered.contains($0.key) })
        let made = shares.methods
        // Made by a reader of the session; listed and revoked by their own creator, whoever is admitted.
        methods.merge(guarded(made.filter { $0.key == "CreateShare" }, policy: policy, logger: logger)) { _, new in new }
        methods.merge(made.filter { $0.key != "CreateShare" }) { _, new in new }
    }
    return VarlinkImplementation(interface: BrokerInterface.declaration, methods: methods)
}

/// Refuses a call with org.varlink.service.PermissionDenied (and a log line
/// naming the peer) unless the policy allows the peer that method's class.
func guarded(
    _ methods: [String: MethodHandler], policy: @escaping @Sendable () -> AccessPolicy, logger: Logger
) -> [String: MethodHandler] {
    var result: [String: MethodHandler] = [:]
    for (name, handler) in methods {
        let wanted = AccessPolicy.methodClass(name)
        // Returns the parameters the method is called with: a bare session name is the caller's own
        // session of that name when it has one (AccessPolicy.resolve), and the call names it in full.
        let check: @Sendable (JSONObject, CallContext) throws -> JSONObject = { parameters, context in
            // ListSessions and GetMetrics name no session: the global rules decide
            // (ListSessions lists only what the caller may see). A login id names its session.
            let rules = policy()
            var parameters = parameters
            var session: String? = switch name {
            case "ListSessions", "GetMetrics": nil
            case "FinishLogin", "CancelLogin": Broker.sessionName(ofLogin: parameters["id"]?.stringValue ?? "")
            default: parameters["session"]?.stringValue ?? Broker.defaultSession
            }
            if let given = parameters["session"]?.stringValue {
                session = rules.resolve(given, for: context.peer)
                if session != given { parameters["session"] = .string(session!) }
            }
            // Another person's session is not there for the caller (whether or not it exists), not merely refused.
            if let session, rules.hides(session, from: context.peer) {
                throw VarlinkError(BrokerInterface.Error.noSuchSession, ["session": .string(session)])
            }
            let allowed = name == "ListSessions" ? rules.mayList(context.peer) : rules.allows(context.peer, wanted, session: session)
            guard allowed else {
                logger.warning(
                    "permission denied",
                    metadata: [
                        "method": "\(name)", "class": "\(wanted.rawValue)", "session": "\(session ?? "")",
                        "peer.uid": "\(context.peer.map { String($0.uid) } ?? "unknown")",
                        "peer.pid": "\(context.peer.map { String($0.pid) } ?? "unknown")",
                    ])
                throw VarlinkError.permissionDenied
            }
            return parameters
        }
        switch handler {
        case .call(let body):
            result[name] = .call { parameters, context in
                try await body(try check(parameters, context), context)
            }
        case .stream(let body):
            result[name] = .stream { parameters, context, replies in
                try await body(try check(parameters, context), context, replies)
            }
        }
    }
    return result
}

func brokerMethods(
    _ broker: Broker, limiter: ForcedRefreshLimiter, tokenReplies: TokenReplies, metrics: Metrics, logger: Logger,
    mayRead: @escaping @Sendable (CallContext, String) -> Bool,
    /// Whether the caller may have `resource`'s tokens (nil: every resource resource-access limits).
    mayUse: @escaping @Sendable (CallContext, String, String?) -> Bool,
    audienceRule: @escaping @Sendable () -> AudienceRule, shares: Shares? = nil,
    /// Whether ListSessions shows the session to the caller (nil: whether it may read it).
    listed: (@Sendable (CallContext, String) -> Bool)? = nil,
    /// Runs before a login of the session begins (a user session's client registered again).
    beforeLogin: (@Sendable (String) async throws -> Void)? = nil
) -> [String: MethodHandler] {
    typealias I = BrokerInterface
    let listed = listed ?? mayRead
    let fanOuts = shares?.fanOuts ?? FanOuts()
    /// `token` if the caller (as a page of `page`, when set) may have it: see AudienceRule.
    @Sendable func handOut(_ token: Token, _ session: SessionActor, _ context: CallContext, page: String?) throws -> Token {
        guard let refusal = audienceRule().refusal(of: token, session: session, peer: context.peer, page: page) else {
            return token
        }
        logger.warning(
            "token refused by its audience",
            metadata: context.metadata(session.name).merging(
                ["resource": "\(refusal.resource ?? "")", "page": "\(page ?? "")"]) { a, _ in a })
        throw refusal
    }
    /// The key a call names, refused before any work when the session does
    /// not serve it, the caller may not have it (resource-access), or the
    /// token it would get covers what the caller (or, with `page`, a page)
    /// may not have: the session's own token answers a call naming no
    /// resource, and every call under shared-audience, and the next one is
    /// taken to cover what the current one does. So a refused caller costs no
    /// refresh (the audience rule still checks what is handed out).
    @Sendable func key(
        _ session: SessionActor, _ resource: String?, _ scope: String?, _ context: CallContext, page: String? = nil
    ) async throws -> TokenKey {
        if resource == nil || session.keyedSnapshots.sharedResources != nil, let audience = session.currentAudience,
            let refusal = audienceRule().refusal(
                of: audience, named: resource, session: session, peer: context.peer, page: page)
        {
            throw refusal
        }
        // A session whose one token serves all its resources gives each of them with any token: refused
        // before any work (the audience rule, applied to every token handed out, would refuse it after).
        if let shared = session.keyedSnapshots.sharedResources,
            let denied = session.keyPolicy.resources.first(where: { shared.contains($0) && !mayUse(context, session.name, $0) })
        {
            throw BrokerError.resourceNotAllowed(
                session.name, resource: denied,
                "this provider issues one token for all the session's resources, and this user may not have tokens "
                    + "for \(denied) (resource-access in tokend.toml)")
        }
        guard resource != nil || scope != nil else { return .session }
        let key = try await session.key(resource: resource, scope: scope)
        if let resource = key.resource, !mayUse(context, session.name, resource) {
            logger.warning(
                "resource denied", metadata: context.metadata(session.name).merging(["resource": "\(resource)"]) { a, _ in a })
            throw BrokerError.resourceNotAllowed(
                session.name, resource: resource, "this user may not have tokens for \(resource) (resource-access in tokend.toml)")
        }
        return key
    }
    /// The token GetToken would hand this caller: every access and audience rule applied.
    @Sendable func authorizedToken(
        _ context: CallContext, _ session: SessionActor, _ resource: String?, _ page: String?
    ) async throws -> Token {
        let key = try await key(session, resource, nil, context, page: page)
        let token = try await session.getToken(minValidSeconds: nil, key: key, person: context.peer?.person)
        return try handOut(token, session, context, page: page)
    }
    shares?.useKeys { session, resource, scope, context in try await key(session, resource, scope, context) }
    return [
        "GetProof": proofMethod(broker, authorizedToken: authorizedToken),
        "GetToken": .call { parameters, context in
            let call = try parameters.decode(I.GetToken.In.self)
            let session = try broker.session(call.session)
            if let minValid = call.minValidSeconds, minValid < 0 { throw VarlinkError.invalidParameter("minValidSeconds") }
            let key = try await key(session, call.resource, call.scope, context, page: call.page)
            let token = try await session.getToken(
                minValidSeconds: call.minValidSeconds, key: key, person: context.peer?.person)
            return try tokenReplies.parameters(for: try handOut(token, session, context, page: call.page))
        },
        "Refresh": .call { parameters, context in
            let call = try parameters.decode(I.Refresh.In.self)
            let session = try broker.session(call.session)
            let key = try await key(session, call.resource, call.scope, context, page: call.page)
            logger.debug("refresh requested", metadata: context.metadata(session.name))
            // A refresh this caller forces (no staleGeneration, or one at or
            // above the current generation) counts against its person's limit.
            do {
                let token = try await session.refresh(
                    staleGeneration: call.staleGeneration, key: key, person: context.peer?.person
                ) {
                    limiter.take(for: context.peer, session: session.name)
                }
                return try tokenReplies.parameters(for: try handOut(token, session, context, page: call.page))
            } catch let limited as RefreshLimited {
                logger.notice("forced refresh rate-limited", metadata: context.metadata(session.name))
                throw VarlinkError(
                    I.Error.rateLimited, ["session": .string(limited.session), "retryAfter": .int(limited.retryAfter)])
            }
        },
        "GetStatus": .call { parameters, _ in
            let session = try broker.session(try parameters.decode(I.GetStatus.In.self).session)
            return try I.GetStatus.Out(status: audienceRule().described(await session.status().wire)).parameters()
        },
        "ListSessions": .call { _, context in
            var statuses: [I.SessionStatus] = []
            for session in broker.all where listed(context, session.name) {
                statuses.append(audienceRule().described(await session.status().wire))
            }
            return try I.ListSessions.Out(sessions: statuses).parameters()
        },
        "ResetStrategy": .call { parameters, context in
            let session = try broker.session(try parameters.decode(I.ResetStrategy.In.self).session)
            logger.notice("strategy reset requested", metadata: context.metadata(session.name))
            return try I.ResetStrategy.Out(status: audienceRule().described(await session.resetStrategy().wire)).parameters()
        },
        "GetMetrics": .call { _, _ in
            try I.GetMetrics.Out(text: metrics.render()).parameters()
        },
        "Login": .call { parameters, context in
            let call = try parameters.decode(I.Login.In.self)
            let session = try broker.session(call.session)
            guard !call.refreshToken.isEmpty else { throw VarlinkError.invalidParameter("refreshToken") }
            logger.notice("login requested", metadata: context.metadata(session.name))
            return try I.Login.Out(status: try await session.login(refreshToken: Secret(call.refreshToken)).wire)
                .parameters()
        },
        "BeginLogin": .call { parameters, context in
            let call = try parameters.decode(I.BeginLogin.In.self)
            try await beforeLogin?(call.session ?? Broker.defaultSession)
            let session = try broker.session(call.session)
            guard let flow = LoginFlow(rawValue: call.flow) else { throw VarlinkError.invalidParameter("flow") }
            logger.notice(
                "login requested", metadata: context.metadata(session.name).merging(["flow": "\(flow.rawValue)"]) { a, _ in a })
            let ticket = try await session.beginLogin(flow: flow, redirectURI: call.redirectUri, owner: context.peer?.uid)
            return try I.BeginLogin.Out(login: ticket.wire).parameters()
        },
        "FinishLogin": .call { parameters, context in
            let call = try parameters.decode(I.FinishLogin.In.self)
            let session = try broker.session(forLogin: call.id)
            let status = try await session.finishLogin(id: call.id, callbackURL: call.callbackUrl, caller: context.peer?.uid)
            return try I.FinishLogin.Out(status: status.wire).parameters()
        },
        "CancelLogin": .call { parameters, context in
            let call = try parameters.decode(I.CancelLogin.In.self)
            try await broker.session(forLogin: call.id).cancelLogin(id: call.id, caller: context.peer?.uid)
            return [:]
        },
        "Logout": .call { parameters, context in
            let call = try parameters.decode(I.Logout.In.self)
            let session = try broker.session(call.session)
            logger.notice("logout requested", metadata: context.metadata(session.name))
            try await session.logout(revoke: call.revoke ?? true)
            return [:]
        },
        "Subscribe": .stream { parameters, context, replies in
            let call = try parameters.decode(I.Subscribe.In.self)
            let session = try broker.session(call.session)
            // Where the session's own token answers the key (shared-audience), its events do too.
            let named = try await key(session, call.resource, call.scope, context)
            let key = try await session.eventKey(for: named)
            // The subscriber becomes a member of the session's broadcast, which the
            // server loop writes to: no task holds it. tokend's server always can.
            let fanOut = fanOuts.of(session.name)
            let joined = try await session.join(through: fanOut, sinceVersion: call.sinceVersion) { status, catchUp in
                Result {
                    var first = try SessionFanOut.first(status.describing(key), catchUp: catchUp)
                    if !key.isSession {
                        first[0].parameters["resource"] = .optional(key.resource)
                        first[0].parameters["scope"] = .optional(key.scope)
                    }
                    return fanOut.broadcast.join(replies, first: first)
                }
            }.get()
            guard joined else { throw VarlinkError.methodNotImplemented(I.method("Subscribe")) }
        },
        "GetCookies": .call { parameters, _ in
            let call = try parameters.decode(I.GetCookies.In.self)
            let session = try broker.session(call.session)
            let (cookies, version) = await session.cookies(for: try cookieRequest(call.url))
            return try I.GetCookies.Out(
                cookies: cookies.map(\.wire), header: CookieJar.header(for: cookies), version: version
            ).parameters()
        },
        "ImportCookies": .call { parameters, context in
            let call = try parameters.decode(I.ImportCookies.In.self)
            let session = try broker.session(call.session)
            let result = try await session.importCookies(from: try cookieRequest(call.url), setCookie: call.setCookie)
            logger.info(
                "cookies imported",
                metadata: context.metadata(session.name).merging(
                    ["applied": "\(result.applied)", "rejected": "\(result.rejected.count)"], uniquingKeysWith: { a, _ in a }))
            return try I.ImportCookies.Out(version: result.version, applied: result.applied, rejected: result.rejected)
                .parameters()
        },
        "DeleteCookies": .call { parameters, context in
            let call = try parameters.decode(I.DeleteCookies.In.self)
            let session = try broker.session(call.session)
            let request = try call.url.map(cookieRequest)
            let (version, deleted) = try await session.deleteCookies(matching: request, name: call.name)
            logger.info(
                "cookies deleted",
                metadata: context.metadata(session.name).merging(["deleted": "\(deleted)"]) { a, _ in a })
            return try I.DeleteCookies.Out(version: version, deleted: deleted).parameters()
        },
        "ExportCookies": .call { parameters, _ in
            let call = try parameters.decode(I.ExportCookies.In.self)
            let session = try broker.session(call.session)
            let format = call.format ?? "netscape"
            guard format == "netscape" else {
                throw VarlinkError(I.Error.unknownFormat, ["format": .string(format)])
            }
            return try I.ExportCookies.Out(text: await session.netscapeCookies()).parameters()
        },
    ]
}

extension CallContext {
    func metadata(_ session: String) -> Logger.Metadata {
        var metadata: Logger.Metadata = ["session": "\(session)"]
        if let peer {
            metadata["peer.uid"] = "\(peer.uid)"
            metadata["peer.pid"] = "\(peer.pid)"
        }
        return metadata
    }
}

/// An http(s) URL with a host, or io.tokend.Broker.InvalidURL.
func cookieRequest(_ url: String) throws -> CookieRequest {
    guard let request = CookieRequest(string: url) else {
        throw VarlinkError(BrokerInterface.Error.invalidURL, ["url": .string(url)])
    }
    return request
}
