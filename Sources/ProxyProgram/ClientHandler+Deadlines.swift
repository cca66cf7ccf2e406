import NIOCore
import NIOHTTP1

/// Reading paused and resumed, deadlines, answers the proxy gives itself.
extension ClientHandler {
    /// The client's next body part is awaited: it must come within --body-timeout.
    func waitForBody() {
        guard !paused else { return }
        let deadline = NIODeadline.now() + settings.bodyTimeout
        bodyDeadline = deadline
        alarm.ensure(deadline)
    }

    /// The upstream's answer is awaited: it must begin, or go on, within --timeout from now; an event
    /// stream, once its head went to the client, within --stream-idle-timeout (its events come when the
    /// server has something to say, and a stream that sends is never cut). Not while an answer is held
    /// for tokend (what is awaited then is tokend): releasing it calls this again.
    func awaitUpstream() {
        var bound = settings.timeout
        if case .exchange(let exchange) = phase {
            if exchange.isHeld { return }
            if exchange.relay?.eventStream == true { bound = settings.streamIdleTimeout }
        }
        let deadline = NIODeadline.now() + bound
        upstreamDeadline = deadline
        alarm.ensure(deadline)
    }

    /// While request bytes wait for the upstream to take them, it must take some within --timeout of
    /// the last it took; once none wait, nothing is timed here.
    func watchSending() {
        guard case .exchange(let exchange) = phase, let socket = exchange.upstream?.socket, socket.isWaitingForRoom else {
            sendDeadline = nil
            return
        }
        let deadline = socket.lastProgress + settings.timeout
        sendDeadline = deadline
        alarm.ensure(deadline)
    }

    /// The upstream took none of the request for --timeout: 504 if the answer has not begun, and both
    /// connections closed (the request cannot be finished, and where the client's body ends is not read).
    func upstreamStoppedTaking(_ exchange: Exchange) {
        settings.logger.error("upstream stopped taking the request", metadata: ["target": "\(exchange.url)"])
        abandon(exchange)
        phase = .done
        if exchange.relayedHead { return socket.close(error: nil) }
        write(UpstreamError.sendTimedOut.answer(timeout: .nanoseconds(settings.timeout.nanoseconds)), version: exchange.head.version, close: true)
    }

    /// No more of the client's body for now; the time until `resume` is not the client's.
    func pause() {
        paused = true
        bodyDeadline = nil
        socket.reading = false
    }

    func resume() {
        guard paused else { return }
        paused = false
        waitForBody()
        socket.reading = true
    }

    /// An answer is written: the next request's head must come within --header-timeout.
    /// Requests that came meanwhile are taken next.
    func answered() {
        bodyDeadline = nil
        upstreamDeadline = nil
        if stopping, case .idle = phase {
            phase = .done
            return writeThenClose(ByteBuffer())
        }
        let deadline = NIODeadline.now() + settings.headerTimeout
        headDeadline = deadline
        alarm.ensure(deadline)
        drain()
    }

    /// `bytes`, then the connection closed: once they are written, or after --timeout if the client
    /// does not take them.
    func writeThenClose(_ bytes: ByteBuffer) {
        guard socket.isActive else { return }
        unflushed = false
        socket.write(bytes)
        socket.closeAfterWriting()
        let deadline = NIODeadline.now() + settings.timeout
        closeDeadline = deadline
        alarm.ensure(deadline)
    }

    /// An answer of the proxy's own, to the request being read or dropped.
    func write(_ answer: Answer, version: HTTPVersion?, close: Bool) {
        guard socket.isActive else { return }
        let close = close || (inputClosed && !decoder.hasBytes)
        let bytes = answer.bytes(version: version ?? lastVersion, close: close, jsonRPC: answersInJSONRPC)
        if close {
            writeThenClose(bytes)
        } else {
            socket.writeAndFlush(bytes)
            unflushed = false
        }
    }

    /// The bytes the exchange kept go back to the budget.
    func release(_ exchange: Exchange) {
        sendDeadline = nil
        settings.bodyBudget.give(exchange.budgeted)
        exchange.budgeted = 0
        exchange.kept = ByteBuffer()
        exchange.pending = []
    }

    /// The client went away mid-exchange: the upstream request ends unfinished (never a cut body for a
    /// whole one) and its connection is not kept.
    func abandon(_ exchange: Exchange) {
        release(exchange)
        if exchange.isHeld { exchange.reply = .begun }
        if let upstream = exchange.upstream {
            exchange.upstream = nil
            pool.release(upstream, reusable: false)
        }
    }

    /// The alarm went off: a deadline that passed ends what it guards; the next one is returned.
    func checkDeadlines() -> NIODeadline? {
        let now = NIODeadline.now()
        if let deadline = closeDeadline, deadline <= now {
            closeDeadline = nil
            socket.close(error: nil)
            return nil
        }
        if let deadline = blockedDeadline, deadline <= now {
            // The client sent requests and took none of the answers for --timeout.
            blockedDeadline = nil
            if case .exchange(let exchange) = phase { abandon(exchange) }
            phase = .done
            socket.close(error: nil)
            return nil
        }
        if let deadline = headDeadline, deadline <= now, case .idle = phase {
            phase = .done
            let seconds = settings.headerTimeout.nanoseconds / 1_000_000_000
            writeThenClose(
                Answer(status: .requestTimeout, message: "no whole request head came within \(seconds) s").bytes(version: .http1_1, close: true))
            return closeDeadline
        }
        if let deadline = bodyDeadline, deadline <= now, !paused {
            bodyDeadline = nil
            let seconds = settings.bodyTimeout.nanoseconds / 1_000_000_000
            let answer = Answer(status: .requestTimeout, message: "the request body stalled for \(seconds) s")
            switch phase {
            case .exchange(let exchange):
                abandon(exchange)
                phase = .done
                if exchange.relayedHead { socket.close(error: nil) } else { write(answer, version: exchange.head.version, close: true) }
                return nil
            case .skipping:
                phase = .done
                write(answer, version: nil, close: true)
                return nil
            default:
                break
            }
        }
        if let deadline = sendDeadline, deadline <= now {
            sendDeadline = nil
            if case .exchange(let exchange) = phase, let socket = exchange.upstream?.socket, socket.isWaitingForRoom {
                let next = socket.lastProgress + settings.timeout
                guard next <= now else {
                    sendDeadline = next
                    return [headDeadline, bodyDeadline, upstreamDeadline, closeDeadline, blockedDeadline, next].compactMap { $0 }.min()
                }
                upstreamStoppedTaking(exchange)
                return closeDeadline
            }
        }
        if let deadline = upstreamDeadline, deadline <= now {
            upstreamDeadline = nil
            if case .exchange(let exchange) = phase {
                fail(exchange, exchange.relay?.eventStream == true ? UpstreamError.streamIdle : UpstreamError.answerTimedOut)
            }
        }
        // What passed and guards nothing now is dropped, so the alarm never goes off in a loop.
        if let deadline = headDeadline, deadline <= now { headDeadline = nil }
        if let deadline = bodyDeadline, deadline <= now { bodyDeadline = nil }
        return [headDeadline, bodyDeadline, upstreamDeadline, closeDeadline, blockedDeadline, sendDeadline].compactMap { $0 }.min()
    }
}
