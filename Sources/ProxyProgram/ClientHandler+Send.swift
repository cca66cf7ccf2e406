import NIOCore

/// A request on its way upstream: tokend's answers for it, an upstream connection, the request written.
extension ClientHandler {
    /// The body is whole or streams: tokend's answers from the cache, else from tokend. A DPoP-bound
    /// token goes with a proof of this request, which only tokend makes (GetProof).
    func obtainCredentials(for exchange: Exchange) {
        if exchange.streaming { pause() }
        if let cached = settings.credentials.cached(path: exchange.path) {
            guard cached.bound else { return send(exchange, credentials: cached) }
            let target = exchange.proofTarget
            let cookies = cached.cookies
            return ask(for: exchange) { try await $0.prove(target, cookies: cookies) }
        }
        let url = exchange.url
        let path = exchange.path
        let target = exchange.proofTarget
        ask(for: exchange) { try await $0.fetch(url: url, path: path, target: target) }
    }

    /// tokend's answers for `exchange`, from `call` off the loop; then `credentialsArrived` on it.
    func ask(
        for exchange: Exchange, fresh: Bool = false, _ call: @escaping @Sendable (Credentials) async throws -> RequestCredentials
    ) {
        let credentials = settings.credentials
        let loop = pool.loop
        let bound = LoopBound((self, exchange), on: loop)
        Task {
            let result: Result<RequestCredentials, any Error>
            do {
                result = .success(try await call(credentials))
            } catch {
                result = .failure(error)
            }
            loop.execute {
                let (handler, exchange) = bound.value
                handler.credentialsArrived(result, for: exchange, fresh: fresh)
            }
        }
    }

    /// The request goes upstream with tokend's answers (on a new connection when `fresh`), or the client
    /// gets why there are none. A kind of refusal of proofs is logged at most once a minute.
    func credentialsArrived(_ result: Result<RequestCredentials, any Error>, for exchange: Exchange, fresh: Bool = false) {
        guard case .exchange(let current) = phase, current === exchange else { return }
        switch result {
        case .success(let credentials):
            send(exchange, credentials: credentials, fresh: fresh)
        case .failure(let error):
            let answer: Answer
            if let refused = error as? ProofRefused {
                if let refusals = settings.credentials.proofs.toLog(refused.kind, now: Double(NIODeadline.now().uptimeNanoseconds) / 1e9) {
                    settings.logger.error(
                        "no DPoP proof from tokend", metadata: ["problem": "\(refused)", "status": "\(refused.answer.status.code)", "refusals": "\(refusals)"])
                }
                answer = refused.answer
            } else {
                settings.logger.error("no token from tokend", metadata: ["problem": "\(error)"])
                answer = Answer.tokendFailed(error)
            }
            release(exchange)
            if exchange.bodyDone {
                phase = .idle
                write(answer, version: exchange.head.version, close: !exchange.head.keepAlive)
                answered()
            } else {
                lastVersion = exchange.head.version
                phase = .skipping(answer, close: false)
                resume()
            }
        }
    }

    /// The request goes upstream on a kept connection (or a new one when `fresh`).
    func send(_ exchange: Exchange, credentials: RequestCredentials, fresh: Bool = false) {
        exchange.credentials = credentials
        if !fresh, let idle = pool.idleConnection() { return transmit(exchange, on: idle) }
        pool.connect { [self] result in
            guard case .exchange(let current) = phase, current === exchange else {
                if case .success(let connection) = result { pool.release(connection, reusable: true) }
                return
            }
            switch result {
            case .success(let connection): transmit(exchange, on: connection)
            case .failure(let error): fail(exchange, error)
            }
        }
    }

    /// The lines tokend's answers make, kept while they stay the same (as they do from one request to the next).
    func credentialLines(for credentials: RequestCredentials) -> ByteBuffer {
        if let proof = credentials.proof {  // a proof is for one request: nothing to keep
            return Wire.credentialLines(
                host: settings.upstream.authority, authorization: credentials.authorization, proof: proof.jwt, cookies: credentials.cookies)
        }
        if let kept = keptCredentialLines, kept.authorization == credentials.authorization, kept.cookies == credentials.cookies {
            return kept.lines
        }
        let lines = Wire.credentialLines(host: settings.upstream.authority, authorization: credentials.authorization, cookies: credentials.cookies)
        keptCredentialLines = (credentials.authorization, credentials.cookies, lines)
        return lines
    }

    func transmit(_ exchange: Exchange, on connection: UpstreamConnection) {
        guard let credentials = exchange.credentials else { return }
        exchange.upstream = connection
        exchange.upstreamWasReused = connection.reused
        exchange.reply = .awaited
        connection.user = self
        connection.expectAnswer(toHead: exchange.head.method == .head)
        let request = exchange.upstreamRequest(credentialLines: credentialLines(for: credentials), allocator: pool.loop.allocator)
        if !exchange.streaming {
            exchange.markSent()
            connection.writeAndFlush(request)
        } else {
            connection.write(request)
            // What was kept before the body outgrew the limit goes first; no retry needs it any more.
            exchange.writeBody(exchange.kept, to: connection)
            settings.bodyBudget.give(exchange.budgeted)
            exchange.budgeted = 0
            exchange.kept = ByteBuffer()
            for chunk in exchange.pending { exchange.writeBody(chunk, to: connection) }
            exchange.pending = []
            if exchange.bodyDone {
                if exchange.upstreamChunked { connection.write(Wire.lastChunk) }
                exchange.markSent()
            }
            connection.flush()
        }
        // A write that failed has ended the exchange already (and the connection may serve another by now).
        if exchange.sent, case .exchange(let current) = phase, current === exchange, exchange.upstream === connection {
            awaitUpstream()
        }
        if exchange.streaming && !exchange.bodyDone && connection.socket.isWritable { resume() }
        watchSending()
    }
}
