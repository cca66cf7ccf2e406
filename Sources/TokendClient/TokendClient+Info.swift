import TokendInterface
import Varlink

extension TokendClient {
    /// The version the running tokend reports (org.varlink.service.GetInfo).
    public func daemonVersion() async throws(TokendClientError) -> String {
        let answer: JSONObject
        do {
            answer = try await connection.call("org.varlink.service.GetInfo", [:])
        } catch let error as VarlinkError {
            throw TokendClientError(error)
        } catch {
            throw .unreachable(socket: socket, reason: "the connection failed")
        }
        return answer["version"]?.stringValue ?? "unknown"
    }
}

extension TokendClient {
    /// What `user` (nil: this caller) may do with each session, or with `session` (GetAccess).
    public func access(session: String? = nil, user: String? = nil) async throws(TokendClientError)
        -> BrokerInterface.GetAccess.Out
    {
        try await call("GetAccess", BrokerInterface.GetAccess.In(session: session, user: user), BrokerInterface.GetAccess.Out.self)
    }
}
