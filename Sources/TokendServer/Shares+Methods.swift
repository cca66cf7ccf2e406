import Broker
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendInterface
import UnixServer
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// CreateShare, ListShares and RevokeShare on tokend's own socket.
extension Shares {
    typealias I = BrokerInterface

    var methods: [String: MethodHandler] {
        [
            "CreateShare": .call { parameters, context in
                try await self.create(try parameters.decode(I.CreateShare.In.self), context).parameters()
            },
            "ListShares": .call { _, context in
                guard let peer = context.peer else { throw VarlinkError.permissionDenied }
                return try I.ListShares.Out(shares: self.visible(to: peer).map { self.wire($0.0, connections: $0.1) })
                    .parameters()
            },
            "RevokeShare": .call { parameters, context in
                let path = try parameters.decode(I.RevokeShare.In.self).path
                guard let peer = context.peer else { throw VarlinkError.permissionDenied }
                // Every share at the path ends: one whose file was removed is still live through its
                // connections, and the file now at the path may be a newer one's.
                let records = self.visible(to: peer).map(\.0).filter { $0.path == path }
                guard !records.isEmpty else { throw VarlinkError(I.Error.noSuchShare, ["path": .string(path)]) }
                for record in records { self.end(record.id, because: "revoked by uid \(peer.uid)") }
                return [:]
            },
        ]
    }

    /// Checks who hands the socket in and what it is, then what the share
    /// would give (as GetToken would check each of its keys for the caller);
    /// the descriptor is closed on every refusal.
    func create(_ call: I.CreateShare.In, _ context: CallContext) async throws -> I.CreateShare.Out {
        guard let passed = PassedDescriptor.current, let fd = passed.take() else {
            throw ShareSocket.refused(
                call.path, "no listening socket was passed with the call (SCM_RIGHTS, after ExpectDescriptor)")
        }
        var handed = false
        defer { if !handed { passed.discard(fd) } }
        guard let creator = context.peer else { throw VarlinkError.permissionDenied }
        guard call.path.hasPrefix("/") else { throw ShareSocket.refused(call.path, "the path is not absolute") }
        try ShareSocket.check(fd, path: call.path)
        let ttl = call.ttl ?? Self.defaultTTL
        guard (1...Self.maximumTTL).contains(ttl) else { throw VarlinkError.invalidParameter("ttl") }
        let resources = call.resources ?? []
        guard resources.count <= Self.maximumResources, Set(resources).count == resources.count else {
            throw VarlinkError.invalidParameter("resources")
        }
        guard let tools = tools.withLock({ $0 }) else { throw VarlinkError(I.Error.internalError) }
        let session = try broker.session(call.session)
        do {
            for resource in resources.isEmpty ? [nil] : resources.map(Optional.some) {
                _ = try await tools.key(session, resource, call.scope, context)
            }
        } catch let refusal as VarlinkErrorConvertible {
            let error = refusal.varlinkError
            guard error.name == I.Error.resourceNotAllowed || error.name == I.Error.scopeNotAllowed
                || error.name == I.Error.targetRefused
            else { throw error }
            throw ShareSocket.refused(call.path, error.parameters["reason"]?.stringValue ?? error.name)
        }
        guard held(by: creator.person) < Self.perPerson else {
            throw VarlinkError(I.Error.tooManyShares, ["limit": .int(Self.perPerson)])
        }
        // A share of the caller's at this path whose file was removed still serves its connections:
        // a second one there would make `share revoke PATH` ambiguous.
        if visible(to: creator).contains(where: { $0.0.path == call.path }) {
            throw ShareSocket.refused(
                call.path,
                "a share of yours at this path is still live (its file was removed); `tokenctl share revoke \(call.path)` ends it")
        }
        let record = Record(
            id: nextID.add(1, ordering: .relaxed).oldValue, path: call.path, session: session.name, resources: resources,
            scope: call.scope, expiresAt: Int(Date().timeIntervalSince1970) + ttl, mode: ShareSocket.mode(at: call.path, made: call.mode),
            creator: creator)
        handed = true
        return I.CreateShare.Out(share: try start(record, listener: fd, ttl: ttl))
    }
}

/// What a share's socket answers: GetToken, Refresh, GetProof and Subscribe
/// (token events only) for the share's session and keys, each made as the
/// creator; every other method is refused (PermissionDenied).
struct ShareService {
    typealias I = BrokerInterface
    let record: Shares.Record
    let shares: Shares
    let tools: Shares.Tools
    /// False once the share has ended: calls already made on its connections are refused.
    let isLive: @Sendable () -> Bool

    static let answered: Set<String> = ["GetToken", "Refresh", "GetProof", "Subscribe"]

    var service: VarlinkService {
        var methods: [String: MethodHandler] = [:]
        for name in I.declaration.methods.keys {
            methods[name] = .call { _, _ in
                shares.logger.notice("share call refused", metadata: ["path": "\(record.path)", "method": "\(name)"])
                throw VarlinkError.permissionDenied
            }
        }
        for (name, handler) in tools.tokenMethods {
            guard case .call(let body) = handler else { continue }
            methods[name] = .call { parameters, context in
                let (narrowed, creator) = try narrow(parameters, context, method: name)
                return try await body(narrowed, creator)
            }
        }
        methods["Subscribe"] = .stream { parameters, context, replies in
            let (narrowed, creator) = try narrow(parameters, context, method: "Subscribe")
            try await subscribe(try narrowed.decode(I.Subscribe.In.self), creator, replies)
        }
        return VarlinkService(
            info: ServiceInfo(vendor: "tokend", product: "tokend share", version: Daemon.version, url: "https://tokend.invalid/"),
            implementations: [VarlinkImplementation(interface: I.declaration, methods: methods)],
            internalError: VarlinkError(I.Error.internalError))
    }

    /// The call's parameters held to the share (its session, one of its
    /// resources, its scope), and the context it is made in: the creator's.
    func narrow(_ parameters: JSONObject, _ context: CallContext, method: String) throws -> (JSONObject, CallContext) {
        guard isLive() else { throw VarlinkError.permissionDenied }
        func outside(_ what: String) -> VarlinkError {
            shares.logger.notice(
                "share call refused", metadata: ["path": "\(record.path)", "method": "\(method)", "reason": "\(what)"])
            return .permissionDenied
        }
        var narrowed = parameters
        if let session = parameters["session"]?.stringValue, session != record.session {
            throw outside("session \(session) is not the share's")
        }
        narrowed["session"] = .string(record.session)
        switch parameters["resource"]?.stringValue {
        case .some(let resource):
            guard record.resources.contains(resource) else { throw outside("resource \(resource) is not the share's") }
        case .none where record.resources.count == 1:
            narrowed["resource"] = .string(record.resources[0])
        case .none where !record.resources.isEmpty:
            throw VarlinkError.invalidParameter("resource")  // the share serves several: name one
        case .none:
            break
        }
        if method == "GetProof" {
            // A proof's answer carries the unscoped token: a scoped share gives none.
            guard record.scope == nil else { throw outside("a share with a scope gives no proofs") }
        } else {
            if let scope = parameters["scope"]?.stringValue, scope != record.scope {
                throw outside("scope \(scope) is not the share's")
            }
            narrowed["scope"] = record.scope.map { .string($0) } ?? .null
        }
        if let since = parameters["sinceVersion"], !since.isNull { throw outside("cookie changes are not a share's") }
        narrowed = narrowed.filter { !$0.value.isNull }
        return (narrowed, CallContext(peer: record.creator, method: context.method, oneway: context.oneway, more: context.more))
    }

    /// The session's token events (no cookies, no jar version) for the
    /// share's key, as the creator may have them.
    func subscribe(_ call: I.Subscribe.In, _ creator: CallContext, _ replies: ReplyStream) async throws {
        guard tools.policy().allows(creator.peer, .read, session: record.session) else { throw VarlinkError.permissionDenied }
        let session = try shares.broker.session(record.session)
        let named = try await tools.key(session, call.resource, call.scope, creator)
        let key = try await session.eventKey(for: named)
        let fanOut = tools.fanOuts.of(session.name)
        let joined = try await session.join(through: fanOut) { status, _ in
            Result {
                var first = try SessionFanOut.first(status.describing(key), catchUp: [])
                first[0].parameters["version"] = nil
                if !key.isSession {
                    first[0].parameters["resource"] = .optional(key.resource)
                    first[0].parameters["scope"] = .optional(key.scope)
                }
                return fanOut.tokenEvents.join(replies, first: first)
            }
        }.get()
        guard joined else { throw VarlinkError.methodNotImplemented(I.method("Subscribe")) }
    }
}
