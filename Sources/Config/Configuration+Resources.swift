#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension TableReader {
    /// `resources`, `narrowing` and `resource-access` (RFC 8707 resource indicators).
    func resources(into session: inout SessionSettings) throws(ConfigError) {
        for resource in try strings("resources") ?? [] {
            guard let url = URLComponents(string: resource), let scheme = url.scheme, !scheme.isEmpty,
                url.fragment == nil, !resource.contains(where: \.isWhitespace), resource.utf8.count <= 2048
            else {
                throw problem(
                    "resources",
                    "\"\(resource)\" is not a resource indicator: an absolute URI without a fragment (RFC 8707 §2), e.g. \"https://api.example.com/\"")
            }
            guard !session.resources.contains(resource) else { throw problem("resources", "\"\(resource)\" is listed twice") }
            session.resources.append(resource)
        }
        guard session.resources.count <= Self.maximumResources else {
            throw problem("resources", "at most \(Self.maximumResources) resources per session")
        }
        if !session.resources.isEmpty, session.sharedStore != nil {
            throw problem(
                "resources", "is not supported yet with shared-store: a fleet session serves one token (remove one of the two)")
        }
        session.narrowing = try oneOf("narrowing", ["auto", "narrows", "keeps-wide"]) ?? "auto"
        for resource in try strings("web-resources") ?? [] {
            guard session.resources.contains(resource) else {
                throw problem("web-resources", "\"\(resource)\" is not one of the session's resources")
            }
            session.webResources.append(resource)
        }
        try resourceAudiences(into: &session)
        guard let table = try table("resource-access") else { return }
        for resource in table.keys.sorted() {
            guard session.resources.contains(resource) else {
                throw problem("resource-access", "\"\(resource)\" is not one of the session's resources")
            }
            guard let rules = table[resource]?.table else {
                throw problem("resource-access", "\"\(resource)\" must be a table such as { read-users = [\"alice\"] }")
            }
            let reader = TableReader(file: file, table: rules, path: key("resource-access.\"\(resource)\""))
            try reader.allowOnly(["read-users", "read-groups"])
            var access = AccessSettings()
            access.readUsers = try reader.strings("read-users") ?? []
            access.readGroups = try reader.strings("read-groups") ?? []
            session.resourceAccess[resource] = access
        }
    }

    /// `resource-audiences`: for each resource, the `aud` value (or values) its tokens carry.
    func resourceAudiences(into session: inout SessionSettings) throws(ConfigError) {
        guard let table = try table("resource-audiences") else { return }
        for resource in table.keys.sorted() {
            guard session.resources.contains(resource) else {
                throw problem("resource-audiences", "\"\(resource)\" is not one of the session's resources")
            }
            let reader = TableReader(file: file, table: table, path: key("resource-audiences"))
            var values: [String]
            if let single = table[resource]?.string {
                values = [single]
            } else {
                values = try reader.strings(resource) ?? []
            }
            guard !values.isEmpty, values.allSatisfy({ !$0.isEmpty }) else {
                throw problem(
                    "resource-audiences",
                    "\"\(resource)\" must name the audience its tokens carry, e.g. \"api://mail\" or [\"api://mail\", \"mail\"]")
            }
            session.resourceAudiences[resource] = values
        }
    }

    /// A token file hands the session's own token to whoever can read it, and
    /// that token's audience may cover every resource: with resource-access, a
    /// file's readers must be ones every resource-access entry admits (mode
    /// 0600: tokend's own user; a group: one listed in every entry's read-groups).
    func tokenFilesWithinResourceAccess(_ session: SessionSettings) throws(ConfigError) {
        guard !session.resourceAccess.isEmpty else { return }
        for file in session.tokenFiles {
            if file.mode & 0o007 != 0 {
                throw problem(
                    "token-files",
                    "\(file.path) is readable by every user, and resource-access limits who may have some of the session's "
                        + "tokens: use mode 0600 or 0640 with a group every resource-access entry lists")
            }
            guard file.mode & 0o070 != 0 else { continue }
            let group = file.group ?? ""
            for (resource, access) in session.resourceAccess.sorted(by: { $0.key < $1.key })
            where !(access.readGroups ?? []).contains(group) {
                throw problem(
                    "token-files",
                    "\(file.path) is readable by group \(group.isEmpty ? "(tokend's)" : group), which resource-access does not "
                        + "admit to \(resource)'s tokens: add it to that entry's read-groups, or use mode 0600")
            }
        }
    }

    static let maximumResources = 32
}
