import Foundation

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

    static let maximumResources = 32
}
