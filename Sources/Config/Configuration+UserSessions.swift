#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// tokend.toml's [user-sessions]: who may add sessions of their own at run
/// time (AddSession), how many, and which authorization servers they may name.
public struct UserSessionSettings: Sendable, Equatable {
    /// Users (names or uids) who may add sessions; none by default.
    public var users: [String] = []
    /// Groups whose members may add sessions; none by default.
    public var groups: [String] = []
    /// Sessions each person may hold.
    public var perPerson = 8
    /// URL patterns of the authorization servers users may add: '*' matches any
    /// run of characters, within the host part up to '/', '?' or '#'; a pattern
    /// without a port means the scheme's default one. A pattern whose host has
    /// no '*' also lets that host be on a private address.
    public var issuers = ["https://*"]
    /// Plain http, and connections at all, to loopback addresses (local servers, tests).
    public var allowLoopbackHTTP = false

    public init() {}

    /// Whether anyone may add sessions.
    public var enabled: Bool { !users.isEmpty || !groups.isEmpty }
}

extension TableReader {
    func userSessions() throws(ConfigError) -> UserSessionSettings {
        try allowOnly(["users", "groups", "per-person", "issuers", "allow-loopback-http"])
        var settings = UserSessionSettings()
        settings.users = try strings("users") ?? []
        settings.groups = try strings("groups") ?? []
        settings.perPerson = try integer("per-person", in: 1...256) ?? settings.perPerson
        settings.allowLoopbackHTTP = try bool("allow-loopback-http") ?? false
        if let issuers = try strings("issuers") {
            for pattern in issuers where !(pattern.hasPrefix("https://") || pattern.hasPrefix("http://")) {
                throw problem("issuers", "\"\(pattern)\" is not a URL pattern: start it with https:// (e.g. \"https://*\" or \"https://idp.example.com/*\")")
            }
            settings.issuers = issuers
        }
        return settings
    }
}
