import NIOCore
import NIOHTTP1
import TokendClient

/// The upstream's answer on its way back to the client.
extension ClientHandler: UpstreamUser {
    func upstreamReceived(_ part: HTTPClientResponsePart) {
        guard case .exchange(let exchange) = phase else { return }
        exchange.answered = true
        if exchange.sent {
            upstreamDeadline = .now() + settings.timeout
        }
        if exchange.held != nil {
            exchange.held?.append(part)
            if case .end = part { heldEnded(exchange) }
            return
        }
        switch part {
        case .head(let head):
            exchange.upstreamKeepAlive = head.isKeepAlive
            if head.status == .unauthorized, !exchange.streaming, !exchange.retried, let credentials = exchange.credentials {
                hold(head, of: exchange)
                return refresh(exchange, after: credentials.token)
            }
            let setCookie = head.headers["Set-Cookie"]
            if !setCookie.isEmpty {
                hold(head, of: exchange)
                return importCookies(setCookie, of: exchange)
            }
            relay(head, of: exchange)
        case .body(let chunk):
            context?.write(wrapOutboundOut(.body(.byteBuffer(chunk))), promise: nil)
            if let context, !context.channel.isWritable { exchange.upstream?.pauseReading() }
        case .end:
            finish(exchange)
        }
    }

    func upstreamReadComplete() {
        context?.flush()
    }

    func upstreamWritabilityChanged(writable: Bool) {
        guard case .exchange(let exchange) = phase, exchange.streaming, !exchange.bodyDone else { return }
        if writable { resume() } else { pause() }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if case .exchange(let exchange) = phase, exchange.held == nil {
            if context.channel.isWritable {
                exchange.upstream?.resumeReading()
            } else {
                exchange.upstream?.pauseReading()
            }
        }
        context.fireChannelWritabilityChanged()
    }

    func upstreamFailed(_ error: any Error) {
        guard case .exchange(let exchange) = phase else { return }
        exchange.upstream = nil
        exchange.upstreamKeepAlive = false
        // A kept connection the upstream closed while it sat idle: the whole request again on a new one.
        if !exchange.answered, !exchange.streaming, !exchange.reconnected, exchange.upstreamWasReused,
            let credentials = exchange.credentials
        {
            exchange.reconnected = true
            return send(exchange, credentials: credentials, fresh: true)
        }
        fail(exchange, error)
    }

    /// The upstream gave no answer (or stopped in the middle of one).
    func fail(_ exchange: Exchange, _ error: any Error) {
        upstreamDeadline = nil
        if let upstream = exchange.upstream {
            exchange.upstream = nil
            pool.release(upstream, reusable: false)
        }
        guard !exchange.relayedHead else {
            settings.logger.error("upstream failed mid-answer", metadata: ["target": "\(exchange.url)", "problem": "\(error)"])
            release(exchange)
            phase = .done
            context?.close(promise: nil)
            return
        }
        let failure = UpstreamFailure(error, timeout: .nanoseconds(settings.timeout.nanoseconds))
        settings.logger.error("upstream failed", metadata: ["target": "\(exchange.url)", "problem": "\(failure.reason)"])
        release(exchange)
        if exchange.bodyDone {
            phase = .idle
            write(failure.answer, version: exchange.head.version, close: false)
            answered()
        } else {
            lastVersion = exchange.head.version
            phase = .skipping(failure.answer, close: false)
            resume()
        }
    }

    private func hold(_ head: HTTPResponseHead, of exchange: Exchange) {
        exchange.held = [.head(head)]
        exchange.upstream?.pauseReading()
    }

    /// A 401 to the token sent: one compare-and-refresh, then the request again, or the 401 as it came.
    private func refresh(_ exchange: Exchange, after stale: AccessToken) {
        let credentials = settings.credentials
        let loop = pool.loop
        let bound = NIOLoopBound((self, exchange), eventLoop: loop)
        Task {
            let fresh = await credentials.refresh(after: stale)
            loop.execute {
                let (handler, exchange) = bound.value
                handler.refreshed(fresh, for: exchange)
            }
        }
    }

    private func refreshed(_ fresh: AccessToken?, for exchange: Exchange) {
        guard case .exchange(let current) = phase, current === exchange, let old = exchange.credentials else { return }
        guard let fresh else { return release(held: exchange) }
        settings.logger.info("retried after a 401 with a refreshed token", metadata: ["generation": "\(fresh.generation)"])
        exchange.retried = true
        let whole = exchange.held?.last.map { if case .end = $0 { true } else { false } } ?? false
        exchange.held = nil
        if let upstream = exchange.upstream {
            exchange.upstream = nil
            pool.release(upstream, reusable: whole && exchange.upstreamKeepAlive)
        }
        exchange.upstreamKeepAlive = true
        let credentials = RequestCredentials(checked: fresh, authorization: fresh.authorizationHeaderValue, cookies: old.cookies)
        send(exchange, credentials: credentials)
    }

    /// The answer's Set-Cookie headers reach tokend's jar before the client has the answer.
    private func importCookies(_ setCookie: [String], of exchange: Exchange) {
        let credentials = settings.credentials
        let url = exchange.url
        let loop = pool.loop
        let bound = NIOLoopBound((self, exchange), eventLoop: loop)
        Task {
            await credentials.importCookies(setCookie, from: url)
            loop.execute {
                let (handler, exchange) = bound.value
                guard case .exchange(let current) = handler.phase, current === exchange else { return }
                handler.release(held: exchange)
            }
        }
    }

    private func heldEnded(_ exchange: Exchange) {
        exchange.upstreamEnded = true
    }

    /// What was held goes to the client, and the rest of the answer follows as it comes.
    private func release(held exchange: Exchange) {
        guard let held = exchange.held else { return }
        exchange.held = nil
        for part in held {
            switch part {
            case .head(let head): relay(head, of: exchange)
            case .body(let chunk): context?.write(wrapOutboundOut(.body(.byteBuffer(chunk))), promise: nil)
            case .end: return finish(exchange)
            }
        }
        context?.flush()
        exchange.upstream?.resumeReading()
    }

    /// The upstream's head, hop-by-hop headers removed, with the client's HTTP version.
    private func relay(_ head: HTTPResponseHead, of exchange: Exchange) {
        exchange.relayedHead = true
        let headers = Headers.endToEnd(head.headers)
        context?.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: exchange.head.version, status: head.status, headers: headers))),
            promise: nil)
    }

    /// The answer's end: the upstream connection goes back to the pool, the client's next request may come.
    private func finish(_ exchange: Exchange) {
        upstreamDeadline = nil
        if let upstream = exchange.upstream {
            exchange.upstream = nil
            pool.release(upstream, reusable: exchange.upstreamKeepAlive && exchange.sent)
        }
        release(exchange)
        let close = !exchange.head.isKeepAlive || !exchange.bodyDone || (inputClosed && queued.isEmpty)
        phase = close ? .done : .idle
        guard let context else { return }
        if close {
            context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        } else {
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            answered()
        }
    }
}
