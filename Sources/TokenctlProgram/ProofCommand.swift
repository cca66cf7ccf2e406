import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

/// `tokenctl proof`: the two header lines of one DPoP request, for `curl -H @-`.
struct ProofCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proof",
        abstract: "Print `Authorization: DPoP <token>` and `DPoP: <proof>` for one request (curl -H @-).")
    @OptionGroup var common: Common
    @Option(help: "The request's method, e.g. GET.")
    var method: String
    @Option(help: "The request's URL; the proof names it without query and fragment.")
    var url: String
    @Option(help: "The server's DPoP-Nonce, after it answered 401 use_dpop_nonce.")
    var nonce: String?
    @Option(help: "A resource the session serves (one of its resources in tokend.toml).")
    var resource: String?

    func run() async throws {
        let client = try await common.connect()
        let made: (proof: String, token: AccessToken)
        do {
            made = try await client.proof(session: common.session, resource: resource, method: method, url: url, nonce: nonce)
        } catch .invalidParameter("url") {
            StandardStream.error.write(Self.refused(url: url, session: common.session ?? "default"))
            throw ExitCode(Exit.failure)
        } catch {
            made = try await common.run { throw error }
        }
        print("Authorization: \(made.token.isDPoPBound ? "DPoP" : made.token.tokenType) \(made.token.accessToken)")
        print("DPoP: \(made.proof)")
    }

    /// What tokend's refusal of the URL means, and the key that allows a proof for it.
    static func refused(url: String, session: String) -> String {
        """
        tokenctl proof: tokend makes no proof for \(url): GetProof signs only for URLs within session \(session)'s \
        resources or proof-targets, or its provider's userinfo endpoint, with the host written as listed, and never for \
        the provider's own endpoints
          To allow it, add the URL (or one it is under) to proof-targets in [sessions.\(session)] of tokend.toml.

        """
    }
}

/// What a client that sends a token alone (no proof per request) does with a DPoP-bound one:
/// refuses it, rather than send it as Bearer where it is useless (or, worse, taken).
func refuseDPoPBound(_ token: AccessToken, by command: String) throws {
    guard token.isDPoPBound else { return }
    StandardStream.error.write(
        "tokenctl \(command): this session's tokens are DPoP-bound (RFC 9449): each request needs a proof of tokend's key, which a token alone cannot carry\n  Use tokenctl proof --method M --url U (or tokend-proxy) for such requests.\n")
    throw ExitCode(Exit.failure)
}
