import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient
import TokendInterface
import Varlink

/// tokenctl's version and the running tokend's: a mismatch after an upgrade
/// (tokend not restarted) shows here.
struct VersionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "version", abstract: "Print tokenctl's version and the running tokend's.")
    @OptionGroup var connection: Connection
    @Flag(help: "Print them as JSON.")
    var json = false

    /// tokenctl's own version is printed whatever becomes of the question to
    /// tokend; tokend's is then unknown, with why, and the exit is the error's (3 when it does not answer).
    func run() async throws {
        let common = connection.common
        let socket = TokendClient.socketPath(common.socket)
        let asked = try? await answered(within: replySeconds) { () async -> Result<(String, String), TokendClientError> in
            do {
                let client = try await TokendClient.connect(socket: common.socket)
                return .success((try await client.daemonVersion(), client.socket))
            } catch let error as TokendClientError {
                return .failure(error)
            } catch {
                return .failure(.malformedReply("version"))
            }
        }
        switch asked {
        case .success(let (daemon, at)):
            if json {
                print(jsonText(.object(["tokenctl": .string(Release.version), "tokend": .string(daemon)])))
            } else {
                print("tokenctl \(Release.version)\ntokend \(daemon) (at \(at))")
            }
        case .failure(let error):
            let (code, advice) = Common.advice(for: error, session: nil)
            unknown(because: "\(error)", advice: advice)
            throw ExitCode(code)
        case nil:
            unknown(because: "tokend at \(socket) accepts but does not answer within \(replySeconds) s", advice: Common.wedgedFix)
            throw ExitCode(Exit.unreachable)
        }
    }

    func unknown(because reason: String, advice: String) {
        if json {
            print(jsonText(.object(["tokenctl": .string(Release.version), "tokend": .null, "tokendUnknown": .string(reason)])))
        } else {
            print("tokenctl \(Release.version)\ntokend unknown: \(reason)")
        }
        StandardStream.error.write("tokenctl: \(reason)\(advice.isEmpty ? "" : "\n  \(advice)")\n")
    }
}
