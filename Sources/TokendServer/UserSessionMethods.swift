import Broker
import Config
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import OAuth
import TokendInterface
import Varlink

#if canImport(Glibc)
import Glibc
#endif

extension Daemon {
    /// AddSession and RemoveSession: each checks who may call it ([user-sessions], the owner, tokend's admins).
    func userSessionMethods() -> [String: MethodHandler] {
        typealias I = BrokerInterface
        return [
            "AddSession": .call { parameters, context in
                let call = try parameters.decode(I.AddSession.In.self)
                return try await self.addSession(call, context).parameters()
            },
            "RemoveSession": .call { parameters, context in
                let call = try parameters.decode(I.RemoveSession.In.self)
                return try I.RemoveSession.Out(revoked: try await self.removeSession(call, context)).parameters()
            },
        ]
    }

    /// How long each step of adding a session may take (discovery, registration).
    static let addStepTimeout: Duration = .seconds(10)

    func addSession(_ call: BrokerInterface.AddSession.In, _ context: CallContext) async throws -> BrokerInterface.AddSession.Out {
        typealias E = BrokerInterface.Error
        guard let peer = context.peer else { throw VarlinkError.permissionDenied }
        let settings = configuration.withLock { $0.userSessions }
        let ownerName = AccessPolicy.userName(peer.person)
        let fullName = "\(ownerName)/\(call.name)"
        guard access.withLock({ $0.users.mayAdd(peer) }) else {
            throw VarlinkError(E.sessionRefused, [
                "session": .string(fullName),
                "reason": .string("this user may not add sessions: tokend's administrator names users or groups in [user-sessions] of tokend.toml"),
            ])
        }
        guard Configuration.isValidSessionName(call.name) else { throw VarlinkError.invalidParameter("name") }
        guard call.issuer != nil || !(call.resources ?? []).isEmpty else { throw VarlinkError.invalidParameter("resources") }
        do {
            try userSessions.reserve(fullName, for: peer.person, limit: settings.perPerson)
        } catch .exists {
            throw VarlinkError(E.sessionExists, ["session": .string(fullName)])
        } catch {
            throw VarlinkError(E.tooManySessions, ["limit": .int(settings.perPerson)])
        }
        defer { userSessions.release(fullName) }
        if let wait = userSessions.takeAdd(for: peer.person) {
            throw VarlinkError(E.rateLimited, ["session": .string(fullName), "retryAfter": .int(wait)])
        }
        let outbound = settings.outbound
        let server: DiscoveredServer
        do {
            server = try await UserSessionDiscovery.discover(
                issuer: call.issuer, resources: call.resources ?? [], scope: call.scope, policy: outbound,
                timeout: Self.addStepTimeout)
        } catch {
            throw Self.wire(error)
        }
        guard outbound.admits(issuer: server.issuer) else {
            throw VarlinkError(E.sessionRefused, [
                "session": .string(fullName),
                "reason": .string("the authorization server \(server.issuer) is not among the issuers tokend's administrator allows ([user-sessions] issuers)"),
            ])
        }
        let redirectURI = try Self.loopbackRedirectURI()
        var record = UserSessionRecord(
            owner: peer.person, ownerName: ownerName, name: call.name, issuer: server.issuer,
            clientID: call.clientId ?? "", registered: call.clientId == nil, resources: server.resources,
            scope: server.scope, dpop: call.dpop ?? false, redirectURI: redirectURI,
            addedAt: Int(Date().timeIntervalSince1970))
        if call.clientId == nil {
            guard let endpoint = server.registrationEndpoint else {
                throw VarlinkError(E.discoveryFailed, [
                    "step": .string("registration"), "url": .string(server.issuer),
                    "reason": .string("the authorization server offers no client registration (RFC 7591): give --client-id"),
                ])
            }
            do {
                let client = try await ClientRegistration.register(
                    at: endpoint, redirectURI: redirectURI, clientName: "tokend (\(fullName))", scope: server.scope,
                    policy: outbound, timeout: Self.addStepTimeout)
                record.clientID = client.clientID
                record.clientSecret = client.clientSecret
                record.registrationAccessToken = client.registrationAccessToken
                record.registrationClientURI = client.registrationClientURI
            } catch {
                throw Self.wire(error)
            }
        }
        let session = try await startUserSession(record)
        logger.notice(
            "user session added",
            metadata: context.metadata(fullName).merging(
                ["issuer": "\(server.issuer)", "registered": "\(record.registered)"]) { a, _ in a })
        let status = await session.status().wire
        return .init(status: status, issuer: record.issuer, clientId: record.clientID, registered: record.registered)
    }

    /// Makes the session, keeps its record durably, then serves it: nothing is left when a step fails.
    func startUserSession(_ record: UserSessionRecord) async throws -> SessionActor {
        let (settings, tpm) = configuration.withLock { ($0.userSessions, $0.daemon.tpmInUse) }
        let session: SessionActor
        do {
            session = try Self.makeSession(
                record.settings, store: store, cookiePolicy: cookiePolicy, hostID: nil, reuse: reuse, logger: logger,
                tpm: tpm, user: record, outbound: settings)
            try userSessions.insert(record)
        } catch {
            logger.error("user session not added", metadata: ["session": "\(record.fullName)", "problem": "\(error)"])
            throw VarlinkError(BrokerInterface.Error.internalError)
        }
        await session.start()
        broker.put(session)
        refreshUserRules()
        return session
    }

    func removeSession(_ call: BrokerInterface.RemoveSession.In, _ context: CallContext) async throws -> Bool {
        let rules = access.withLock { $0 }
        let name = rules.resolve(call.session, for: context.peer)
        guard let record = userSessions.record(name), let peer = context.peer,
            peer.person == record.owner || rules.global.allows(peer, .admin)
        else {
            // Another person's session is not there for the caller; tokend.toml's are not removed this way.
            throw VarlinkError(BrokerInterface.Error.noSuchSession, ["session": .string(name)])
        }
        var revoked = false
        if let session = try? broker.session(name) {
            // Logged out (and revoked, when asked and possible) first; whether the provider took the
            // revocation is answered, not assumed.
            revoked = try await session.logout(revoke: call.revoke ?? true)
            await session.stop()
            _ = broker.remove(name)
        }
        shares.endAll(of: name, because: "its session was removed")
        do {
            try userSessions.remove(name)
        } catch {
            logger.error("user session not forgotten", metadata: ["session": "\(name)", "problem": "\(error)"])
            throw VarlinkError(BrokerInterface.Error.internalError)
        }
        unlink(store.path(for: record.fileName))
        refreshUserRules()
        logger.notice("user session removed", metadata: context.metadata(name).merging(["revoked": "\(revoked)"]) { a, _ in a })
        return revoked
    }

    /// The policy again with the user sessions as they are now; answers made under the old rules are not reused.
    /// The records are read under the policy's lock: whoever stores a policy last (this, or a reload)
    /// stores the records as they are then.
    func refreshUserRules() {
        let settings = configuration.withLock { $0.userSessions }
        access.withLock { policy in
            if let rules = try? UserSessionRules(settings, records: userSessions.all) { policy.users = rules }
        }
        reuse.changed()
    }

    /// A reload changed [user-sessions]: each session a user added is made again with the new rules
    /// (what it may connect to), from its state file.
    func remakeUserSessions() async {
        for record in userSessions.all {
            if let old = try? broker.session(record.fullName) { await old.stop() }
            do {
                let (settings, tpm) = configuration.withLock { ($0.userSessions, $0.daemon.tpmInUse) }
                let session = try Self.makeSession(
                    record.settings, store: store, cookiePolicy: cookiePolicy, hostID: nil, reuse: reuse, logger: logger,
                    tpm: tpm, user: record, outbound: settings)
                await session.start()
                broker.put(session)
            } catch {
                _ = broker.remove(record.fullName)
                logger.error("user session not made again", metadata: ["session": "\(record.fullName)", "problem": "\(error)"])
            }
        }
    }

    /// A loopback redirect URI on a port free now: the client is registered with it and logins listen there.
    static func loopbackRedirectURI() throws -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw VarlinkError(BrokerInterface.Error.internalError) }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(fd, generic, length) == 0 && getsockname(fd, generic, &length) == 0
            }
        }
        guard bound else { throw VarlinkError(BrokerInterface.Error.internalError) }
        return "http://127.0.0.1:\(UInt16(bigEndian: address.sin_port))/callback"
    }

    /// A discovery or registration failure as the interface's error.
    static func wire(_ error: Error) -> VarlinkError {
        typealias E = BrokerInterface.Error
        switch error {
        case let refused as AddressRefused:
            var parameters: JSONObject = ["url": .string(refused.url), "reason": .string(refused.reason)]
            if let address = refused.address { parameters["address"] = .string(address) }
            return VarlinkError(E.addressRefused, parameters)
        case let failed as DiscoveryFailed:
            var parameters: JSONObject = [
                "step": .string(failed.step), "url": .string(failed.url), "reason": .string(failed.reason),
            ]
            if let status = failed.status { parameters["status"] = .int(status) }
            return VarlinkError(E.discoveryFailed, parameters)
        default:
            return VarlinkError(E.discoveryFailed, [
                "step": .string("discovery"), "url": .string(""), "reason": .string(String(describing: error).prefix(300).description),
            ])
        }
    }
}

extension Daemon {
    /// Before a login of a session a user added whose client tokend registered: when the authorization
    /// server answered its last request that it does not know the client (invalid_client: a server that
    /// forgot its registrations), the client is registered again and the session serves it from now on.
    func registerAgainIfForgotten(_ name: String) async throws {
        guard var record = userSessions.record(name), record.registered, let session = try? broker.session(name) else {
            return
        }
        guard let problem = await session.status().lastError, problem.firstRange(of: "invalid_client") != nil else { return }
        if let wait = userSessions.takeAdd(for: record.owner) {
            throw VarlinkError(BrokerInterface.Error.rateLimited, ["session": .string(name), "retryAfter": .int(wait)])
        }
        let outbound = configuration.withLock { $0.userSessions.outbound }
        let server: DiscoveredServer
        let client: RegisteredClient
        do {
            server = try await UserSessionDiscovery.discover(
                issuer: record.issuer, resources: record.resources, scope: record.scope, policy: outbound,
                timeout: Self.addStepTimeout)
            guard let endpoint = server.registrationEndpoint else {
                throw DiscoveryFailed(
                    step: "registration", url: record.issuer, status: nil,
                    reason: "the server no longer knows the client and offers no registration (RFC 7591)")
            }
            client = try await ClientRegistration.register(
                at: endpoint, redirectURI: record.redirectURI, clientName: "tokend (\(name))", scope: record.scope,
                policy: outbound, timeout: Self.addStepTimeout)
        } catch {
            throw Self.wire(error)
        }
        record.clientID = client.clientID
        record.clientSecret = client.clientSecret
        record.registrationAccessToken = client.registrationAccessToken
        record.registrationClientURI = client.registrationClientURI
        // The old actor persists what it holds before the new one reads the state file.
        await session.stop()
        _ = broker.remove(name)
        _ = try await startUserSession(record)
        logger.notice("user session's client registered again", metadata: ["session": "\(name)", "problem": "\(problem)"])
    }
}
