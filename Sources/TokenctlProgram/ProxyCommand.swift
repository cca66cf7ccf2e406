import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

#if canImport(Glibc)
import Glibc
#endif

/// `tokenctl proxy NAME`: tokend-proxy for a session's first resource (an MCP
/// server), on a loopback port it picks and prints before the proxy starts.
struct ProxyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proxy",
        abstract: "Run tokend-proxy for a session's first resource, and print the URL agents use.",
        discussion: """
            tokenctl proxy mcp   for a session whose first resource is https://mcp.example.com/mcp listens on \
            a free port of 127.0.0.1 and prints http://127.0.0.1:PORT/mcp: an agent (an MCP client) uses that \
            URL with no OAuth of its own, and the proxy adds the session's token to each request. It runs \
            tokend-proxy (from tokenctl's directory, else PATH) in its place, until Ctrl-C.
            """)
    @OptionGroup var connection: Connection
    @Argument(help: "The session: your NAME, or another the policy lets you read.")
    var name: String
    @Option(help: ArgumentHelp(
        "Where to listen (default: a free port of 127.0.0.1).", valueName: "tcp:127.0.0.1:PORT|unix:PATH"))
    var listen: String?
    @Argument(parsing: .postTerminator, help: ArgumentHelp(
        "After --, more options of tokend-proxy(1), e.g. -- --stream-idle-timeout 600.", valueName: "proxy-options"))
    var proxyOptions: [String] = []

    /// The options tokenctl proxy sets itself: given again after --, the printed URL would be wrong.
    static let ownOptions = ["--session", "--resource", "--upstream", "--listen", "--socket"]

    func validate() throws {
        if let listen { _ = try ProxyTarget.listenAddress(listen) }
        if let own = proxyOptions.first(where: { option in Self.ownOptions.contains { option == $0 || option.hasPrefix($0 + "=") } }) {
            throw ValidationError("\(own) after --: tokenctl proxy sets it from the session (and --listen before --)")
        }
    }

    func run() async throws {
        // Bound first: its descriptor is then a low one (FreePort.exec).
        let free = listen == nil ? try FreePort() : nil
        let common = connection.common
        let client = try await common.connect()
        let name = name
        let status = try await common.run { try await client.status(session: name) }
        guard let resource = status.resources.first, let target = ProxyTarget(resource: resource) else {
            StandardStream.error.write("tokenctl: session \(status.session) has no resource to proxy to\n"
                + "  tokenctl proxy serves a session's first resource; for another server run "
                + "tokend-proxy --session \(name) --upstream URL --listen tcp:127.0.0.1:PORT\n")
            throw ExitCode(Exit.failure)
        }
        guard let program = ProxyTarget.program() else {
            StandardStream.error.write(
                "tokenctl: tokend-proxy is neither beside tokenctl nor on PATH\n  install it with tokend (it is part of the package)\n")
            throw ExitCode(Exit.failure)
        }
        var arguments = [
            program, "--session", name, "--resource", resource, "--upstream", target.origin,
            "--socket", TokendClient.socketPath(connection.socket),
        ] + proxyOptions
        let listening = try free?.address ?? ProxyTarget.listenAddress(listen ?? "")
        if let listen { arguments += ["--listen", listen] }
        print("session \(status.session): an agent uses \(target.agentURL(listening))")
        print("(tokend-proxy adds the session's token to each request to \(target.origin); Ctrl-C stops it)")
        fflush(nil)
        let (path, argv) = free?.exec(arguments) ?? (program, arguments)
        ProgramSignals.resetForExec()
        execv(path, argv.map { strdup($0) } + [nil])
        StandardStream.error.write("tokenctl: cannot run \(program): \(String(cString: strerror(errno)))\n")
        throw ExitCode(Exit.failure)
    }
}

/// A listening socket on a free port of 127.0.0.1, handed to tokend-proxy the way systemd would
/// (fd 3, LISTEN_PID, LISTEN_FDS): the port is known before the proxy starts, and nobody can take it
/// in between.
struct FreePort {
    let fd: CInt
    let address: ProxyTarget.Listen

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0, LoopbackAddress.ipv4(port: 0).bind(fd) == 0, listen(fd, 1024) == 0,
            let bound = LoopbackAddress.of(fd, getsockname)
        else {
            StandardStream.error.write(
                "tokenctl: cannot listen on 127.0.0.1: \(String(cString: strerror(errno)))\n  name a port or a path with --listen\n")
            throw ExitCode(Exit.failure)
        }
        self.fd = fd
        address = .tcp(host: bound.host, port: Int(bound.port))
    }

    /// What to exec for `arguments` (tokend-proxy's) with this socket as fd 3 and the environment that
    /// names it. fd 3 is held here by the runtime (libdispatch's epoll), so the socket is moved there
    /// by /bin/sh, which the exec leaves with no other thread and 3 closed (close-on-exec), and which
    /// then execs tokend-proxy in the same process: LISTEN_PID stays true.
    func exec(_ arguments: [String]) -> (String, [String]) {
        setenv("LISTEN_PID", String(getpid()), 1)
        setenv("LISTEN_FDS", "1", 1)
        unsetenv("LISTEN_FDNAMES")
        if fd > 9 { dup2(fd, 3) }  // rare (many inherited descriptors): moved here, just before the exec
        return Self.command(fd: fd, arguments)
    }

    /// The program and arguments that run `arguments` with descriptor `fd` as 3.
    static func command(fd: CInt, _ arguments: [String]) -> (String, [String]) {
        // The shell's redirections name descriptors 0 to 9.
        guard fd != 3, fd <= 9 else { return (arguments[0], arguments) }
        return ("/bin/sh", ["sh", "-c", "exec 3<&\(fd) \(fd)<&- && exec \"$@\"", "tokend-proxy"] + arguments)
    }
}

/// Where `tokenctl proxy` sends requests and what it tells agents: the origin of the session's
/// resource is the upstream; the agent asks the proxy for the resource's path.
struct ProxyTarget: Equatable {
    enum Listen: Equatable {
        /// `host` as written in a URL: "127.0.0.1", "[::1]".
        case tcp(host: String, port: Int)
        case unix(path: String)
    }

    /// scheme://host[:port] of the resource.
    let origin: String
    /// The resource's path (and query), "/" when it has none.
    let path: String

    init?(resource: String) {
        guard var url = URLComponents(string: resource), let scheme = url.scheme?.lowercased(),
            ["https", "http"].contains(scheme), url.host?.isEmpty == false
        else { return nil }
        let path = url.percentEncodedPath.isEmpty ? "/" : url.percentEncodedPath
        self.path = path + (url.percentEncodedQuery.map { "?\($0)" } ?? "")
        url.percentEncodedPath = ""
        url.percentEncodedQuery = nil
        url.fragment = nil
        url.user = nil
        url.password = nil
        guard let origin = url.string else { return nil }
        self.origin = origin
    }

    /// "http://127.0.0.1:8765/mcp"; on a Unix socket, the socket and the URL to ask for through it.
    func agentURL(_ listen: Listen) -> String {
        switch listen {
        case .tcp(let host, let port): "http://\(host):\(port)\(path)"
        case .unix(let socket): "http://localhost\(path) through the Unix socket \(socket) (curl --unix-socket \(socket))"
        }
    }

    /// tokend-proxy's --listen, checked here so that a mistake is told before it starts: a loopback TCP port, or a path.
    static func listenAddress(_ text: String) throws -> Listen {
        if text.hasPrefix("unix:"), text.count > 5 { return .unix(path: String(text.dropFirst(5))) }
        if text.hasPrefix("tcp:"), let colon = text.lastIndex(of: ":"), colon > text.index(text.startIndex, offsetBy: 3),
            let port = Int(text[text.index(after: colon)...]), (1...65_535).contains(port)
        {
            let host = String(text[text.index(text.startIndex, offsetBy: 4)..<colon])
            let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
            if LoopbackAddress(host: bare, port: 0) != nil {
                return .tcp(host: bare.includes(":") ? "[\(bare)]" : bare, port: port)
            }
        }
        throw ValidationError(
            "--listen \(text): give tcp:127.0.0.1:PORT (a port of this host's loopback) or unix:PATH; "
                + "leave it out for a free port of 127.0.0.1")
    }

    /// tokend-proxy beside this tokenctl, else the first on PATH.
    static func program() -> String? { ProgramPlaces.find("tokend-proxy") }
}
