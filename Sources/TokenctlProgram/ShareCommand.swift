import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient
import TokendInterface
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// `tokenctl share`: sockets that give one session's tokens (and no more) to
/// whoever can open them: a remote shell through `ssh -R`, or a container
/// that mounts the socket's directory.
struct ShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Make, list and end shares: sockets that give one session's tokens to ssh sessions and containers.",
        subcommands: [ShareCreateCommand.self, ShareListCommand.self, ShareRevokeCommand.self])
}

struct ShareCreateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Make a socket at PATH that answers token calls of one session, as you may have them, until --ttl.",
        discussion: """
            Whoever can open PATH gets the session's tokens (only those of --resource and --scope), never more \
            than you may have. For a remote shell: ssh -R /tmp/tokend.sock:PATH host, and \
            TOKEND_SOCKET=/tmp/tokend.sock there. For a container, mount PATH's directory (a socket file \
            mounted alone is the old one once the share is made again).
            """)
    @OptionGroup var common: Common
    @Argument(help: "Where to make the socket; it must not exist (relative: to the current directory).")
    var path: String
    @Option(name: .customLong("resource"), help: "A resource the share gives tokens for (repeat for more).")
    var resources: [String] = []
    @Option(help: "A narrower scope the share's tokens have.")
    var scope: String?
    @Option(help: "How long the share lasts: seconds, or a number with s, m, h or d; at most 30d.")
    var ttl: String = "1h"
    @Option(help: "The socket file's mode, octal; 0600 lets only you connect.")
    var mode: String = "0600"

    func validate() throws {
        _ = try ShareTTL.seconds(ttl)
        _ = try ShareFile.mode(mode)
    }

    func run() async throws {
        let path = ShareFile.absolute(path)
        let mode = try ShareFile.mode(mode)
        if mode & 0o077 != 0 {
            StandardStream.error.write(
                "tokenctl: warning: mode \(String(mode, radix: 8)) lets users other than you connect to \(path) and get this session's tokens as you may have them\n")
        }
        let file: ShareFile
        do {
            file = try ShareFile.bind(path, mode: mode)
        } catch {
            StandardStream.error.write("tokenctl: cannot share at \(path): \(error.reason)\n")
            throw ExitCode(Exit.failure)
        }
        let share: Share
        do {
            share = try await shareRun(common) {
                try TokendClient.createShare(
                    socket: common.socket, listener: file.fd, path: path, session: common.session,
                    resources: resources.isEmpty ? nil : resources, scope: scope, ttl: try ShareTTL.seconds(ttl),
                    mode: Int(mode))
            }
        } catch {
            file.remove()  // a share refused leaves nothing behind
            throw error
        }
        file.release()
        print("share at \(share.path): session \(share.session)"
            + (share.resources.isEmpty ? "" : ", resources \(share.resources.joined(separator: " "))")
            + (share.scope.map { ", scope \"\($0)\"" } ?? "") + ", until \(humanTime(share.expiresAt))")
    }
}

struct ShareListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List your shares (root: everyone's).")
    @OptionGroup var connection: Connection
    @Flag(help: "Print one JSON object per line (mode as octal text, \"0600\").")
    var json = false

    func run() async throws {
        let common = connection.common
        let client = try await common.connect()
        let shares = try await shareRun(common) { try await client.shares() }
        for share in shares {
            if json {
                print(jsonText(cliJSON(share.json)))
            } else {
                print(
                    "\(share.path)\t\(share.session)\t\(share.resources.isEmpty ? "-" : share.resources.joined(separator: ","))"
                        + "\tuntil \(humanTime(share.expiresAt))\t\(share.connections) connection\(share.connections == 1 ? "" : "s")")
            }
        }
    }
}

struct ShareRevokeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke", abstract: "End a share: tokend closes it and its connections; its socket file is removed.")
    @OptionGroup var connection: Connection
    @Argument(help: "The share's path.")
    var path: String

    func run() async throws {
        let common = connection.common
        let path = ShareFile.absolute(path)
        let client = try await common.connect()
        try await shareRun(common) { try await client.revokeShare(path: path) }
        // The file is the asker's: removed here, with the asker's rights, if it is still a socket of theirs.
        ShareFile.removeSocket(at: path)
        print("share at \(path) ended")
    }
}

/// Runs a share call: the share's own errors get their own words; others go to `Common.run`.
func shareRun<T: Sendable>(_ common: Common, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await common.run {
        do {
            return try await body()
        } catch TokendClientError.failed(let error) {
            let p = error.parameters
            switch error.name {
            case BrokerInterface.Error.shareRefused:
                StandardStream.error.write(
                    "tokenctl: tokend refused the share at \(p["path"]?.stringValue ?? ""): \(p["reason"]?.stringValue ?? "")\n")
                throw ExitCode(Exit.permissionDenied)
            case BrokerInterface.Error.tooManyShares:
                StandardStream.error.write(
                    "tokenctl: you hold as many shares as one person may (\(p["limit"]?.intValue ?? 0)): `tokenctl share list`, then `tokenctl share revoke PATH`\n")
                throw ExitCode(Exit.failure)
            case BrokerInterface.Error.noSuchShare:
                StandardStream.error.write(
                    "tokenctl: you have no share at \(p["path"]?.stringValue ?? "") (`tokenctl share list` lists yours)\n")
                throw ExitCode(Exit.failure)
            default:
                throw TokendClientError.failed(error)
            }
        }
    }
}

/// What `tokenctl` says to a caller tokend refuses: from inside a user
/// namespace (a rootless container), tokend sees a subordinate uid, which it
/// refuses; a share is the way in.
/// The error asking tokend for this user's own access ends in (nil: answered, or no answer in time).
func askingOwnAccess(socket: String?) async -> TokendClientError? {
    let asked = try? await answered(within: replySeconds) { () async -> TokendClientError? in
        do {
            _ = try await TokendClient.connect(socket: socket).access(session: nil, user: nil)
            return nil
        } catch let error as TokendClientError {
            return error
        } catch {
            return nil
        }
    }
    return asked ?? nil
}

/// For a user tokend's policy admits to no session: it refuses every call, `tokenctl access` included.
func admittedToNothingAdvice() -> String {
    if inUserNamespace() { return containerAdvice }
    let name = getpwuid(getuid()).flatMap { String(validatingCString: $0.pointee.pw_name) } ?? "uid \(getuid())"
    return "This user (\(name)) may use no session of this tokend: its policy admits it to none, so every call is refused. "
        + "To admit it, the administrator adds it to read-users (or one of its groups to read-groups) in [access] of "
        + "tokend.toml, or in a session's [sessions.NAME.access] (admin-users or admin-groups to log in too), then reloads tokend."
}

func permissionDeniedAdvice(session: String? = nil) -> String {
    let table = session.map { "[sessions.\($0).access] (else [access])" } ?? "[access]"
    let admin = "To read, the administrator adds this user to read-users "
        + "or a group of read-groups in \(table) of tokend.toml (to log in: admin-users or admin-groups), then reloads tokend. "
        + "`tokenctl access` shows what this user may do now."
    return inUserNamespace() ? containerAdvice : admin
}

/// In a user namespace tokend sees a subordinate uid, which no policy names: the advice is a share, not [access].
let containerAdvice = "This runs in a user namespace (a container): tokend sees a subordinate uid and refuses it. "
    + "On the host, run `tokenctl share create DIR/tokend.sock`, mount DIR into the container and set TOKEND_SOCKET=DIR/tokend.sock."

func inUserNamespace() -> Bool {
    guard let map = try? String(contentsOfFile: "/proc/self/uid_map", encoding: .utf8) else { return false }
    return map.split(whereSeparator: \.isWhitespace) != ["0", "0", "4294967295"]
}

enum ShareTTL {
    /// Seconds from "90", "90s", "15m", "8h" or "7d": at least 1 s, at most 30 days.
    static func seconds(_ text: String) throws -> Int {
        let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        var digits = Substring(text)
        var unit = 1
        if let last = text.last, let scale = units[last] {
            digits = text.dropLast()
            unit = scale
        }
        guard let count = Int(digits), count > 0, count <= 30 * 86400 / unit else {
            throw ValidationError("--ttl \(text): give seconds, or a number with s, m, h or d, from 1s to 30d")
        }
        return count * unit
    }
}
