import Broker
import CookieJar
import Logging
import Secrets
import TokendInterface
import Varlink

/// The io.tokend.Broker method table over a Broker, each method guarded by
/// the access policy in force.
func brokerImplementation(
    _ broker: Broker, policy: @escaping @Sendable () -> AccessPolicy, limiter: ForcedRefreshLimiter, logger: Logger
) -> VarlinkImplementation {
    VarlinkImplementation(
        interface: BrokerInterface.declaration,
        methods: guarded(
            brokerMethods(
                broker, limiter: limiter, logger: logger,
                mayRead: { context, session in policy().allows(context.peer, .read, session: session) }),
            policy: policy, logger: logger))
}

/// Refuses a call with org.varlink.service.PermissionDenied (and a log line
/// naming the peer) unless the policy allows the peer that method's class.
func guarded(
    _ methods: [String: MethodHandler], policy: @escaping @Sendable () -> AccessPolicy, logger: Logger
) -> [String: MethodHandler] {
    var result: [String: MethodHandler] = [:]
    for (name, handler) in methods {
        let wanted = AccessPolicy.methodClass(name)
        let check: @Sendable (JSONObject, CallContext) throws -> Void = { parameters, context in
            // ListSessions names no session: the global rules decide, and it lists only readable sessions.
            // A login id names its session.
            let session: String? = switch name {
            case "ListSessions": nil
            case "FinishLogin", "CancelLogin": Broker.sessionName(ofLogin: parameters["id"]?.stringValue ?? "")
            default: parameters["session"]?.stringValue ?? Broker.defaultSession
            }
            guard policy().allows(context.peer, wanted, session: session) else {
                logger.warning(
                    "permission denied",
                    metadata: [
                        "method": "\(name)", "class": "\(wanted.rawValue)", "session": "\(session ?? "")",
                        "peer.uid": "\(context.peer.map { String($0.uid) } ?? "unknown")",
                        "peer.pid": "\(context.peer.map { String($0.pid) } ?? "unknown")",
                    ])
                throw VarlinkError.permissionDenied
            }
        }
        switch handler {
        case .call(let body):
            result[name] = .call { parameters, context in
                try check(parameters, context)
                return try await body(parameters, context)
            }
        case .stream(let body):
            result[name] = .stream { parameters, context, replies in
                try check(parameters, context)
                try await body(parameters, context, replies)
            }
        }
    }
    return result
}

func brokerMethods(
    _ broker: Broker, limiter: ForcedRefreshLimiter, logger: Logger, mayRead: @escaping @Sendable (CallContext, String) -> Bool
) -> [String: MethodHandler] {
        [
            "GetToken": .call { parameters, _ in
                let session = try broker.session(try parameters.optionalString("session"))
                let minValid = try parameters.optionalInt("minValidSeconds")
                if let minValid, minValid < 0 { throw VarlinkError.invalidParameter("minValidSeconds") }
                return ["token": try await session.getToken(minValidSeconds: minValid).json]
            },
            "Refresh": .call { parameters, context in
                let session = try broker.session(try parameters.optionalString("session"))
                let stale = try parameters.optionalInt("staleGeneration")
                logger.debug("refresh requested", metadata: context.metadata(session.name))
                // A refresh this caller forces (no staleGeneration, or one at or
                // above the current generation) counts against its limit.
                let uid = context.peer?.uid ?? UInt32.max
                do {
                    let token = try await session.refresh(staleGeneration: stale) {
                        limiter.take(uid: uid, session: session.name)
                    }
                    return ["token": token.json]
                } catch let limited as RefreshLimited {
                    logger.notice("forced refresh rate-limited", metadata: context.metadata(session.name))
                    throw VarlinkError(
                        BrokerInterface.Error.rateLimited,
                        ["session": .string(limited.session), "retryAfter": .int(limited.retryAfter)])
                }
            },
            "GetStatus": .call { parameters, _ in
                let session = try broker.session(try parameters.optionalString("session"))
                return ["status": await session.status().json]
            },
            "ListSessions": .call { _, context in
                var statuses: [JSONValue] = []
                for session in broker.all where mayRead(context, session.name) {
                    statuses.append(await session.status().json)
                }
                return ["sessions": .array(statuses)]
            },
            "Login": .call { parameters, context in
                let session = try broker.session(try parameters.optionalString("session"))
                let refreshToken = try parameters.string("refreshToken")
                guard !refreshToken.isEmpty else { throw VarlinkError.invalidParameter("refreshToken") }
                logger.notice("login requested", metadata: context.metadata(session.name))
                return ["status": try await session.login(refreshToken: Secret(refreshToken)).json]
            },
            "BeginLogin": .call { parameters, context in
                let session = try broker.session(try parameters.optionalString("session"))
                guard let flow = LoginFlow(rawValue: try parameters.string("flow")) else {
                    throw VarlinkError.invalidParameter("flow")
                }
                let redirect = try parameters.optionalString("redirectUri")
                logger.notice(
                    "login requested", metadata: context.metadata(session.name).merging(["flow": "\(flow.rawValue)"]) { a, _ in a })
                let ticket = try await session.beginLogin(flow: flow, redirectURI: redirect, owner: context.peer?.uid)
                return ["login": ticket.json]
            },
            "FinishLogin": .call { parameters, context in
                let id = try parameters.string("id")
                let session = try broker.session(forLogin: id)
                let callback = try parameters.optionalString("callbackUrl")
                let status = try await session.finishLogin(id: id, callbackURL: callback, caller: context.peer?.uid)
                return ["status": status.json]
            },
            "CancelLogin": .call { parameters, context in
                let id = try parameters.string("id")
                try await broker.session(forLogin: id).cancelLogin(id: id, caller: context.peer?.uid)
                return [:]
            },
            "Logout": .call { parameters, context in
                let session = try broker.session(try parameters.optionalString("session"))
                let revoke = try parameters.optionalBool("revoke") ?? true
                logger.notice("logout requested", metadata: context.metadata(session.name))
                try await session.logout(revoke: revoke)
                return [:]
            },
            "Subscribe": .stream { parameters, _, replies in
                let session = try broker.session(try parameters.optionalString("session"))
                let since = try parameters.optionalInt("sinceVersion")
                let (status, events) = await session.subscribe(sinceVersion: since)
                try await replies.yield(
                    [
                        "event": "status", "session": .string(status.session), "generation": .int(status.generation),
                        "expiresAt": .optional(status.expiresAt), "reason": .optional(status.lastError),
                        "version": .int(status.cookieVersion),
                    ], continues: true)
                for await event in events {
                    try await replies.yield(event.parameters, continues: true)
                    event.receipt?.delivered()
                }
                // The session stopped (tokend is shutting down or the session was removed).
                try await replies.yield(
                    ["event": "stopped", "session": .string(session.name), "generation": .int(status.generation)],
                    continues: false)
            },
            "GetCookies": .call { parameters, _ in
                let session = try broker.session(try parameters.optionalString("session"))
                let (cookies, version) = await session.cookies(for: try parameters.cookieRequest("url"))
                return [
                    "cookies": .array(cookies.map(\.json)), "header": .string(CookieJar.header(for: cookies)),
                    "version": .int(version),
                ]
            },
            "ImportCookies": .call { parameters, context in
                let session = try broker.session(try parameters.optionalString("session"))
                let request = try parameters.cookieRequest("url")
                let headers = try parameters.stringArray("setCookie")
                let result = try await session.importCookies(from: request, setCookie: headers)
                logger.info(
                    "cookies imported",
                    metadata: context.metadata(session.name).merging(
                        ["applied": "\(result.applied)", "rejected": "\(result.rejected.count)"], uniquingKeysWith: { a, _ in a }))
                return [
                    "version": .int(result.version), "applied": .int(result.applied),
                    "rejected": .array(result.rejected.map(JSONValue.string)),
                ]
            },
            "DeleteCookies": .call { parameters, context in
                let session = try broker.session(try parameters.optionalString("session"))
                let request = try parameters.optionalString("url") == nil ? nil : try parameters.cookieRequest("url")
                let name = try parameters.optionalString("name")
                let (version, deleted) = try await session.deleteCookies(matching: request, name: name)
                logger.info(
                    "cookies deleted",
                    metadata: context.metadata(session.name).merging(["deleted": "\(deleted)"]) { a, _ in a })
                return ["version": .int(version), "deleted": .int(deleted)]
            },
            "ExportCookies": .call { parameters, _ in
                let session = try broker.session(try parameters.optionalString("session"))
                let format = try parameters.optionalString("format") ?? "netscape"
                guard format == "netscape" else {
                    throw VarlinkError(BrokerInterface.Error.unknownFormat, ["format": .string(format)])
                }
                return ["text": .string(await session.netscapeCookies())]
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

extension JSONObject {
    /// An http(s) URL with a host, or io.tokend.Broker.InvalidURL.
    func cookieRequest(_ key: String) throws -> CookieRequest {
        let url = try string(key)
        guard let request = CookieRequest(string: url) else {
            throw VarlinkError(BrokerInterface.Error.invalidURL, ["url": .string(url)])
        }
        return request
    }
}
