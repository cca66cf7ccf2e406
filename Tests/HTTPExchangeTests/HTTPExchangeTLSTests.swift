import NIOCore
import NIOSSL
import TestSupport
import Testing
@testable import HTTPExchange

/// https: the certificate is verified against the URL's host name, also when
/// the connection goes to an address the caller gives.
@Suite struct HTTPExchangeTLSTests {
    func server() async throws -> ScriptedServer {
        try await ScriptedServer(tls: try TestCertificates.serverContext()) { _ in
            .reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        }
    }

    func send(_ url: String, _ connector: HTTPConnector) async -> Result<HTTPResponse, HTTPExchangeError> {
        do {
            return .success(
                try await connector.send(HTTPRequest(url: url), connectingTo: "127.0.0.1", deadline: .now() + .seconds(30), limit: 1024))
        } catch {
            return .failure(error)
        }
    }

    @Test func aCertificateNoTrustedRootSignedIsRefused() async throws {
        let server = try await server()
        guard case .failure(let error) = await send("https://localhost:\(server.port)/", .shared) else {
            Issue.record("a certificate from an untrusted CA was taken")
            return
        }
        #expect(error.isTLSFailure)
        #expect(error.description.hasPrefix("TLS with localhost:\(server.port) failed: certificate verification failed"))
        #expect(error.description.contains("CERTIFICATE_VERIFY_FAILED"))
        #expect(server.requests.isEmpty)
        await server.stop()
    }

    @Test func theHostNameIsVerifiedWhereverTheConnectionGoes() async throws {
        let server = try await server()
        let connector = HTTPConnector(tls: try TestCertificates.trustingTestCA())
        // The certificate names localhost and 127.0.0.1.
        #expect(try await send("https://localhost:\(server.port)/", connector).get().body == Array("ok".utf8))
        #expect(try await send("https://127.0.0.1:\(server.port)/", connector).get().status == 200)
        // The same server, reached for another name: its certificate is not that name's.
        guard case .failure(let error) = await send("https://idp.example:\(server.port)/", connector) else {
            Issue.record("a certificate for localhost was taken for idp.example")
            return
        }
        #expect(error.isTLSFailure)
        #expect(error.description.contains("certificate verification failed: the certificate is not for idp.example (it names localhost)"))
        // Nothing of the request went to a server that did not show it is idp.example.
        #expect(server.requests.count == 2)
        await server.stop()
    }
}

/// A TLS connection that ends without close_notify (outside review of issue 55):
/// someone on the path may have cut it.
@Suite struct TLSTruncationTests {
    func answer(_ reply: String) async throws -> (Result<HTTPResponse, HTTPExchangeError>, ScriptedServer) {
        let server = try await ScriptedServer(tls: try TestCertificates.serverContext()) { _ in .replyAndCut(reply) }
        let connector = HTTPConnector(tls: try TestCertificates.trustingTestCA())
        do {
            let response = try await connector.send(
                HTTPRequest(url: "https://localhost:\(server.port)/"), connectingTo: "127.0.0.1",
                deadline: .now() + .seconds(30), limit: 1024)
            return (.success(response), server)
        } catch {
            return (.failure(error), server)
        }
    }

    @Test func aBodyOnlyTheCloseEndsIsRefusedWithoutCloseNotify() async throws {
        let (result, server) = try await answer("HTTP/1.1 200 OK\r\n\r\n{\"access_token\":\"cut")
        guard case .failure(let error) = result else {
            Issue.record("a body cut without close_notify was taken as whole")
            return
        }
        #expect(error.isTLSFailure)
        #expect(error.description.contains("ended without close_notify during a body only the close ends"))
        #expect(server.requests.count == 1)
        await server.stop()
    }

    @Test func aFramedBodyThatArrivedWholeIsKept() async throws {
        let (result, server) = try await answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        #expect(try result.get().body == Array("ok".utf8))
        await server.stop()
    }
}

@Suite struct RequestTargetTests {
    @Test func urlsAreReadForTheWire() throws {
        let v6 = try RequestTarget("https://[::1]:8443/a/b?c=d#frag")
        #expect(v6.host == "::1")
        #expect(v6.port == 8443)
        #expect(v6.path == "/a/b?c=d")
        #expect(v6.hostHeader == "[::1]:8443")
        #expect(v6.isIPLiteral)
        let bare = try RequestTarget("HTTP://Example.org")
        #expect(bare.path == "/")
        #expect(bare.port == 80)
        #expect(bare.hostHeader == "Example.org")
        #expect(!bare.isIPLiteral)
        #expect(try RequestTarget("https://h:443?q").path == "/?q")
        #expect(try RequestTarget("https://h:443?q").hostHeader == "h")
        for bad in ["ftp://h/", "https://user@h/", "https://h:0/", "https://h:99999/", "https://h:x/", "https:///p", "h/p", "https://[::1/"] {
            #expect(throws: HTTPExchangeError.self) { try RequestTarget(bad) }
        }
    }
}

@Suite struct ServerIdentityTests {
    @Test func aNameOrOneWildcardLabel() {
        #expect(ServerIdentity.matches("IdP.Example.org.", "idp.example.org"))
        #expect(ServerIdentity.matches("a.example.org", "*.example.org"))
        #expect(!ServerIdentity.matches("example.org", "*.example.org"))
        #expect(!ServerIdentity.matches("a.b.example.org", "*.example.org"))
        #expect(!ServerIdentity.matches("a.org", "*.org"))
        #expect(!ServerIdentity.matches("evil-example.org", "example.org"))
        #expect(!ServerIdentity.matches("xa.example.org", "a*.example.org"))
    }
}
