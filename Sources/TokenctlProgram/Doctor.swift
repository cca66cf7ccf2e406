import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import TokendClient
import TokendInterface

struct DoctorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor", abstract: "Check this machine's tokend set-up and name the fix for each problem.",
        discussion: """
            One line per check: ok, warn (works, but could be safer), FAIL (with the command or setting that \
            fixes it) or skip (does not apply, or this user cannot see it). Exit status 0 when nothing fails, 1 \
            otherwise. Run as root to see what only tokend's user may read.
            """)
    @OptionGroup var scope: EverySession
    var common: Common { scope.common }
    @Option(help: "tokend's configuration (default: $TOKEND_CONFIG, else /etc/tokend/tokend.toml).")
    var config: String?
    @Flag(help: "Print one JSON object per check: check, outcome (ok, warn, FAIL, skip), detail, fix.")
    var json = false

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let configPath = config ?? environment["TOKEND_CONFIG"] ?? "/etc/tokend/tokend.toml"
        let systemd = DoctorSystemd.here()
        let standIns = systemd?.credentials("tokend.service").flatMap(CredentialStandIns.make)
        defer { standIns?.remove() }
        var parserEnvironment = environment
        if let standIns { parserEnvironment["CREDENTIALS_DIRECTORY"] = standIns.directory }
        var failed = false
        func report(_ results: [DoctorResult]) {
            // Written at once, so a slow check (a provider that does not answer) shows where it is.
            for result in results {
                StandardStream.output.write((json ? jsonText(result.json) : result.line) + "\n")
                failed = failed || result.outcome == .fail
            }
        }

        report([
            DoctorConfigCheck.run(
                config: configPath, tokend: DoctorProgram.find("tokend"), environment: parserEnvironment,
                standIns: standIns?.directory)
        ])
        let setup: DoctorSetup?
        do {
            setup = try DoctorSetup.load(path: configPath, environment: parserEnvironment)
        } catch {
            setup = nil
            report([.skip("configured values", "\(error): the checks that compare with them are left out")])
        }

        // What tokenctl's other commands ask, and what the doctor probes: the
        // configured socket when nothing names one.
        let clientSocket = TokendClient.socketPath(common.socket)
        let socketPath = common.socket ?? environment["TOKEND_SOCKET"] ?? setup?.socket ?? clientSocket
        var socket = SocketFacts.probe(socketPath)
        // Asked now, so the socket line says whether tokend replies, not only whether it accepts.
        let names = common.session.map { [$0] } ?? setup?.sessions.map(\.name) ?? []
        var statuses = names.map { (name: $0, status: Self.unanswered(socketPath)) }
        if socket.connectError == nil {
            let asked = try await answered(within: replySeconds) { [names] in
                await Self.sessionStatuses(socket: socketPath, names: names)
            }
            // A connection tokend closed at once (no call made) is not an answer either.
            socket.answered = (asked ?? nil) != nil
            statuses = (asked ?? nil) ?? statuses
        }
        let daemon = DoctorSocketCheck.identity(of: socket)
        let me = (uid: getuid(), name: DoctorSocketCheck.userName(getuid()))
        report(
            DoctorSocketCheck.judge(
                socket, expectedMode: setup?.socketMode, daemon: daemon, clientSocket: clientSocket,
                configuredSocket: setup?.socket, me: me))

        if socket.answered == true, let line = await Self.ownAccess(socket: socketPath, session: common.session) {
            report([line])
        }

        if let setup {
            report(DoctorStateCheck.run(directory: setup.stateDirectory, daemon: daemon))
            let facts = DoctorEncryptionCheck.probe(
                stateDirectory: setup.stateDirectory, keyFile: setup.stateKeyFile, systemd: systemd)
            report([DoctorEncryptionCheck.judge(facts, daemon: daemon)])
        }

        let curl = DoctorProgram.find("curl")
        let unitSources = systemd?.unitText("tokend.service").map { DoctorCredentialCheck.sources(inUnitText: $0) } ?? [:]
        for (name, status) in statuses {
            report([DoctorSessionCheck.judge(session: name, status)])
            if let session = setup?.sessions.first(where: { $0.name == name }) {
                report(Self.check(session, status: status.success, curl: curl))
                report([
                    DoctorCredentialCheck.judge(
                        session: name, files: session.credentialFiles, standIns: standIns?.directory,
                        unitSources: unitSources, ownGroup: daemon?.gid)
                ])
            }
        }

        if let proxy = DoctorProxyCheck.setting(environment: environment),
            let status = statuses.first(where: { $0.name == proxy.session })?.status.success
        {
            report([await DoctorProxyCheck.run(proxy, socket: socketPath, dpop: status.dpop != nil)])
        }

        let webOrigins = setup.map { $0.sessions.contains { !$0.webOrigins.isEmpty } }
            ?? statuses.contains { !($0.status.success?.webOrigins.isEmpty ?? true) }
        report([DoctorBridgeCheck.run(webOrigins: webOrigins, user: me.name, environment: environment)])
        report([DoctorUnitCheck.run(systemd: systemd)])
        if failed { throw ExitCode(Exit.failure) }
    }

    /// A configured session's provider and clock, token files and fleet store.
    static func check(_ session: DoctorSetup.Session, status: SessionStatus?, curl: DoctorProgram?) -> [DoctorResult] {
        var results: [DoctorResult] = []
        let name = session.name
        if let target = DoctorProviderCheck.targets(of: session) {
            if let curl {
                let answer = DoctorProviderCheck.ask(target.urls, curl: curl)
                results.append(DoctorProviderCheck.judge(answer, session: name, isDiscovery: target.isDiscovery))
                results += DoctorProviderCheck.judgeClock(answer, session: name).map { [$0] } ?? []
            } else {
                results.append(.skip("provider (\(name))", "curl is not installed (apt install curl) to ask \(target.urls[0])"))
            }
        }
        let hasToken = status.map { ($0.expiresAt ?? 0) > Int(Date().timeIntervalSince1970) }
        for file in session.tokenFiles {
            results.append(
                DoctorTokenFileCheck.judge(
                    file, found: FileFacts.of(file.path), session: name, hasToken: hasToken,
                    groupID: file.group.flatMap(DoctorTokenFileCheck.groupID)))
        }
        if let store = session.sharedStore {
            results += DoctorFleetCheck.run(url: store, session: name)
            results += DoctorFleetCheck.judgeStore(status?.fleet, session: name)
        }
        if let dpop = status?.dpop {
            results += DoctorDPoPCheck.judge(dpop, session: name, librariesMissing: DoctorDPoPCheck.missingLibraries())
        }
        return results
    }

    /// This user's own line of `tokenctl access`: what the policy lets it do with each session.
    static func ownAccess(socket: String, session: String?) async -> DoctorResult? {
        let asked = try? await answered(within: replySeconds) { () async -> BrokerInterface.GetAccess.Out? in
            guard let client = try? await TokendClient.connect(socket: socket) else { return nil }
            defer { Task { await client.close() } }
            return try? await client.access(session: session)
        }
        guard let answer = asked ?? nil else { return nil }
        let check = "access (\(answer.user))"
        if answer.sessions.isEmpty {
            return .warn(check, "may read no session", fix: "an administrator adds this user to [access] read-users or read-groups")
        }
        return .ok(check, answer.sessions.map { "\($0.session): \(AccessCommand.words($0))" }.joined(separator: "; "))
    }

    static func unanswered(_ socket: String) -> Result<SessionStatus, TokendClientError> {
        .failure(.unreachable(socket: socket, reason: "no answer"))
    }

    /// Each session to check (`names`, else every one tokend lists) with its
    /// status or the error asking for it; nil when tokend cannot be reached.
    static func sessionStatuses(socket: String, names: [String]) async
        -> [(name: String, status: Result<SessionStatus, TokendClientError>)]?
    {
        guard let client = try? await TokendClient.connect(socket: socket) else { return nil }
        var names = names
        if names.isEmpty { names = ((try? await client.sessions()) ?? []).map(\.session) }
        var statuses: [(name: String, status: Result<SessionStatus, TokendClientError>)] = []
        for name in names {
            do {
                statuses.append((name, .success(try await client.status(session: name))))
            } catch {
                statuses.append((name, .failure(error)))
            }
        }
        await client.close()
        return statuses
    }
}

/// The session's state and last error in words (StatusAdvice, as `tokenctl status` says it).
enum DoctorSessionCheck {
    static func judge(session: String, _ status: Result<SessionStatus, TokendClientError>) -> DoctorResult {
        let check = "session \(session)"
        switch status {
        case .failure(.unreachable):
            return .skip(check, "tokend is not reachable, so its state is unknown")
        case .failure(let error):
            let (_, advice) = Common.advice(for: error, session: session)
            return .fail(check, "\(error)", fix: advice.isEmpty ? "see tokend's journal (journalctl -u tokend)" : advice)
        case .success(let status):
            let advice = StatusAdvice(status, now: Int(Date().timeIntervalSince1970))
            switch advice.severity {
            case .fine: return .ok(check, advice.headline)
            case .attention: return .warn(check, advice.headline, fix: advice.command ?? "tokenctl status --session \(session)")
            case .broken: return .fail(check, advice.headline, fix: advice.command ?? "tokenctl status --session \(session)")
            }
        }
    }
}

extension Result {
    var success: Success? { if case .success(let value) = self { value } else { nil } }
}
