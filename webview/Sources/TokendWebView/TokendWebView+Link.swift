import TokendInterface
import Varlink

/// The link to tokend: the session's status and web origins, a Subscribe
/// stream applied in order, and single calls for pages and imports. When
/// tokend goes away the web view keeps working with the cookies it has, and
/// catches up from the jar's version when tokend is back.
extension TokendWebView {
    typealias I = BrokerInterface

    func connectToTokend() {
        reconnectPending = false
        let connection: VarlinkConnection
        do {
            connection = try VarlinkConnection.connect(path: socket)
        } catch {
            tokendDown("\(error)")
            return
        }
        stream = connection
        connection.onClose = { [weak self, weak connection] in
            guard let self, self.keepAlive != nil, self.stream === connection else { return }
            self.stream = nil
            self.tokendDown("the event stream ended")
        }
        connection.call(I.method("GetStatus"), ["session": .string(session)]) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(let reply) where reply.error == nil:
                guard let status = try? JSONValue.object(reply.parameters).decode(I.GetStatus.Out.self).status else {
                    self.log("tokend's GetStatus reply did not decode; closing")
                    connection.close()
                    return
                }
                self.useOrigins(status.webOrigins)
                self.webResources = status.webResources
                self.subscribe(on: connection)
            case .success(let reply):
                self.log("tokend refused session \(self.session): \(VarlinkError(reply.error!, reply.parameters)); trying again")
                connection.close()
            case .failure:
                break  // onClose reports it
            }
        }
    }

    func subscribe(on connection: VarlinkConnection) {
        let parameters: JSONObject = ["session": .string(session), "sinceVersion": .int(version)]
        connection.call(I.method("Subscribe"), parameters, more: true) { [weak self] result in
            guard let self, case .success(let reply) = result else { return }
            if let error = reply.error {
                self.log("Subscribe failed: \(VarlinkError(error, reply.parameters))")
                connection.close()
                return
            }
            guard let event = try? JSONValue.object(reply.parameters).decode(I.Event.self) else {
                self.log("an event from tokend did not decode; resubscribing")
                connection.close()
                return
            }
            self.reconnectDelay = 250  // subscribed: the next outage starts its back-off afresh
            self.handle(event)
        }
    }

    func tokendDown(_ why: String) {
        if !reportedDown {
            log("tokend is not available (\(why)); pages get io.tokend.Bridge.Disconnected until it is back")
            notify(.disconnected(reason: why))
        }
        reportedDown = true
        calls?.close()
        calls = nil
        guard !reconnectPending, keepAlive != nil else { return }
        reconnectPending = true
        after(milliseconds: reconnectDelay) { [weak self] in
            guard let self, self.keepAlive != nil else { return }
            self.connectToTokend()
        }
        reconnectDelay = min(reconnectDelay * 2, 10_000)
    }

    func useOrigins(_ webOrigins: [String]) {
        if reportedDown {
            log("tokend is back; catching up from cookie version \(version)")
            notify(.reconnected)
        }
        reportedDown = false
        guard webOrigins != origins || script == nil || relayEverywhere else { return }
        origins = webOrigins
        hosts = WebHosts(origins: webOrigins)
        installRelay()
        if webOrigins.isEmpty { log("session \(session) has no web-origins: no page gets an answer") }
    }

    /// Events are applied one at a time, in order, through the operation queue:
    /// a refresh's cookies are in the web view before its generation counts as applied.
    func handle(_ event: I.Event) {
        switch event.event {
        case "status":
            enqueue { [weak self] done in
                self?.markApplied(event.generation)
                done()
            }
            // A subscription's first event; the cookie version it names is the one its catch-up
            // brings. tokend sends no cookies event when the web view is at that version already
            // (a jar never changed, or nothing missed), so the web view has caught up now.
            if !ready, event.version == version {
                ready = true
                releaseHeldNavigations(why: nil)
            }
        case "cookies":
            let changes = (event.changes ?? []).filter { hosts.mirrors($0.cookie) }
            update { jar in
                if event.snapshot == true { jar.removeAll() }
                for change in changes {
                    jar[change.cookie.key] = change.action == "delete" ? nil : change.cookie
                }
            }
            if let eventVersion = event.version { version = eventVersion }
            if !ready {
                ready = true
                releaseHeldNavigations(why: nil)
            }
        case "refreshed" where event.resource != nil || event.scope != nil:
            // Another key's token: its generation is its own, not the session's the cookie mirror follows.
            guard event.resource.map(webResources.contains) ?? true else { break }
            enqueue { [weak self] done in
                self?.tellPages([
                    "event": .string(event.event), "generation": .int(event.generation),
                    "resource": .optional(event.resource), "scope": .optional(event.scope),
                ])
                done()
            }
        case "loggedIn", "refreshed":
            enqueue { [weak self] done in
                self?.markApplied(event.generation)
                self?.tellPages(["event": .string(event.event), "generation": .int(event.generation)])
                done()
            }
        case "loggedOut", "loginRequired":
            log("session \(session) \(event.event): clearing its cookies from the web view")
            notify(.loggedOut(reason: event.event))
            update { $0.removeAll() }
            enqueue { [weak self] done in
                self?.tellPages(["event": "loggedOut", "generation": .int(event.generation)])
                done()
            }
        case "stopped":
            stream?.close()
        default:
            break
        }
    }

    func markApplied(_ generation: Int) {
        applied = max(applied, generation)
        let due = waiters.filter { $0.generation <= applied }
        waiters.removeAll { $0.generation <= applied }
        for waiter in due { waiter.resume() }
    }

    /// Runs `resume` once the events up to `generation` are applied (or after `eventsWait`).
    func whenApplied(_ generation: Int, _ resume: @escaping @MainActor () -> Void) {
        guard applied < generation else { return resume() }
        var resumed = false
        let once: @MainActor () -> Void = {
            guard !resumed else { return }
            resumed = true
            resume()
        }
        waiters.append((generation, once))
        after(milliseconds: Self.eventsWait, once)
    }

    /// One call on the shared connection, opened on demand (none once detached).
    func call(_ method: String, _ parameters: JSONObject, _ handler: @escaping VarlinkConnection.Handler) {
        guard keepAlive != nil else { return handler(.failure(.disconnected)) }
        if calls?.isOpen != true {
            do {
                calls = try VarlinkConnection.connect(path: socket)
            } catch {
                handler(.failure(error))
                return
            }
        }
        calls!.call(I.method(method), parameters, handler)
    }
}
