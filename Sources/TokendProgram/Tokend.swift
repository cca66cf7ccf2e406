import ArgumentParser
import Config
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import ServiceLifecycle
import StateStore
import Systemd
import TokendServer

#if canImport(Glibc)
import Glibc
#endif

/// sysexits.h EX_CONFIG: the configuration is wrong.
let exitConfigError: Int32 = 78
/// sysexits.h EX_TEMPFAIL: another tokend owns the state directory, or another
/// program listens at the socket (try again once it stops).
let exitAlreadyRunning: Int32 = 75
/// sysexits.h EX_CANTCREAT: the socket cannot be created, bound or listened on.
let exitSocketUnusable: Int32 = 73
/// sysexits.h EX_SOFTWARE: the server's loop stopped on an error; systemd restarts tokend.
let exitServerFailed: Int32 = 70

struct Tokend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokend",
        abstract: "Owns OAuth sessions' refresh tokens and answers token requests over Varlink.",
        version: Daemon.version)

    @Option(name: .long, help: "Configuration file (also TOKEND_CONFIG).")
    var config: String = ProcessInfo.processInfo.environment["TOKEND_CONFIG"] ?? "/etc/tokend/tokend.toml"

    @Flag(name: .long, help: "Validate the configuration and exit (0 valid, 78 invalid).")
    var checkConfig = false

    @Flag(
        name: .long,
        help: """
            Print a new random state key (base64) and exit. Store it with \
            `tokend --generate-state-key | systemd-creds encrypt --name=tokend.state-key - /etc/credstore.encrypted/tokend.state-key` \
            or in a 0600 file named by daemon.state-key-file.
            """)
    var generateStateKey = false

    func run() async throws {
        umask(0o077)
        if generateStateKey {
            print(StateKey.generate())
            return
        }
        ProcessHardening.disableCoreDumps()
        let environment = ProcessInfo.processInfo.environment
        let configuration: Configuration
        do {
            configuration = try Configuration.load(path: config, environment: environment)
        } catch {
            writeStandardError("tokend: \(error)\n")
            throw ExitCode(exitConfigError)
        }
        if checkConfig {
            // The secret and key files too: what would stop tokend at start stops the check.
            for session in configuration.sessions {
                do {
                    _ = try session.endpoint()
                } catch {
                    writeStandardError("tokend: \(error)\n")
                    throw ExitCode(exitConfigError)
                }
            }
            print("tokend: \(config): valid (\(configuration.sessions.map(\.name).joined(separator: ", ")))")
            return
        }
        let level = Logger.Level(rawValue: configuration.daemon.logLevel) ?? .info
        if JournalLogHandler.isWanted(target: configuration.daemon.logTarget, environment: environment) {
            LoggingSystem.bootstrap { _ in
                var handler = JournalLogHandler(
                    identifier: "tokend", fieldPrefix: "TOKEND_", messageIDs: MessageIDs.byMessage)
                handler.logLevel = level
                return handler
            }
        } else {
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
        }
        let logger = Logger(label: "tokend")
        let openFiles = ProcessHardening.raiseOpenFileLimit()
        if configuration.daemon.maxConnections + 64 > openFiles {
            logger.warning(
                "daemon.max-connections exceeds what the open-file limit allows",
                metadata: [
                    "max_connections": "\(configuration.daemon.maxConnections)", "open_files": "\(openFiles)",
                    "fix": "raise LimitNOFILE= in tokend.service (or ulimit -n), or lower max-connections",
                ])
        }
        let daemon: Daemon
        do {
            daemon = try Daemon(configuration: configuration, configPath: config, environment: environment, logger: logger)
        } catch let error as OwnerLockError {
            writeStandardError("tokend: \(error)\n")
            throw ExitCode(exitAlreadyRunning)
        } catch let error as AtomicFile.WriteError where error.step == "mkdir" && error.errno == EACCES && getuid() != 0 {
            // A user trying tokend by hand: the default state directory is root's to make.
            writeStandardError("""
                tokend: \(error)
                  tokend runs as uid \(getuid()), which may not create it: run it as root (tokend.service), \
                set state-directory (and socket) in [daemon] of \(config) to directories this user may create, \
                or run the per-user unit (systemctl --user start tokend.socket).

                """)
            throw ExitCode(exitConfigError)
        } catch {
            writeStandardError("tokend: \(error)\n")
            throw ExitCode(exitConfigError)
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: daemon)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch let failure as DaemonFailure {
            // Not serving: say why (the socket's path and the reason) and end non-zero.
            writeStandardError("tokend: \(failure)\n")
            switch failure.kind {
            case .socketUnusable: throw ExitCode(exitSocketUnusable)
            case .socketInUse: throw ExitCode(exitAlreadyRunning)
            case .serverFailed: throw ExitCode(exitServerFailed)
            }
        }
    }
}

/// `text` on standard error, all of it (what tokend says when it cannot start or serve).
func writeStandardError(_ text: String) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
        let written = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        if written < 0, errno == EINTR { continue }
        guard written > 0 else { return }
        bytes = bytes.dropFirst(written)
    }
}

/// The daemon, as its program runs it (Sources/tokend/main.swift, and the multi-call tokend).
public func runTokend() async { await Tokend.main() }
