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
