import NIOSSL
import Testing

#if canImport(Glibc)
import Glibc
#endif

@testable import ProxyProgram

/// An upstream failure's status comes from its kind, never from words in its message.
@Suite struct UpstreamErrorTests {
    @Test func aNameWithTLSInItThatHasNoAddressIsNotATLSFailure() {
        let error = UpstreamError(UpstreamError.unresolved("tls.certificate.example"))
        #expect(error.kind == .unresolved)
        let answer = error.answer(timeout: .seconds(5))
        #expect(answer.status == .badGateway && !answer.message.contains("TLS"), "\(answer.message)")
    }

    @Test func eachKindHasItsStatus() {
        let cases: [(any Error, UpstreamError.Kind, Int)] = [
            (SocketError("connect", ECONNREFUSED), .refused, 502),
            (SocketError("connect", ETIMEDOUT), .connectTimedOut, 504),
            (SocketError("read", ETIMEDOUT), .socket, 502),  // a read's timeout is the kernel's, not --timeout
            (SocketError("read", ECONNRESET), .socket, 502),
            (UpstreamError.connectTimedOut, .connectTimedOut, 504),
            (UpstreamError.sendTimedOut, .sendTimedOut, 504),
            (UpstreamError.answerTimedOut, .answerTimedOut, 504),
            (UpstreamError.closed, .closed, 502),
            (NIOSSLError.uncleanShutdown, .tls, 502),
            (WireError(status: .badGateway, message: "the upstream's answer: its status line is malformed"), .malformed, 502),
        ]
        for (raised, kind, status) in cases {
            let error = UpstreamError(raised)
            #expect(error.kind == kind, "\(raised)")
            #expect(error.answer(timeout: .seconds(5)).status.code == status, "\(raised)")
        }
    }
}
