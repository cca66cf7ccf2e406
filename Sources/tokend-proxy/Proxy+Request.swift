import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import TokendClient

extension Proxy {
    typealias Parts = NIOAsyncChannelInboundStream<HTTPServerRequestPart>.AsyncIterator
    typealias Writer = NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>

    /// One request: token and cookies on, to the upstream, the answer back
    /// (streamed), its cookies into tokend. Returns false when the connection
    /// cannot go on (the client's body was not read to its end).
    func handle(_ head: HTTPRequestHead, _ parts: inout Parts, _ watch: StallWatch, _ outbound: Writer) async throws -> Bool {
        let target: String
        switch RequestPath.normalized(head.uri) {
        case .success(let path): target = upstream.url(for: path)
        case .failure(let refusal):
            try await skipBody(&parts, watch)
            logger.warning("refused a request path", metadata: ["reason": "\(refusal.why)"])
            try await Answer.badRequest(refusal.why).write(to: outbound, version: head.version)
            return true
        }
        // The body, kept whole up to the limit and while the budget lasts, so that a 401 can be retried.
        var kept = ByteBuffer()
        defer { bodyBudget.give(kept.readableBytes) }
        var overflow: ByteBuffer?
        var complete = false
        reading: while let part = try await watch.next(&parts) {
            switch part {
            case .body(let chunk):
                guard kept.readableBytes + chunk.readableBytes <= bufferLimit, bodyBudget.take(chunk.readableBytes) else {
                    overflow = chunk
                    break reading
                }
                kept.writeImmutableBuffer(chunk)
            case .end:
                complete = true
                watch.finish()
                break reading
            case .head:
                throw ProxyProtocolError()
            }
        }
        if !complete && overflow == nil { throw ClientGone() }  // never a truncated body upstream
        let token: AccessToken
        let cookieHeader: String
        do {
            (token, cookieHeader) = try await withTokend { client in
                let token = try await client.token(session: self.session)
                return (token, try await client.cookies(session: self.session, url: target).header)
            }
        } catch {
            if !complete { try await skipBody(&parts, watch) }
            logger.error("no token from tokend", metadata: ["problem": "\(error)"])
            try await Answer.tokendFailed(error).write(to: outbound, version: head.version)
            return true
        }
        var request = HTTPClientRequest(url: target)
        request.method = head.method
        request.headers = Self.forwarded(head.headers, token: token, cookies: cookieHeader)
        let response: HTTPClientResponse
        do {
            if complete {
                request.body = .bytes(kept)
                response = try await sendRetryingOn401(request, token: token)
            } else {
                response = try await sendStreaming(request, head: head, first: kept, overflow, &parts, watch)
            }
        } catch let failure as UpstreamFailure {
            logger.error("upstream failed", metadata: ["target": "\(target)", "problem": "\(failure.reason)"])
            try await failure.answer.write(to: outbound, version: head.version)
            return true
        }
        await importCookies(response.headers["Set-Cookie"], from: target)
        try await relay(response, version: head.version, to: outbound)
        return true
    }

    /// A body kept whole: on a 401 to the token sent, one compare-and-refresh and one retry.
    func sendRetryingOn401(_ request: HTTPClientRequest, token: AccessToken) async throws -> HTTPClientResponse {
        let first = try await execute(request)
        guard first.status == .unauthorized else { return first }
        let fresh = try? await withTokend { client in
            try await client.refresh(session: self.session, staleGeneration: token.generation)
        }
        guard let fresh, fresh.accessToken != token.accessToken else { return first }
        _ = try? await first.body.collect(upTo: 1 << 20)  // the 401's body, read so that its connection is reused
        var again = request
        again.headers.replaceOrAdd(name: "Authorization", value: fresh.authorizationHeaderValue)
        logger.info("retried after a 401 with a refreshed token", metadata: ["generation": "\(fresh.generation)"])
        return try await execute(again)
    }

    /// A body over the limit streams to the upstream as it arrives; a 401 goes back to the client.
    func sendStreaming(
        _ request: HTTPClientRequest, head: HTTPRequestHead, first: ByteBuffer, _ overflow: ByteBuffer?,
        _ parts: inout Parts, _ watch: StallWatch
    ) async throws -> HTTPClientResponse {
        let pipe = BodyPipe()
        var request = request
        let length = head.headers.first(name: "Content-Length").flatMap(Int.init)
        request.body = .stream(pipe, length: length.map { .known(Int64($0)) } ?? .unknown)
        let prepared = request
        let upstream = Task {
            defer { pipe.close() }
            return try await self.execute(prepared)
        }
        do {
            var sending = await pipe.send(first)
            if let overflow, sending { sending = await pipe.send(overflow) }
            reading: while true {
                switch try await watch.next(&parts) {
                case .body(let chunk)?: if sending { sending = await pipe.send(chunk) }
                case .end?: break reading
                case .head?: throw ProxyProtocolError()
                case nil: throw ClientGone()
                }
            }
        } catch {
            pipe.abort()  // the upstream request fails: it never takes a cut body for a whole one
            upstream.cancel()
            throw error
        }
        watch.finish()
        pipe.end()
        return try await upstream.value
    }

    /// No deadline on the whole exchange (a 2 GiB upload or download may take
    /// long): the upstream must start answering within `timeout` of the
    /// request's end, and may not fall silent for longer (the client's read timeout).
    func execute(_ request: HTTPClientRequest) async throws -> HTTPClientResponse {
        do {
            return try await http.execute(request, deadline: .distantFuture)
        } catch {
            throw UpstreamFailure(error, timeout: timeout)
        }
    }

    func importCookies(_ setCookie: [String], from url: String) async {
        guard !setCookie.isEmpty else { return }
        do {
            _ = try await withTokend { client in
                try await client.importCookies(session: self.session, url: url, setCookie: setCookie)
            }
        } catch {
            logger.warning("cookies not passed to tokend", metadata: ["problem": "\(error)"])
        }
    }

    /// The upstream's answer, streamed: head (hop-by-hop headers removed), body, end.
    func relay(_ response: HTTPClientResponse, version: HTTPVersion, to outbound: Writer) async throws {
        var headers = Self.endToEnd(response.headers)
        if headers.first(name: "Content-Length") == nil { headers.replaceOrAdd(name: "Transfer-Encoding", value: "chunked") }
        try await outbound.write(.head(HTTPResponseHead(version: version, status: response.status, headers: headers)))
        for try await chunk in response.body {
            try await outbound.write(.body(.byteBuffer(chunk)))
        }
        try await outbound.write(.end(nil))
    }

    /// The client's headers with tokend's token and cookies; hop-by-hop ones, Host and the client's own credentials go.
    static func forwarded(_ headers: HTTPHeaders, token: AccessToken, cookies: String) -> HTTPHeaders {
        var result = endToEnd(headers)
        result.remove(name: "Host")
        result.remove(name: "Cookie")
        result.remove(name: "Expect")  // the proxy reads the body itself; the upstream gets it whole
        result.replaceOrAdd(name: "Authorization", value: token.authorizationHeaderValue)
        if !cookies.isEmpty { result.add(name: "Cookie", value: cookies) }
        return result
    }

    /// RFC 9110 §7.6.1: hop-by-hop headers, and those the Connection header names, stay on their hop.
    static func endToEnd(_ headers: HTTPHeaders) -> HTTPHeaders {
        let named = headers["Connection"].flatMap { $0.split(separator: ",") }.map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        }
        let hopByHop: Set<String> = [
            "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer",
            "transfer-encoding", "upgrade",
        ]
        var result = HTTPHeaders()
        for (name, value) in headers where !hopByHop.contains(name.lowercased()) && !named.contains(name.lowercased()) {
            result.add(name: name, value: value)
        }
        return result
    }
}

struct ProxyProtocolError: Error {}

/// The client closed its connection before its request was whole.
struct ClientGone: Error {}
