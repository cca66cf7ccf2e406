import NIOCore
import NIOHTTP1
import Testing

@testable import ProxyProgram

/// The proxy's rules against web pages and paths, as pure functions.
@Suite struct RequestPathTests {
    func path(_ target: String) -> String? { try? RequestPath.normalized(target).get() }

    @Test func dotSegmentsAreRemovedWithinThePrefix() {
        #expect(path("/a/./b") == "/a/b")
        #expect(path("/a/b/../c?x=/../y") == "/a/c?x=/../y")
        #expect(path("/a/%2e%2E/data") == "/data")
        #expect(path("/a/.") == "/a/")
        #expect(path("/group%2Fproject/files") == "/group%2Fproject/files")
        #expect(path("/a/..;/b") == "/b")
        #expect(path("/a;v=1/b;x") == "/a;v=1/b;x")
        #expect(path("/100%25/x") == "/100%25/x")
    }

    @Test func aPathThatLeavesThePrefixIsRefused() {
        for target in ["/../secret", "/a/../../secret", "/%2e%2e/secret", "/.%2E/x", "/a/..%2f..%2fsecret", "/a/..%5csecret", "/a/..\\secret", "/bad%zz", "secret", "http://evil.example/",
            // Path parameters (Tomcat, Jetty and Spring take `..;` for `..`), double encoding, NUL.
            "/..;/secret", "/a/..;/..;/secret", "/..;x=1/secret", "/a/..%3b/..%3B/secret", "/%252e%252e/secret",
            "/..%252fsecret", "/a/..%255csecret", "/%252E%252E/secret", "/..%00/secret", "/a%00"] {
            #expect(path(target) == nil, "\(target)")
        }
    }
}

@Suite struct WebPagesTests {
    let rules = WebPages(listeningOn: try! SocketAddress(ipAddress: "127.0.0.1", port: 8080))

    func head(_ headers: [(String, String)]) -> RequestHead {
        try! RequestHead(ByteBuffer(string: "POST / HTTP/1.1\r\n" + headers.map { "\($0.0): \($0.1)\r\n" }.joined() + "\r\n"))
    }

    @Test func aProgramNamingTheAddressIsServed() {
        #expect(rules.refusal(for: head([("Host", "127.0.0.1:8080")])) == nil)
        #expect(rules.refusal(for: head([("Host", "LOCALHOST:8080")])) == nil)
        #expect(rules.refusal(for: head([("Host", "127.0.0.1:8080"), ("Origin", "http://127.0.0.1:8080"), ("Sec-Fetch-Site", "same-origin")])) == nil)
    }

    @Test func aRebindingPageIsMisdirected() {
        for host in ["rebind.attacker.example", "127.0.0.1", "127.0.0.1:8081", "localhost"] {
            #expect(rules.refusal(for: head([("Host", host)]))?.status == .misdirectedRequest, "\(host)")
        }
        #expect(rules.refusal(for: head([("Host", "127.0.0.1:8080"), ("Host", "evil")]))?.status == .misdirectedRequest)
        #expect(rules.refusal(for: head([]))?.status == .misdirectedRequest)
    }

    @Test func anotherOriginIsForbidden() {
        for origin in ["https://evil.example", "http://127.0.0.1:8081", "null", "http://127.0.0.1:8080.evil.example"] {
            #expect(rules.refusal(for: head([("Host", "127.0.0.1:8080"), ("Origin", origin)]))?.status == .forbidden, "\(origin)")
        }
        for site in ["cross-site", "same-site"] {
            #expect(rules.refusal(for: head([("Host", "127.0.0.1:8080"), ("Sec-Fetch-Site", site)]))?.status == .forbidden)
        }
    }

    @Test func onAUnixSocketAnyOriginIsForbidden() {
        let unix = WebPages(listeningOn: nil)
        #expect(unix.refusal(for: head([("Host", "anything")])) == nil)
        #expect(unix.refusal(for: head([("Origin", "http://localhost")]))?.status == .forbidden)
    }
}
