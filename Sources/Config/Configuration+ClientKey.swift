#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Loopback

extension TableReader {
    /// `client-key-file` and `client-key-id` for `client-auth = "private-key-jwt"`.
    /// A key set for another method is refused: the provider would never see it.
    func clientKey(into session: inout SessionSettings, environment: [String: String]) throws(ConfigError) {
        let file = try path("client-key-file")
        let keyID = try string("client-key-id")
        guard session.clientAuth == .privateKeyJWT else {
            if file != nil { throw problem("client-key-file", "is used only with client-auth = \"private-key-jwt\"") }
            if keyID != nil { throw problem("client-key-id", "is used only with client-auth = \"private-key-jwt\"") }
            return
        }
        if let keyID, keyID.isEmpty || keyID.contains(where: { $0.isWhitespace || $0.isNewline }) {
            throw problem("client-key-id", "must be a non-empty key id without spaces")
        }
        session.clientKeyID = keyID
        if let file {
            guard FileManager.default.isReadableFile(atPath: file) else {
                throw problem("client-key-file", "\(file) cannot be read")
            }
            session.clientKeyFile = file
        } else if let credentials = environment["CREDENTIALS_DIRECTORY"],
            FileManager.default.isReadableFile(atPath: "\(credentials)/\(session.name).client-key")
        {
            session.clientKeyFile = "\(credentials)/\(session.name).client-key"
        } else {
            throw problem(
                "client-auth",
                "\"private-key-jwt\" needs the client's private key: set client-key-file or provide the systemd credential \(session.name).client-key")
        }
    }

    /// An exact loopback redirect URI, `http://127.0.0.1:PORT/PATH` or
    /// `http://[::1]:PORT/PATH` (RFC 8252 §7.3, §8.3): tokenctl listens on that
    /// address itself, so a name (`localhost`) that may resolve elsewhere, or
    /// https, which it cannot serve, is refused.
    func loopbackRedirectURI(_ name: String) throws(ConfigError) -> String? {
        guard let text = try string(name) else { return nil }
        let expected = "must be http://127.0.0.1:PORT/PATH or http://[::1]:PORT/PATH, exactly as registered at the provider"
        guard LoopbackRedirect(text) != nil else {
            throw problem(name, "\"\(text)\" \(expected), with no dot segment in its path")
        }
        return text
    }
}
