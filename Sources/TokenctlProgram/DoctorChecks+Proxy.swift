#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TokendClient

/// tokend-proxy's user unit (systemd/user/tokend-proxy.service) takes its
/// upstream and session from `$XDG_CONFIG_HOME/tokend/proxy.env`. On a DPoP
/// session every request through it needs a proof, which GetProof makes only
/// for targets the session allows: tokend itself is asked whether the
/// upstream is one (GetProof judges the URL before anything else, so the
/// answer holds whether or not a proof could be made now).
enum DoctorProxyCheck {
    struct Setting: Equatable {
        var upstream: String
        var session: String
    }

    /// UPSTREAM and SESSION (default "default") of proxy.env, nil without one.
    static func setting(environment: [String: String]) -> Setting? {
        let home = environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
        let directory = environment["XDG_CONFIG_HOME"] ?? home + "/.config"
        guard let text = try? String(contentsOfFile: directory + "/tokend/proxy.env", encoding: .utf8) else { return nil }
        var values: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) where !line.hasPrefix("#") {
            let parts = line.split(separator: "=", maxSplits: 1).map { $0.trimmingWhitespace }
            guard parts.count == 2 else { continue }
            values[parts[0]] = parts[1].trimming { $0 == "\"" || $0 == "'" }
        }
        guard let upstream = values["UPSTREAM"], !upstream.isEmpty else { return nil }
        return Setting(upstream: upstream, session: values["SESSION"] ?? "default")
    }

    /// The check for a proxy of `setting` on a session whose status says it uses DPoP (`dpop`).
    static func run(_ setting: Setting, socket: String, dpop: Bool) async -> DoctorResult {
        let check = "proxy upstream (\(setting.session))"
        guard dpop else { return .skip(check, "session \(setting.session) does not use DPoP: the proxy needs no proofs") }
        let url = setting.upstream.hasSuffix("/") ? setting.upstream : setting.upstream + "/"
        let asked = try? await answered(within: replySeconds) { () async -> Result<Bool, TokendClientError> in
            do throws(TokendClientError) {
                let client = try await TokendClient.connect(socket: socket)
                let made: Result<Bool, TokendClientError>
                do throws(TokendClientError) {
                    _ = try await client.proof(session: setting.session, method: "GET", url: url)
                    made = .success(true)
                } catch {
                    made = .failure(error)
                }
                await client.close()
                return made
            } catch {
                return .failure(error)
            }
        }
        guard let outcome = asked ?? nil else { return .skip(check, "tokend did not answer within \(replySeconds) s") }
        return judge(setting, outcome)
    }

    static func judge(_ setting: Setting, _ outcome: Result<Bool, TokendClientError>) -> DoctorResult {
        let check = "proxy upstream (\(setting.session))"
        switch outcome {
        case .success:
            return .ok(check, "tokend makes DPoP proofs for \(setting.upstream)")
        case .failure(.invalidParameter("url")):
            return .fail(
                check,
                "tokend makes no DPoP proof for \(setting.upstream) (proxy.env): it is not within session \(setting.session)'s "
                    + "resources or proof-targets, nor its provider's userinfo endpoint, or it names a host otherwise than as listed",
                fix: "add \"\(setting.upstream)\" to proof-targets in [sessions.\(setting.session)] of tokend.toml, then systemctl reload tokend")
        case .failure(let error) where error.proofRefusal != nil:
            return .skip(check, "cannot tell: \(error)")
        case .failure(.unreachable), .failure(.noSuchSession), .failure(.permissionDenied):
            return .skip(check, "cannot ask tokend")
        case .failure:
            // Refused after the URL was judged (no token now, a rate): the upstream is one tokend signs for.
            return .ok(check, "tokend makes DPoP proofs for \(setting.upstream)")
        }
    }
}
