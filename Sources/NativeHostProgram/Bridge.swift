import NativeMessaging
import Synchronization
import TokendInterface
import Varlink
import VarlinkNIO

#if canImport(Glibc)
import Glibc
#endif

/// Relays the extension's requests to tokend over Varlink, as the user the
/// browser runs as (so tokend's access policy applies unchanged), and
/// tokend's answers and events back.
///
/// Extension → host: `{id, method, parameters, origin?}`; host → extension:
/// `{id, parameters}` or `{id, error, parameters}`; Subscribe answers with
/// many `{id, parameters, continues: true}` and ends with `continues: false`
/// or an error when tokend goes away. What pages may not do (another origin,
/// a resource outside web-resources) is refused here, before tokend is asked:
/// org.varlink.service.PermissionDenied (see Bridge+Access.swift). Their calls
/// go marked with the page's origin (`page`), and tokend holds them to what
/// pages may have: tokens for web-resources, proofs for URLs within them.
final class Bridge: Sendable {
    /// What the extension may ask for; everything else is refused here.
    static let methods: Set<String> = [
        "GetToken", "Refresh", "GetProof", "GetStatus", "ListSessions", "GetCookies", "ImportCookies", "Subscribe",
    ]
    /// Calls a page makes: they carry the page's origin, which must be one of the session's web origins.
    static let pageMethods: Set<String> = ["GetToken", "Refresh", "GetProof"]
    /// Calls about cookies: their URL's host must be a host of the session's web origins.
    static let cookieMethods: Set<String> = ["GetCookies", "ImportCookies"]

    let socket: String
    let output: Output
    /// The connection for single-reply calls (opened on demand, reopened after a failure).
    let calls = Mutex<VarlinkClient?>(nil)
    /// Each session's web origins and web resources, from tokend, refreshed when a request is not allowed.
    let web = Mutex<[String: WebAccess]>([:])

    init(socket: String, output: Output) {
        self.socket = socket
        self.output = output
    }

    func handle(_ message: JSONObject) async {
        let id = message["id"] ?? .null
        guard let method = message["method"]?.stringValue, Self.methods.contains(method) else {
            output.send(["id": id, "error": "io.tokend.Bridge.MethodNotAllowed", "parameters": [:]])
            return
        }
        var parameters = message["parameters"]?.objectValue ?? [:]
        parameters = parameters.filter { !$0.value.isNull }
        let session = parameters["session"]?.stringValue ?? "default"
        do {
            try await checkAccess(
                method: method, session: session, parameters: parameters, origin: message["origin"]?.stringValue)
        } catch {
            let details = (error as? Refusal)?.parameters ?? [:]
            output.send(["id": id, "error": .string(VarlinkError.permissionDenied.name), "parameters": .object(details)])
            return
        }
        // tokend knows the token's audience and enforces web-resources against it: the call says it is a page's.
        if Self.pageMethods.contains(method), let origin = message["origin"]?.stringValue {
            parameters["page"] = .string(origin)
        }
        if method == "Subscribe" {
            await subscribe(id: id, parameters: parameters)
            return
        }
        do {
            let reply = try await call(BrokerInterface.method(method), parameters)
            output.send(["id": id, "parameters": .object(reply)])
        } catch let error as VarlinkError {
            output.send(["id": id, "error": .string(error.name), "parameters": .object(error.parameters)])
        } catch {
            output.send(["id": id, "error": "io.tokend.Bridge.Unreachable", "parameters": ["reason": .string("\(error)")]])
        }
    }

    /// One call on the shared connection; a broken connection is replaced once.
    func call(_ method: String, _ parameters: JSONObject) async throws -> JSONObject {
        for attempt in 0..<2 {
            let client: VarlinkClient
            if let open = calls.withLock({ $0 }) {
                client = open
            } else {
                client = try await VarlinkClient.connect(path: socket)
                calls.withLock { $0 = client }
            }
            do {
                return try await client.call(method, parameters)
            } catch let error as VarlinkError {
                throw error
            } catch where attempt == 0 {
                calls.withLock { if $0 === client { $0 = nil } }
            }
        }
        throw BridgeError("tokend closed the connection twice")
    }

    /// Subscribe on a connection of its own (a stream holds its connection).
    func subscribe(id: JSONValue, parameters: JSONObject) async {
        do {
            let client = try await VarlinkClient.connect(path: socket)
            defer { Task { await client.close() } }
            for try await reply in client.stream(BrokerInterface.method("Subscribe"), parameters) {
                output.send(["id": id, "parameters": .object(reply), "continues": true])
            }
            output.send(["id": id, "parameters": [:], "continues": false])
        } catch let error as VarlinkError {
            output.send(["id": id, "error": .string(error.name), "parameters": .object(error.parameters)])
        } catch {
            output.send(["id": id, "error": "io.tokend.Bridge.Disconnected", "parameters": ["reason": .string("\(error)")]])
        }
    }
}

/// Messages to the browser on standard output, one writer at a time, split
/// to the browser's 1 MiB limit.
final class Output: Sendable {
    let lock = Mutex(())

    func send(_ message: JSONObject) {
        let pieces = NativeMessaging.split(message)
        lock.withLock { _ in
            for piece in pieces { writeAll(NativeMessaging.frame(piece)) }
        }
    }

    private func writeAll(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            if written <= 0 {
                if errno == EINTR { continue }
                exit(0)  // the browser went away
            }
            offset += written
        }
    }
}

struct BridgeError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
