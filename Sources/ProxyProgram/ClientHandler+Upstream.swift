import NIOCore
import TokendClient

/// The upstream's answer on its way back to the client.
extension ClientHandler: UpstreamUser {
    /// Bytes came from the upstream: once the request is sent, it may not fall silent for --timeout from now.
    func upstreamActive() {
        guard case .exchange(let exchange) = phase, exchange.sent else { return }
        awaitUpstream()
    }

    func upstreamReceived(_ part: ResponsePart) {
        guard case .exchange(let exchange) = phase else { return }
        exchange.answerBegan()
        if case .held(var parts) = exchange.reply {
            if case .end? = parts.last {
                exchange.upstreamKeepAlive = false  // bytes after the answer's end: none a request asked for
            } else {
                parts.append(part)
                exchange.reply = .held(parts)
            }
            return
        }
        switch part {
        case .head(let head):
            exchange.upstreamKeepAlive = head.keepAlive
            var refreshes = true
            if let proof = exchange.credentials?.proof {
                switch proofStep(head, proof: proof, of: exchange) {
                case .retry(let nonce):
                    hold(head, of: exchange)
                    return retry(exchange, nonce: nonce, setCookie: head.values(.setCookie))
                case .relay: refreshes = false
                case .usual: break
                }
            }
            if refreshes, head.status == 401, !exchange.streaming, !exchange.retried, let credentials = exchange.credentials {
                hold(head, of: exchange)
                return refresh(exchange, after: credentials.token, setCookie: head.values(.setCookie))
            }
            if settings.credentials.cookieRule == .toJar, head.fields.list.contains(where: { $0.kind == .setCookie }) {
                hold(head, of: exchange)
                return importCookies(head.values(.setCookie), of: exchange)
            }
            relay(head, of: exchange)
        case .body(let chunk):
            relay(chunk, of: exchange)
            if !socket.isWritable { exchange.upstream?.pauseReading() }
        case .end:
            finish(exchange)
        }
    }

    func upstreamReadComplete() {
        sendOutgoing(flush: true)
    }

    /// What was gathered for the client goes out as one write; with `flush`, it and the writes before it
    /// leave now (one pass down the pipeline for both, none when nothing is waiting).
    func sendOutgoing(flush: Bool = false) {
        if let bytes = outgoing {
            outgoing = nil
            if flush {
                socket.writeAndFlush(bytes)
                unflushed = false
            } else {
                writeToClient(bytes)
            }
        } else if flush && unflushed {
            socket.flush()
            unflushed = false
        }
    }

    /// Bytes for the client, sent with the next flush.
    func writeToClient(_ bytes: ByteBuffer) {
        socket.write(bytes)
        unflushed = true
    }

    func upstreamWritabilityChanged(writable: Bool) {
        watchSending()
        guard case .exchange(let exchange) = phase, exchange.streaming, !exchange.bodyDone else { return }
        if writable { resume() } else { pause() }
    }

    func socketWritabilityChanged() {
        if case .exchange(let exchange) = phase, !exchange.isHeld {
            if socket.isWritable {
                exchange.upstream?.resumeReading()
            } else {
                exchange.upstream?.pauseReading()
            }
        }
        if socket.isWritable { drain() }  // requests that waited for the client to take answers
    }

    func upstreamFailed(_ error: any Error) {
        guard case .exchange(let exchange) = phase else { return }
        // A byte of an answer (an interim one, half a head) means the upstream may have acted on the request.
        if exchange.upstream?.answerBegun == true { exchange.answerBegan() }
        exchange.upstream = nil
        exchange.upstreamKeepAlive = false
        // An answer held whole (a 401 while tokend refreshes, Set-Cookie on its way to tokend) stands,
        // whatever became of its connection after it.
        if exchange.heldWhole { return }
        // A kept connection the upstream closed while it sat idle: the whole request again on a new one, if
        // sending it twice does what sending it once does (RFC 9110 §9.2.2). The upstream may have acted on
        // a POST before the connection died: that one gets 502, and its client decides.
        if case .awaited = exchange.reply, !exchange.streaming, !exchange.reconnected, exchange.upstreamWasReused,
            exchange.head.method.isIdempotent, let credentials = exchange.credentials
        {
            exchange.reconnected = true
            guard let proof = credentials.proof else { return send(exchange, credentials: credentials, fresh: true) }
            // A proof is for one request: the request again gets one of its own.
            let (target, cookies) = (exchange.proofTarget, credentials.cookies)
            return ask(for: exchange, fresh: true) { try await $0.prove(target, cookies: cookies, nonceRetry: proof.nonceRetry) }
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
            socket.close(error: nil)
            return
        }
        let failure = UpstreamError(error)
        settings.logger.error("upstream failed", metadata: ["target": "\(exchange.url)", "kind": "\(failure.kind)", "problem": "\(failure.detail)"])
        release(exchange)
        if exchange.bodyDone {
            phase = .idle
            write(failure.answer(timeout: .nanoseconds(settings.timeout.nanoseconds)), version: exchange.head.version, close: !exchange.head.keepAlive)
            answered()
        } else {
            lastVersion = exchange.head.version
            phase = .skipping(failure.answer(timeout: .nanoseconds(settings.timeout.nanoseconds)), close: false)
            resume()
        }
    }

    /// The answer waits for tokend (a refresh, its cookies): the upstream is not read, nor timed, meanwhile.
    func hold(_ head: ResponseHead, of exchange: Exchange) {
        exchange.reply = .held([.head(head)])
        exchange.upstream?.pauseReading()
        upstreamDeadline = nil
    }

    /// A 401 to the token sent: one compare-and-refresh, then the request again (with a new proof of it
    /// for a DPoP-bound token), or the 401 as it came (without its challenge), or, when the session needs
    /// a login, an answer that says so. The 401's own Set-Cookie reaches tokend too, whether the request is
    /// retried or the 401 goes back.
    private func refresh(_ exchange: Exchange, after stale: AccessToken, setCookie: [String]) {
        guard let old = exchange.credentials else { return }
        let credentials = settings.credentials
        let loop = pool.loop
        let url = exchange.url
        let target = exchange.proofTarget
        let bound = LoopBound((self, exchange), on: loop)
        Task {
            let next: Result<RequestCredentials, any Error>?
            switch await credentials.refresh(after: stale) {
            case .loginRequired(let error):
                next = .failure(error)  // the client is told to have the session logged in, not the upstream's 401
            case .none:
                next = nil
            case .fresh(let fresh):
                if RequestCredentials.authorization(fresh).bound {
                    do {
                        next = .success(try await credentials.prove(target, cookies: old.cookies, nonceRetry: old.proof?.nonceRetry ?? false))
                    } catch {
                        next = .failure(error)
                    }
                } else {
                    next = RequestCredentials(token: fresh, cookies: old.cookies).map { .success($0) } ?? .failure(UnusableCredentials())
                }
            }
            let inJar = !setCookie.isEmpty && credentials.cookieRule == .toJar ? await credentials.importCookies(setCookie, from: url) : false
            loop.execute {
                let (handler, exchange) = bound.value
                exchange.cookiesInJar = inJar
                handler.refreshed(next, for: exchange)
            }
        }
    }

    private func refreshed(_ next: Result<RequestCredentials, any Error>?, for exchange: Exchange) {
        guard case .exchange(let current) = phase, current === exchange else { return }
        guard let next else { return release(held: exchange) }  // the 401 goes to the client as it came
        if case .success(let credentials) = next {
            settings.logger.info("retried after a 401 with a refreshed token", metadata: ["generation": "\(credentials.token.generation)"])
        }
        exchange.retried = true
        exchange.cookiesInJar = false  // the answer to the retry brings its own
        resend(exchange, next)
    }

    /// The held answer is dropped (its connection kept if it came whole), and the request goes again with
    /// `next`, or the client gets why it cannot.
    func resend(_ exchange: Exchange, _ next: Result<RequestCredentials, any Error>) {
        let whole = exchange.heldWhole
        exchange.reply = .awaited
        if let upstream = exchange.upstream {
            exchange.upstream = nil
            pool.release(upstream, reusable: whole && exchange.upstreamKeepAlive)
        }
        exchange.upstreamKeepAlive = true
        credentialsArrived(next, for: exchange)
    }

    /// The answer's Set-Cookie headers reach tokend's jar before the client has the answer.
    private func importCookies(_ setCookie: [String], of exchange: Exchange) {
        let credentials = settings.credentials
        let url = exchange.url
        let loop = pool.loop
        let bound = LoopBound((self, exchange), on: loop)
        Task {
            let inJar = await credentials.importCookies(setCookie, from: url)
            loop.execute {
                let (handler, exchange) = bound.value
                guard case .exchange(let current) = handler.phase, current === exchange else { return }
                exchange.cookiesInJar = inJar
                handler.release(held: exchange)
            }
        }
    }

    /// What was held goes to the client, and the rest of the answer follows as it comes.
    private func release(held exchange: Exchange) {
        guard case .held(let held) = exchange.reply else { return }
        exchange.reply = .begun
        for part in held {
            switch part {
            case .head(let head): relay(head, of: exchange)
            case .body(let chunk): relay(chunk, of: exchange)
            case .end: return finish(exchange)
            }
        }
        sendOutgoing(flush: true)
        // The rest of the answer is the upstream's to send again, within --timeout.
        if exchange.sent { awaitUpstream() }
        exchange.upstream?.resumeReading()
    }

    /// The upstream's head, hop-by-hop headers removed, with the client's HTTP version. A body of known
    /// length passes as it is; another is sent in chunks to an HTTP/1.1 client, and until the connection
    /// closes to an HTTP/1.0 one. An event stream's idle bound is --stream-idle-timeout from now on.
    private func relay(_ head: ResponseHead, of exchange: Exchange) {
        let version = exchange.head.version
        var relay = Exchange.Relay(chunked: false, eventStream: head.isEventStream)
        switch head.framing {
        case .length: break
        case .chunked, .untilClose:
            if version.minor == 1 { relay.chunked = true } else { exchange.closeAfter = true }
        }
        exchange.reply = .relaying(relay)
        if !exchange.head.keepAlive { exchange.closeAfter = true }
        var bytes = pool.loop.allocator.buffer(capacity: head.bytes.readableBytes + Self.gathered + 64)
        bytes.writeClientHead(head, version: version, chunked: relay.chunked, close: exchange.closeAfter, withoutCookies: exchange.cookiesInJar)
        sendOutgoing()
        outgoing = bytes
        if relay.eventStream, exchange.sent { awaitUpstream() }
    }

    /// Body pieces up to this size are copied behind the head (or the pieces before them) to go out in one write.
    static let gathered = 4096

    /// A piece of the upstream's body, in the client's framing.
    private func relay(_ chunk: ByteBuffer, of exchange: Exchange) {
        guard chunk.readableBytes > 0 else { return }
        let chunked = exchange.relay?.chunked ?? false
        if chunk.readableBytes <= Self.gathered, outgoing != nil {
            if chunked { outgoing!.writeChunkSize(chunk.readableBytes) }
            outgoing!.writeImmutableBuffer(chunk)
            if chunked { outgoing!.writeStaticString("\r\n") }
            return
        }
        sendOutgoing()
        if chunked {
            var size = pool.loop.allocator.buffer(capacity: 18)
            size.writeChunkSize(chunk.readableBytes)
            writeToClient(size)
            writeToClient(chunk)
            writeToClient(Wire.crlf)
        } else {
            writeToClient(chunk)
        }
    }

    /// The answer's end: the upstream connection goes back to the pool, the client's next request may come.
    private func finish(_ exchange: Exchange) {
        upstreamDeadline = nil
        if let upstream = exchange.upstream {
            exchange.upstream = nil
            pool.release(upstream, reusable: exchange.upstreamKeepAlive && exchange.sent)
        }
        release(exchange)
        let close = exchange.closeAfter || !exchange.bodyDone || (inputClosed && !decoder.hasBytes)
        phase = close ? .done : .idle
        guard socket.isActive else { return }
        if exchange.relay?.chunked == true {
            if outgoing != nil { outgoing!.writeStaticString("0\r\n\r\n") } else { writeToClient(Wire.lastChunk) }
        }
        if close {
            sendOutgoing()
            writeThenClose(ByteBuffer())
        } else {
            sendOutgoing(flush: true)
            answered()
        }
    }
}
