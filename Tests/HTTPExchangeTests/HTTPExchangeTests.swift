import NIOCore
import NIOSSL
import TestSupport
import Testing
@testable import HTTPExchange

/// The exchange against real servers on loopback sockets.
@Suite struct HTTPExchangeTests {
    let connector = HTTPConnector.shared

    func send(
        _ request: HTTPRequest, to server: ScriptedServer, limit: Int = 1024, within seconds: Int64 = 30,
        using connector: HTTPConnector = .shared
    ) async throws(HTTPExchangeError) -> HTTPResponse {
        try await connector.send(
            request, connectingTo: "127.0.0.1", deadline: .now() + .seconds(seconds), limit: limit)
    }

    func failure(_ body: () async throws(HTTPExchangeError) -> HTTPResponse) async -> HTTPExchangeError? {
        do {
            let response = try await body()
            Issue.record("an answer came: HTTP \(response.status)")
            return nil
        } catch {
            return error
        }
    }

    @Test func aContentLengthBodyAndTheRequestAsSent() async throws {
        let server = try await ScriptedServer { _ in
            .reply("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nDPoP-Nonce: n-1\r\n\r\nhello")
        }
        let request = HTTPRequest(
            url: "http://localhost:\(server.port)/token?x=1#fragment", method: "POST",
            headers: [(name: "Content-Type", value: "application/x-www-form-urlencoded"), (name: "Host", value: "evil")],
            body: Array("grant_type=refresh_token".utf8))
        let response = try await send(request, to: server)
        #expect(response.status == 200)
        #expect(response.body == Array("hello".utf8))
        #expect(response.headers("set-cookie") == ["a=1", "b=2"])
        #expect(response.header("DPoP-Nonce") == "n-1")
        let received = try #require(server.requests.first)
        #expect(received.head.hasPrefix("POST /token?x=1 HTTP/1.1\r\n"))
        #expect(received.header("Host") == "localhost:\(server.port)")
        #expect(received.header("Content-Length") == "24")
        #expect(received.header("Connection") == "close")
        #expect(received.body == Array("grant_type=refresh_token".utf8))
        #expect(!received.head.contains("evil"))
        await server.stop()
    }

    @Test func aChunkedBody() async throws {
        let server = try await ScriptedServer { _ in
            .replyAndHold("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        }
        let response = try await send(HTTPRequest(url: "http://localhost:\(server.port)/"), to: server)
        #expect(String(decoding: response.body, as: UTF8.self) == "hello world")
        // The client closes its connection itself once the answer is complete.
        try await eventually(within: 30) { server.closed == 1 }
        await server.stop()
    }

    @Test func aBodyThatEndsWithTheConnection() async throws {
        let server = try await ScriptedServer { _ in .reply("HTTP/1.1 200 OK\r\n\r\nall of it") }
        let response = try await send(HTTPRequest(url: "http://localhost:\(server.port)/"), to: server)
        #expect(String(decoding: response.body, as: UTF8.self) == "all of it")
        await server.stop()
    }

    @Test func bodiesOverTheLimitAreRefused() async throws {
        let big = String(repeating: "A", count: 1025)
        let server = try await ScriptedServer { request in
            request.head.contains("/declared")
                ? .replyAndHold("HTTP/1.1 200 OK\r\nContent-Length: 1025\r\n\r\n\(big)")
                : .replyAndHold("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n401\r\n\(big)\r\n0\r\n\r\n")
        }
        for path in ["/declared", "/chunked"] {
            let error = await failure { () async throws(HTTPExchangeError) in
                try await send(HTTPRequest(url: "http://localhost:\(server.port)\(path)"), to: server)
            }
            #expect(error?.isTooManyBytes == true)
            #expect(error?.description == "the answer is longer than 1024 bytes")
        }
        let exact = try await ScriptedServer { _ in .reply("HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n\(big.dropLast())") }
        #expect(try await send(HTTPRequest(url: "http://localhost:\(exact.port)/"), to: exact).body.count == 1024)
        try await eventually(within: 30) { server.closed == 2 }
        await server.stop()
        await exact.stop()
    }

    @Test func interimAnswersAreSkipped() async throws {
        let server = try await ScriptedServer { _ in
            .reply("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
        }
        let response = try await send(HTTPRequest(url: "http://localhost:\(server.port)/", method: "POST"), to: server)
        #expect(response.status == 201)
        #expect(response.body == Array("ok".utf8))
        #expect(response.header("Link") == nil)
        await server.stop()
    }

    @Test func aServerThatNeverAnswersMeetsTheDeadlineAndIsClosed() async throws {
        let server = try await ScriptedServer { _ in .silent }
        let error = await failure { () async throws(HTTPExchangeError) in
            try await connector.send(
                HTTPRequest(url: "http://localhost:\(server.port)/", method: "POST", body: Array("secret=s3cr3t".utf8)),
                connectingTo: "127.0.0.1", deadline: .now() + .milliseconds(300), limit: 1024)
        }
        #expect(error?.isDeadlineExceeded == true)
        #expect(error?.description.contains("s3cr3t") == false)
        try await eventually(within: 30) { server.closed == 1 }
        await server.stop()
    }

    @Test func cancellationClosesTheConnection() async throws {
        let server = try await ScriptedServer { _ in .silent }
        let connector = self.connector
        let task = Task {
            try await connector.send(
                HTTPRequest(url: "http://localhost:\(server.port)/"), connectingTo: "127.0.0.1", deadline: .now() + .seconds(60),
                limit: 1024)
        }
        try await eventually(within: 30) { server.requests.count == 1 }
        task.cancel()
        do {
            let response = try await task.value
            Issue.record("an answer came: HTTP \(response.status)")
        } catch let error as HTTPExchangeError {
            #expect(error.isCancelled)
        }
        try await eventually(within: 30) { server.closed == 1 }
        await server.stop()
    }

    @Test func aRefusedConnectionIsOneNotMade() async throws {
        let server = try await ScriptedServer { _ in .reply("HTTP/1.1 204 No Content\r\n\r\n") }
        // 127.0.0.2 is this host too, where nothing listens on the port (the server is bound to 127.0.0.1).
        let refused = await failure { () async throws(HTTPExchangeError) in
            try await connector.send(
                HTTPRequest(url: "http://localhost:\(server.port)/"), connectingTo: "127.0.0.2", deadline: .now() + .seconds(30),
                limit: 1024)
        }
        #expect(refused?.connectionNotMade == true)
        #expect(refused?.description.contains("refused") == true)
        // By name: every address of localhost may be tried; the one that listens answers.
        let response = try await connector.send(
            HTTPRequest(url: "http://localhost:\(server.port)/"), deadline: .now() + .seconds(30), limit: 1024)
        #expect(response.status == 204)
        #expect(server.accepted == 1)
        await server.stop()
    }

    @Test func aServerThatClosesWithoutAnsweringIsNotAConnectFailure() async throws {
        let server = try await ScriptedServer { _ in .close }
        let error = await failure { () async throws(HTTPExchangeError) in
            try await send(HTTPRequest(url: "http://localhost:\(server.port)/"), to: server)
        }
        #expect(error?.connectionNotMade == false)
        #expect(error?.description.contains("closed the connection without answering") == true)
        await server.stop()
    }

    @Test(arguments: ["garbage\r\n\r\n", "HTTP/1.1 abc Nonsense\r\n\r\n", "HTTP/1.1 200 OK\r\nBad Header\r\n\r\n"])
    func aMalformedHeadIsSaidClearly(_ reply: String) async throws {
        let server = try await ScriptedServer { _ in .replyAndHold(reply) }
        let error = await failure { () async throws(HTTPExchangeError) in
            try await send(HTTPRequest(url: "http://localhost:\(server.port)/"), to: server)
        }
        #expect(error?.isMalformedResponse == true)
        #expect(error?.description.contains("did not answer in HTTP/1.1") == true)
        try await eventually(within: 30) { server.closed == 1 }
        await server.stop()
    }
}
