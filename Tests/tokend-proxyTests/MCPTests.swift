import Foundation
import NIOCore
import Logging
import NIOHTTP1
import Persons
import Testing
import TokendClient

@testable import ProxyProgram

/// What the proxy does of MCP's streamable HTTP (spec 2025-06-18, Transports) by itself: which answers are
/// event streams, which clients read its own answers as JSON-RPC errors, what crosses of the MCP headers
/// and the upstream's challenge, and what a client is told when the session needs a login.
@Suite struct MCPTests {
    func response(_ text: String) throws -> ResponseHead { try ResponseHead(ByteBuffer(string: text), toHead: false) }
    func request(_ text: String) throws -> RequestHead { try RequestHead(ByteBuffer(string: text)) }

    @Test func anEventStreamIsKnownByItsMediaTypeInAnyCaseWithParameters() throws {
        let streams = ["text/event-stream", "Text/Event-Stream; charset=utf-8", "text/event-stream ;x=1"]
        for type in streams {
            #expect(try response("HTTP/1.1 200 OK\r\nContent-Type: \(type)\r\nCache-Control: no-cache\r\n\r\n").isEventStream, "\(type)")
        }
        for type in ["application/json", "text/event-streams", "text/plain; x=text/event-stream"] {
            #expect(try !response("HTTP/1.1 200 OK\r\nContent-Type: \(type)\r\nContent-Length: 0\r\n\r\n").isEventStream, "\(type)")
        }
        #expect(try !response("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").isEventStream)
    }

    @Test func aClientThatAcceptsAnEventStreamOrNamesAnMCPSessionSpeaksMCP() throws {
        // What the MCP SDKs send with every POST and GET.
        #expect(try request("POST /mcp HTTP/1.1\r\nAccept: application/json, text/event-stream\r\nContent-Length: 0\r\n\r\n").speaksMCP)
        #expect(try request("DELETE /mcp HTTP/1.1\r\nMcp-Session-Id: 1868a90c\r\n\r\n").speaksMCP)
        #expect(try request("GET /mcp HTTP/1.1\r\nmcp-protocol-version: 2025-06-18\r\n\r\n").speaksMCP)
        #expect(try !request("GET /data HTTP/1.1\r\nAccept: application/json, */*\r\n\r\n").speaksMCP)
        #expect(try !request("GET /data HTTP/1.1\r\n\r\n").speaksMCP)
    }

    /// The session id and protocol version cross both ways as they came; the client's own Authorization
    /// never reaches the upstream, and the upstream's challenge (its resource_metadata) and any credential
    /// in its answer never reach the client.
    @Test func mcpHeadersCrossBothWaysAndChallengesDoNot() throws {
        let head = try request(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:9\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer agents-own\r\n"
                + "Mcp-Session-Id: s-1\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n")
        var bytes = ByteBuffer()
        let lines = Wire.credentialLines(host: "mcp.example.com", authorization: "Bearer tokend", cookies: "")
        bytes.writeUpstreamHead(head, uri: "/mcp", credentialLines: lines, length: 2, chunked: false)
        #expect(String(buffer: bytes) == "POST /mcp HTTP/1.1\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: s-1\r\n"
            + "MCP-Protocol-Version: 2025-06-18\r\nContent-Type: application/json\r\nHost: mcp.example.com\r\nAuthorization: Bearer tokend\r\n"
            + "Content-Length: 2\r\n\r\n")
        let refused = try response(
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer error=\"invalid_token\", resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource\"\r\n"
                + "www-authenticate: DPoP algs=\"ES256\"\r\nAuthorization: Bearer echoed\r\nMcp-Session-Id: s-1\r\nContent-Length: 0\r\n\r\n")
        bytes.clear()
        bytes.writeClientHead(refused, version: .http1_1, chunked: false, close: false)
        #expect(String(buffer: bytes) == "HTTP/1.1 401 Unauthorized\r\nMcp-Session-Id: s-1\r\nContent-Length: 0\r\n\r\n")
        let stream = try response(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nmcp-session-id: s-2\r\nTransfer-Encoding: chunked\r\n\r\n")
        bytes.clear()
        bytes.writeClientHead(stream, version: .http1_1, chunked: true, close: false)
        #expect(String(buffer: bytes) == "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nmcp-session-id: s-2\r\nTransfer-Encoding: chunked\r\n\r\n")
    }

    /// The session needs a login: 503 (never 401, which sends an MCP client into an OAuth flow of its own),
    /// naming the command that logs it in; to an MCP client, as a JSON-RPC error its SDK shows its user.
    @Test func aLoginRequiredIsA503ThatNamesTheLoginCommand() throws {
        let error = TokendClientError.loginRequired(session: "alice/mcp", reason: "the refresh token was refused (invalid_grant)")
        let answer = Answer.tokendFailed(error)
        #expect(answer.status == .serviceUnavailable)
        #expect(answer.message.contains("`tokenctl login --session alice/mcp --browser`"))
        #expect(answer.message.contains("invalid_grant"))
        #expect(Answer.loginRequired(session: "default", reason: "not logged in yet").message.contains("`tokenctl login --browser`"))

        let text = String(buffer: answer.bytes(version: .http1_1, jsonRPC: true))
        let parts = text.components(separatedBy: "\r\n\r\n")
        #expect(parts[0].hasPrefix("HTTP/1.1 503 Service Unavailable\r\n"))
        #expect(parts[0].contains("\r\nContent-Type: application/json\r\n") && parts[0].contains("Content-Length: \(parts[1].utf8.count)"))
        #expect(!text.lowercased().contains("www-authenticate") && !text.contains("resource_metadata"))
        let body = try #require(try JSONSerialization.jsonObject(with: Data(parts[1].utf8)) as? [String: Any])
        #expect(body["jsonrpc"] as? String == "2.0" && body["id"] is NSNull)
        let rpc = try #require(body["error"] as? [String: Any])
        #expect(rpc["code"] as? Int == Answer.jsonRPCCode)
        #expect((rpc["message"] as? String)?.hasPrefix("tokend-proxy: session alice/mcp needs a login") == true)
        #expect((rpc["data"] as? [String: Any])?["status"] as? Int == 503)

        let plain = String(buffer: answer.bytes(version: .http1_1))
        #expect(plain.contains("Content-Type: text/plain; charset=utf-8\r\n") && plain.hasSuffix("then try again\n"))
    }

    /// An exchange's two sides, each one phase at a time: the request kept or streaming, whole, sent;
    /// the reply awaited, begun, held for tokend, relayed.
    @Test func anExchangeGoesThroughItsPhasesInOrder() throws {
        let head = try request("POST /mcp HTTP/1.1\r\nContent-Length: 4\r\n\r\n")
        let upstream = try #require(Upstream("https://mcp.example.com/"))
        let kept = Exchange(head: head, upstream: upstream, target: "/mcp", path: "/mcp")
        #expect(!kept.streaming && !kept.bodyDone && !kept.sent)
        kept.bodyEnded()
        #expect(!kept.streaming && kept.bodyDone && !kept.sent)
        kept.outgrew()  // a whole body does not begin to stream
        #expect(!kept.streaming)
        kept.markSent()
        #expect(kept.sent && kept.bodyDone && !kept.streaming)

        let streamed = Exchange(head: head, upstream: upstream, target: "/mcp", path: "/mcp")
        streamed.outgrew()
        #expect(streamed.streaming && !streamed.bodyDone && streamed.upstreamChunked == false)
        streamed.bodyEnded()
        streamed.markSent()
        #expect(streamed.streaming && streamed.bodyDone && streamed.sent)

        let reply = Exchange(head: head, upstream: upstream, target: "/mcp", path: "/mcp")
        guard case .awaited = reply.reply else { Issue.record("a new exchange awaits its answer"); return }
        reply.answerBegan()
        guard case .begun = reply.reply else { Issue.record("a byte came: begun"); return }
        let refused = try response("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
        reply.reply = .held([.head(refused)])
        reply.answerBegan()  // more bytes while held: still held
        #expect(reply.isHeld && !reply.heldWhole && !reply.relayedHead)
        reply.reply = .held([.head(refused), .end])
        #expect(reply.heldWhole)
        reply.reply = .relaying(.init(chunked: true, eventStream: true))
        #expect(reply.relayedHead && !reply.isHeld && reply.relay == .init(chunked: true, eventStream: true))
        reply.answerBegan()  // bytes of the body: still relaying
        #expect(reply.relay?.eventStream == true)
    }

    /// tokend-proxy on TCP: a session a user added serves its owner's person only, whatever --peers says;
    /// one tokend.toml configures serves every local user unless --peers own; until tokend has said which,
    /// only the own person.
    @Test func onTCPAUsersSessionServesItsOwnersPersonOnly() {
        let persons = SubordinateIDs(parsing: "alice:100000:65536\n", resolve: { $0 == "alice" ? 1000 : nil })
        let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        func rule(_ setting: PeerRule.Setting?, _ kind: PeerRule.Kind?) -> PeerRule {
            let rule = PeerRule(setting: setting, persons: persons, own: 1000, logger: quiet)
            if let kind { rule.learn(kind) }
            return rule
        }
        func admitted(_ rule: PeerRule) -> [Bool] { [1000, 100_123, 1001, 65534].map { rule.admits(owner: $0) } + [rule.admits(owner: nil)] }
        let ownOnly = [true, true, false, false, false]
        #expect(admitted(rule(nil, nil)) == ownOnly, "not known yet")
        #expect(admitted(rule(.all, nil)) == ownOnly, "not known yet, whatever --peers says")
        #expect(admitted(rule(nil, .owned(by: "alice"))) == ownOnly)
        #expect(admitted(rule(.all, .owned(by: "alice"))) == ownOnly)
        #expect(admitted(rule(nil, .configured)) == [true, true, true, true, true])
        #expect(admitted(rule(.own, .configured)) == ownOnly)
        // The session turns out to be a user's after all (a reconnect's status says so): own only from then.
        let changing = rule(nil, .configured)
        changing.learn(.owned(by: "alice"))
        #expect(admitted(changing) == ownOnly)
    }
}
