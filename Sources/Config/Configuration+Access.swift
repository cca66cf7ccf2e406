#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import TOMLKit

/// Who may do what, as tokend.toml's [access] tables say it: the global table
/// and each session's own (keys it leaves out come from the global one).
public struct AccessTables: Sendable, Equatable {
    public var global = AccessSettings()
    public var sessions: [String: AccessSettings] = [:]

    public init() {}

    /// A session's settings in force.
    public func settings(for session: String) -> AccessSettings {
        sessions[session].map { $0.over(global) } ?? global
    }
}

extension Configuration {
    /// Only the [access] tables, for a program that may read the file but not
    /// what it names (secrets, state): `tokenctl agent` decides with them
    /// whether its user may sign a session in, and whom to name otherwise.
    public static func accessTables(path: String) throws(ConfigError) -> AccessTables {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8)
        else {
            throw ConfigError(file: path, key: nil, problem: "cannot be read (does it exist? is it UTF-8?)")
        }
        let root: TOMLTable
        do {
            root = try TOMLTable(string: text)
        } catch {
            throw ConfigError(file: path, key: nil, problem: "not valid TOML")
        }
        let reader = TableReader(file: path, table: root, path: "")
        var tables = AccessTables()
        if let table = try reader.table("access") {
            tables.global = try TableReader(file: path, table: table, path: "access").access()
        }
        let sessions = try reader.table("sessions")
        for name in sessions?.keys ?? [] {
            guard let access = sessions?[name]?.table?["access"]?.table else { continue }
            tables.sessions[name] = try TableReader(file: path, table: access, path: "sessions.\(name).access").access()
        }
        return tables
    }
}
