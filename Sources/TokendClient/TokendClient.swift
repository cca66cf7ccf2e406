#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc  // EAGAIN
#endif
import NIOCore
import TokendInterface
import Varlink
import VarlinkNIO

/// A connection to tokend. Safe to share between tasks; calls are pipelined.
public final class TokendClient: Sendable {
    typealias I = BrokerInterface
    public static let defaultSocket = BrokerInterface.defaultSocket

    /// `explicit`, else $TOKEND_SOCKET, else the system socket.
    public static func socketPath(_ explicit: String? = nil) -> String { BrokerInterface.socketPath(explicit) }

    public let socket: String
    let connection: VarlinkClient

    init(socket: String, connection: VarlinkClient) {
        self.socket = socket
        self.connection = connection
    }

    /// Connects; a full listen queue (EAGAIN, tokend busy accepting a burst)
    /// is retried for about a second before it counts as unreachable.
    public static func connect(socket: String? = nil) async throws(TokendClientError) -> TokendClient {
        let path = socketPath(socket)
        var delay = 2
        while true {
            do {
                return TokendClient(socket: path, connection: try await VarlinkClient.connect(path: path))
            } catch let error as IOError where error.errnoCode == EAGAIN && delay <= 512 {
                try? await Task.sleep(for: .milliseconds(delay))
                delay *= 2
            } catch {
                throw .unreachable(socket: path, reason: describeConnectError(error))
            }
        }
    }

    public func close() async { await connection.close() }

    /// A token for the session, or for one of its resources (RFC 8707) and
    /// a narrower scope: each (resource, scope) has its own token and generation.
    /// `page`: the web origin of the page the token is for (web views and the
    /// browser bridge): tokend then hands out only a token whose audience is within web-resources.
    public func token(
        session: String? = nil, minValidSeconds: Int? = nil, resource: String? = nil, scope: String? = nil,
        page: String? = nil
    ) async throws(TokendClientError) -> AccessToken {
        try await call(
            "GetToken",
            I.GetToken.In(session: session, minValidSeconds: minValidSeconds, resource: resource, scope: scope, page: page),
            I.GetToken.Out.self
        ).token
    }

    public func refresh(
        session: String? = nil, staleGeneration: Int? = nil, resource: String? = nil, scope: String? = nil,
        page: String? = nil
    ) async throws(TokendClientError) -> AccessToken {
        try await call(
            "Refresh",
            I.Refresh.In(session: session, staleGeneration: staleGeneration, resource: resource, scope: scope, page: page),
            I.Refresh.Out.self
        ).token
    }

    /// Forgets what tokend learnt of the session's provider (admin).
    public func resetStrategy(session: String? = nil) async throws(TokendClientError) -> SessionStatus {
        try await call("ResetStrategy", I.ResetStrategy.In(session: session), I.ResetStrategy.Out.self).status
    }

    public func status(session: String? = nil) async throws(TokendClientError) -> SessionStatus {
        try await call("GetStatus", I.GetStatus.In(session: session), I.GetStatus.Out.self).status
    }

    public func sessions() async throws(TokendClientError) -> [SessionStatus] {
        try await call("ListSessions", I.ListSessions.In(), I.ListSessions.Out.self).sessions
    }

    /// tokend's metrics, OpenMetrics text.
    public func metrics() async throws(TokendClientError) -> String {
        try await call("GetMetrics", I.GetMetrics.In(), I.GetMetrics.Out.self).text
    }

    public func login(session: String? = nil, refreshToken: String) async throws(TokendClientError) -> SessionStatus {
        try await call("Login", I.Login.In(session: session, refreshToken: refreshToken), I.Login.Out.self).status
    }

    /// Begins a device login (`redirectURI` nil) or a browser login (a loopback
    /// redirect URI where the caller listens for the browser).
    public func beginLogin(
        session: String? = nil, flow: String, redirectURI: String? = nil
    ) async throws(TokendClientError) -> PendingLogin {
        try await call(
            "BeginLogin", I.BeginLogin.In(session: session, flow: flow, redirectUri: redirectURI), I.BeginLogin.Out.self
        ).login
    }

    /// Waits for the user's approval (device) or hands over the browser's
    /// callback URL (browser); returns the logged-in session's status.
    public func finishLogin(id: String, callbackURL: String? = nil) async throws(TokendClientError) -> SessionStatus {
        try await call("FinishLogin", I.FinishLogin.In(id: id, callbackUrl: callbackURL), I.FinishLogin.Out.self).status
    }

    public func cancelLogin(id: String) async throws(TokendClientError) {
        _ = try await call("CancelLogin", I.CancelLogin.In(id: id), I.CancelLogin.Out.self)
    }

    public func logout(session: String? = nil, revoke: Bool = true) async throws(TokendClientError) {
        _ = try await call("Logout", I.Logout.In(session: session, revoke: revoke), I.Logout.Out.self)
    }

    /// The cookies a browser would send to `url`, its Cookie header and the jar's version.
    public func cookies(session: String? = nil, url: String) async throws(TokendClientError) -> CookieSet {
        try await call("GetCookies", I.GetCookies.In(session: session, url: url), I.GetCookies.Out.self)
    }

    /// Reports Set-Cookie headers received from `url`; returns the jar's version,
    /// how many were stored and why the others were refused.
    public func importCookies(
        session: String? = nil, url: String, setCookie: [String]
    ) async throws(TokendClientError) -> (version: Int, applied: Int, rejected: [String]) {
        let reply = try await call(
            "ImportCookies", I.ImportCookies.In(session: session, url: url, setCookie: setCookie), I.ImportCookies.Out.self)
        return (reply.version, reply.applied, reply.rejected)
    }

    /// Deletes the cookies a request to `url` would carry (those named `name`
    /// when given; the whole jar when both are nil). Returns the jar's version
    /// and how many were deleted.
    public func deleteCookies(
        session: String? = nil, url: String? = nil, name: String? = nil
    ) async throws(TokendClientError) -> (version: Int, deleted: Int) {
        let reply = try await call(
            "DeleteCookies", I.DeleteCookies.In(session: session, url: url, name: name), I.DeleteCookies.Out.self)
        return (reply.version, reply.deleted)
    }

    /// The jar as a Netscape cookies.txt (curl -b, wget --load-cookies).
    public func exportCookies(session: String? = nil) async throws(TokendClientError) -> String {
        try await call("ExportCookies", I.ExportCookies.In(session: session, format: "netscape"), I.ExportCookies.Out.self)
            .text
    }

    /// The session's events, beginning with a "status" event; with
    /// `sinceVersion`, the cookie changes missed since then come next.
    ///
    /// The subscription has a connection of its own (a `more` call occupies
    /// its connection), so this client's other calls never wait on it. The
    /// connection closes when the stream ends or its consumer stops.
    /// With `resource` or `scope`, the status event describes that key's token;
    /// `refreshed` events name the key they are for (see SessionEvent).
    public func events(
        session: String? = nil, sinceVersion: Int? = nil, resource: String? = nil, scope: String? = nil
    ) -> AsyncThrowingStream<SessionEvent, Error> {
        let socket = self.socket
        let parameters = (try? I.Subscribe.In(
            session: session, sinceVersion: sinceVersion, resource: resource, scope: scope).parameters()) ?? [:]
        return AsyncThrowingStream { continuation in
            let task = Task {
                let own: TokendClient
                do {
                    own = try await TokendClient.connect(socket: socket)
                } catch {
                    return continuation.finish(throwing: error)
                }
                do {
                    let replies = own.connection.stream(
                        BrokerInterface.method("Subscribe"), parameters.filter { !$0.value.isNull })
                    for try await reply in replies {
                        guard let event = try? JSONValue.object(reply).decode(SessionEvent.self) else {
                            throw TokendClientError.malformedReply("event")
                        }
                        continuation.yield(event)
                    }
                    continuation.finish()
                } catch let error as VarlinkError {
                    continuation.finish(throwing: TokendClientError(error))
                } catch let error as TokendClientError {
                    continuation.finish(throwing: error)
                } catch {
                    continuation.finish(throwing: TokendClientError.unreachable(socket: socket, reason: "\(error)"))
                }
                await own.close()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// One call: its parameters and reply as the interface declares them.
    func call<Reply: Decodable>(
        _ method: String, _ parameters: some Encodable, _ reply: Reply.Type
    ) async throws(TokendClientError) -> Reply {
        let answer: JSONObject
        do {
            let sent = try parameters.parameters().filter { !$0.value.isNull }
            answer = try await connection.call(BrokerInterface.method(method), sent)
        } catch let error as VarlinkError {
            throw TokendClientError(error)
        } catch {
            throw .unreachable(socket: socket, reason: "the connection failed (\(describeConnectError(error)))")
        }
        do {
            return try JSONValue.object(answer).decode(Reply.self)
        } catch {
            throw .malformedReply("\(method) reply")
        }
    }
}

func describeConnectError(_ error: Error) -> String {
    let text = "\(error)"
    if text.contains("No such file") || text.contains("ENOENT") { return "no socket there (is tokend running?)" }
    if text.contains("Connection refused") || text.contains("ECONNREFUSED") { return "connection refused (tokend is not running)" }
    if text.contains("Permission denied") || text.contains("EACCES") {
        return "permission denied (is this user in the socket's group?)"
    }
    // A library's own wording (NIO's "connection reset (error set): ...") means nothing to a user.
    if text.contains("reset") || text.contains("EPIPE") || text.contains("Broken pipe") { return "tokend closed the connection" }
    return "the connection failed"
}
