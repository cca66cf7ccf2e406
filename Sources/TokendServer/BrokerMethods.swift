import Broker
import Logging
import Secrets
import TokendInterface
import Varlink

/// The io.tokend.Broker method table over a Broker, each method guarded by
/// the access policy in force.
func brokerImplementation(
    _ broker: Broker, policy: @escaping @Sendable () -> AccessPolicy, logger: Logger
) -> VarlinkImplementation {
    VarlinkImplementation(
        interface: BrokerInterface.declaration,
        methods: guarded(brokerMethods(broker, logger: logger), policy: policy, logger: logger))
}

/// Refuses a call with org.varlink.service.PermissionDenied (and a log line
/// naming the peer) unless the policy allows the peer that method's class.
func guarded(
    _ methods: [String: MethodHandler], policy: @escaping @Sendable () -> AccessPolicy, logger: Logger
) -> [String: MethodHandler] {
    var result: [String: MethodHandler] = [:]
    for (name, handler) in methods {
        let wanted = AccessPolicy.methodClass(name)
        let check: @Sendable (CallContext) throws -> Void = { context in
            guard policy().allows(context.peer, wanted) else {
                logger.warning(
                    "permission denied",
                    metadata: [
                        "method": "\(name)", "class": "\(wanted.rawValue)",
                        "peer.uid": "\(context.peer.map { String($0.uid) } ?? "unknown")",
                        "peer.pid": "\(context.peer.map { String($0.pid) } ?? "unknown")",
                    ])
                throw VarlinkError.permissionDenied
            }
        }
        switch handler {
        case .call(let body):
            result[name] = .call { parameters, context in
                try check(context)
                return try await body(parameters, context)
            }
        case .stream(let body):
            result[name] = .stream { parameters, context, replies in
                try check(context)
                try await body(parameters, context, replies)
            }
        }
    }
    return result
}

func brokerMethods(_ broker: Broker, logger: Logger) -> [String: MethodHandler] {
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
                return ["token": try await session.refresh(staleGeneration: stale).json]
            },
            "GetStatus": .call { parameters, _ in
                let session = try broker.session(try parameters.optionalString("session"))
                return ["status": await session.status().json]
            },
            "ListSessions": .call { _, _ in
                var statuses: [JSONValue] = []
                for session in broker.all { statuses.append(await session.status().json) }
                return ["sessions": .array(statuses)]
            },
            "Login": .call { parameters, context in
                let session = try broker.session(try parameters.optionalString("session"))
                let refreshToken = try parameters.string("refreshToken")
                guard !refreshToken.isEmpty else { throw VarlinkError.invalidParameter("refreshToken") }
                logger.notice("login requested", metadata: context.metadata(session.name))
                return ["status": try await session.login(refreshToken: Secret(refreshToken)).json]
            },
            "Logout": .call { parameters, context in
                let session = try broker.session(try parameters.optionalString("session"))
                let revoke = try parameters.optionalBool("revoke") ?? true
                logger.notice("logout requested", metadata: context.metadata(session.name))
                await session.logout(revoke: revoke)
                return [:]
            },
            "Subscribe": .stream { parameters, _, replies in
                let session = try broker.session(try parameters.optionalString("session"))
                let events = await session.subscribe()
                let status = await session.status()
                try await replies.yield(
                    [
                        "event": "status", "session": .string(status.session), "generation": .int(status.generation),
                        "expiresAt": .optional(status.expiresAt), "reason": .optional(status.lastError),
                    ], continues: true)
                for await event in events {
                    try await replies.yield(event.parameters, continues: true)
                }
                // The session stopped (tokend is shutting down or the session was removed).
                try await replies.yield(
                    ["event": "stopped", "session": .string(session.name), "generation": .int(status.generation)],
                    continues: false)
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
