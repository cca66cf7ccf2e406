import NIOCore
import NIOSSL

extension PostgresConnection {
    /// Speaks PostgreSQL on `channel`, a connected socket: TLS as `configuration.tls` says,
    /// startup, authentication, and the wait for the server to be ready. On failure the channel is closed.
    public static func connect(on channel: any Channel, configuration: Configuration) async throws
        -> PostgresConnection
    {
        let inbox = Inbox()
        let listeners = Listeners()
        let parameters = ServerParameters()
        let tlsAsked: Bool
        if case .disable = configuration.tls { tlsAsked = false } else { tlsAsked = true }
        let limit = configuration.messageLimit
        let tls: (context: NIOSSLContext, serverName: String?)? =
            switch configuration.tls {
            case .disable: nil
            case .prefer(let context), .require(let context): (context, configuration.serverName)
            }
        try await channel.eventLoop.submit {
            try channel.pipeline.syncOperations.addHandlers(
                ByteToMessageHandler(BackendDecoder(awaitingSSLResponse: tlsAsked, limit: limit)),
                PostgresHandler(inbox: inbox, listeners: listeners, parameters: parameters, tls: tls))
        }.get()
        let connection = PostgresConnection(channel: channel, inbox: inbox, listeners: listeners, parameters: parameters)
        // A server that accepts the socket and says nothing does not hold the caller forever.
        let timer = channel.eventLoop.scheduleTask(in: .nanoseconds(configuration.startupTimeout.nanosecondCount)) {
            inbox.fail(PostgresError(.startupTimeout, "no answer to startup within \(configuration.startupTimeout)"))
            channel.close(promise: nil)
        }
        defer { timer.cancel() }
        do {
            try await connection.start(configuration)
            return connection
        } catch {
            try? await channel.close()
            throw error
        }
    }

    func start(_ configuration: Configuration) async throws {
        if case .prefer = configuration.tls {
            try await negotiateTLS(required: false)
        } else if case .require = configuration.tls {
            try await negotiateTLS(required: true)
        }
        var parameters = [("user", configuration.user), ("database", configuration.database)]
        if let name = configuration.applicationName { parameters.append(("application_name", name)) }
        var buffer = channel.allocator.buffer(capacity: 128)
        try Frontend.startup(parameters, into: &buffer)
        try await send(buffer)
        try await authenticate(user: configuration.user, password: configuration.password)
        while true {
            switch try await inbox.receive() {
            case .backendKeyData: continue  // for CancelRequest, which this client does not send
            case .readyForQuery: return
            case .error(let fields): throw PostgresError.server(fields)
            case let other: throw fail(PostgresError(.protocolViolation, "unexpected \(other.name) at startup"))
            }
        }
    }

    /// SSLRequest; TLS is over the socket if the server agrees (PostgresHandler puts it there, in
    /// the read that brought the answer).
    func negotiateTLS(required: Bool) async throws {
        var buffer = channel.allocator.buffer(capacity: 8)
        Frontend.sslRequest(into: &buffer)
        try await send(buffer)
        guard case .sslResponse(let accepted) = try await inbox.receive() else {
            throw fail(PostgresError(.protocolViolation, "no answer to SSLRequest"))
        }
        guard accepted else {
            if required { throw fail(PostgresError(.sslUnsupported, "the server does not offer TLS")) }
            return
        }
    }

    /// Answers the server's authentication requests until AuthenticationOk. Trust, cleartext, MD5 and
    /// SCRAM-SHA-256; anything else is refused by name.
    func authenticate(user: String, password: String?) async throws {
        var scram: SCRAM?
        while true {
            let message = try await inbox.receive()
            guard case .authentication(let request) = message else {
                if case .error(let fields) = message { throw PostgresError.server(fields) }
                throw fail(PostgresError(.protocolViolation, "unexpected \(message.name) during authentication"))
            }
            var buffer = channel.allocator.buffer(capacity: 128)
            switch request {
            case .ok:
                guard scram == nil else {
                    throw fail(PostgresError(.authentication, "SCRAM: the server skipped its proof"))
                }
                return
            case .cleartextPassword:
                try Frontend.password(try needed(password, "a password"), into: &buffer)
            case .md5Password(let salt):
                let answer = MD5Password.answer(user: user, password: try needed(password, "an MD5 password"), salt: salt)
                try Frontend.password(answer, into: &buffer)
            case .sasl(let mechanisms):
                guard mechanisms.contains("SCRAM-SHA-256") else {
                    throw fail(PostgresError(.authentication, "the server offers SASL \(mechanisms.joined(separator: ", ")); this client does SCRAM-SHA-256 only"))
                }
                let started = SCRAM(password: try needed(password, "a SCRAM-SHA-256 password"))
                scram = started
                try Frontend.saslInitial(mechanism: "SCRAM-SHA-256", Array(started.clientFirst.utf8), into: &buffer)
            case .saslContinue(let data):
                guard var exchange = scram else { throw fail(PostgresError(.protocolViolation, "SASLContinue before SASL")) }
                let final = try exchange.clientFinal(serverFirst: String(decoding: data, as: UTF8.self))
                scram = exchange
                try Frontend.saslResponse(Array(final.utf8), into: &buffer)
            case .saslFinal(let data):
                guard let exchange = scram else { throw fail(PostgresError(.protocolViolation, "SASLFinal before SASL")) }
                do {
                    try exchange.verify(serverFinal: String(decoding: data, as: UTF8.self))
                } catch {
                    throw fail(error)
                }
                scram = nil
                continue
            case .unsupported(let code):
                let names: [Int32: String] = [2: "Kerberos V5", 6: "SCM credentials", 7: "GSSAPI", 8: "GSSAPI", 9: "SSPI"]
                throw fail(PostgresError(.authentication, "the server asks for \(names[code] ?? "authentication method \(code)"), "
                    + "which this client does not do (trust, password, md5 and scram-sha-256 it does)"))
            }
            try await send(buffer)
        }
    }

    func needed(_ password: String?, _ what: String) throws(PostgresError) -> String {
        guard let password else {
            throw fail(PostgresError(.authentication, "the server asks for \(what), and none is configured"))
        }
        return password
    }
}

extension Duration {
    var nanosecondCount: Int64 {
        let (seconds, attoseconds) = components
        return seconds.multipliedReportingOverflow(by: 1_000_000_000).partialValue + attoseconds / 1_000_000_000
    }
}
