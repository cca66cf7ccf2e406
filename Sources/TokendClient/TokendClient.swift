import Foundation
import NIOCore
import TokendInterface
import Varlink
import VarlinkNIO

/// A connection to tokend. Safe to share between tasks; calls are pipelined.
public final class TokendClient: Sendable {
    public static let defaultSocket = "/run/tokend/io.tokend.Broker"

    /// `explicit`, else $TOKEND_SOCKET, else the system socket.
    public static func socketPath(_ explicit: String? = nil) -> String {
        explicit ?? ProcessInfo.processInfo.environment["TOKEND_SOCKET"] ?? defaultSocket
    }

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

    public func token(session: String? = nil, minValidSeconds: Int? = nil) async throws(TokendClientError) -> AccessToken {
        let reply = try await call("GetToken", ["session": .optional(session), "minValidSeconds": .optional(minValidSeconds)])
        return try AccessToken(reply["token"])
    }

    public func refresh(session: String? = nil, staleGeneration: Int? = nil) async throws(TokendClientError) -> AccessToken {
        let reply = try await call("Refresh", ["session": .optional(session), "staleGeneration": .optional(staleGeneration)])
        return try AccessToken(reply["token"])
    }

    public func status(session: String? = nil) async throws(TokendClientError) -> SessionStatus {
        try SessionStatus(try await call("GetStatus", ["session": .optional(session)])["status"])
    }

    public func sessions() async throws(TokendClientError) -> [SessionStatus] {
        let reply = try await call("ListSessions", [:])
        guard let list = reply["sessions"]?.arrayValue else { throw .malformedReply("session list") }
        var statuses: [SessionStatus] = []
        for element in list { statuses.append(try SessionStatus(element)) }
        return statuses
    }

    public func login(session: String? = nil, refreshToken: String) async throws(TokendClientError) -> SessionStatus {
        let reply = try await call("Login", ["session": .optional(session), "refreshToken": .string(refreshToken)])
        return try SessionStatus(reply["status"])
    }

    /// Begins a device login (`redirectURI` nil) or a browser login (a loopback
    /// redirect URI where the caller listens for the browser).
    public func beginLogin(
        session: String? = nil, flow: String, redirectURI: String? = nil
    ) async throws(TokendClientError) -> PendingLogin {
        let reply = try await call(
            "BeginLogin", ["session": .optional(session), "flow": .string(flow), "redirectUri": .optional(redirectURI)])
        return try PendingLogin(reply["login"])
    }

    /// Waits for the user's approval (device) or hands over the browser's
    /// callback URL (browser); returns the logged-in session's status.
    public func finishLogin(id: String, callbackURL: String? = nil) async throws(TokendClientError) -> SessionStatus {
        let reply = try await call("FinishLogin", ["id": .string(id), "callbackUrl": .optional(callbackURL)])
        return try SessionStatus(reply["status"])
    }

    public func cancelLogin(id: String) async throws(TokendClientError) {
        _ = try await call("CancelLogin", ["id": .string(id)])
    }

    public func logout(session: String? = nil, revoke: Bool = true) async throws(TokendClientError) {
        _ = try await call("Logout", ["session": .optional(session), "revoke": .bool(revoke)])
    }

    /// The cookies a browser would send to `url`, its Cookie header and the jar's version.
    public func cookies(session: String? = nil, url: String) async throws(TokendClientError) -> CookieSet {
        try CookieSet(try await call("GetCookies", ["session": .optional(session), "url": .string(url)]))
    }

    /// Reports Set-Cookie headers received from `url`; returns the jar's version,
    /// how many were stored and why the others were refused.
    public func importCookies(
        session: String? = nil, url: String, setCookie: [String]
    ) async throws(TokendClientError) -> (version: Int, applied: Int, rejected: [String]) {
        let reply = try await call(
            "ImportCookies",
            ["session": .optional(session), "url": .string(url), "setCookie": .array(setCookie.map(JSONValue.string))])
        guard let version = reply["version"]?.intValue, let applied = reply["applied"]?.intValue,
            let rejected = reply["rejected"]?.arrayValue
        else { throw .malformedReply("ImportCookies reply") }
        return (version, applied, rejected.compactMap(\.stringValue))
    }

    /// Deletes the cookies a request to `url` would carry (those named `name`
    /// when given; the whole jar when both are nil). Returns the jar's version
    /// and how many were deleted.
    public func deleteCookies(
        session: String? = nil, url: String? = nil, name: String? = nil
    ) async throws(TokendClientError) -> (version: Int, deleted: Int) {
        let reply = try await call(
            "DeleteCookies", ["session": .optional(session), "url": .optional(url), "name": .optional(name)])
        guard let version = reply["version"]?.intValue, let deleted = reply["deleted"]?.intValue else {
            throw .malformedReply("DeleteCookies reply")
        }
        return (version, deleted)
    }

    /// The jar as a Netscape cookies.txt (curl -b, wget --load-cookies).
    public func exportCookies(session: String? = nil) async throws(TokendClientError) -> String {
        let reply = try await call("ExportCookies", ["session": .optional(session), "format": "netscape"])
        guard let text = reply["text"]?.stringValue else { throw .malformedReply("ExportCookies reply") }
        return text
    }

    /// The session's events, beginning with a "status" event; with
    /// `sinceVersion`, the cookie changes missed since then come next.
    ///
    /// The subscription has a connection of its own (a `more` call occupies
    /// its connection), so this client's other calls never wait on it. The
    /// connection closes when the stream ends or its consumer stops.
    public func events(session: String? = nil, sinceVersion: Int? = nil) -> AsyncThrowingStream<SessionEvent, Error> {
        let socket = self.socket
        let parameters: JSONObject = ["session": .optional(session), "sinceVersion": .optional(sinceVersion)]
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
                    for try await reply in replies { continuation.yield(SessionEvent(reply)) }
                    continuation.finish()
                } catch let error as VarlinkError {
                    continuation.finish(throwing: TokendClientError(error))
                } catch {
                    continuation.finish(throwing: TokendClientError.unreachable(socket: socket, reason: "\(error)"))
                }
                await own.close()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    func call(_ method: String, _ parameters: JSONObject) async throws(TokendClientError) -> JSONObject {
        do {
            return try await connection.call(BrokerInterface.method(method), parameters.filter { !$0.value.isNull })
        } catch let error as VarlinkError {
            throw TokendClientError(error)
        } catch {
            throw .unreachable(socket: socket, reason: "the connection failed (\(error))")
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
    return text
}
