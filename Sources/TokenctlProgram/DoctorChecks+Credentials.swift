import Config
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// A session's secret, key and password files, by tokend's rule
/// (`CredentialFile.exposure`): none readable by other users, or by a group
/// other than tokend's. For a systemd credential the file judged is the one
/// the unit loads it from: its 0400 copy under $CREDENTIALS_DIRECTORY is
/// private whatever the source's mode, so only the source says who else may read it.
enum DoctorCredentialCheck {
    static func name(_ session: String) -> String { "credentials (\(session))" }

    /// Where tokend.service takes one credential from.
    enum Source: Equatable, Sendable {
        /// LoadCredential=NAME:PATH, or PATH found in a credential store.
        case file(String)
        /// LoadCredential= whose source is in none of the stores.
        case missing(String)
        /// LoadCredentialEncrypted= or SetCredentialEncrypted=: sealed by systemd-creds.
        case encrypted
        /// SetCredential=NAME:VALUE, the value written in the unit.
        case inUnit
    }

    /// Searched, in systemd's order, for a LoadCredential= whose source is not an absolute path.
    static let credentialStores = ["/etc/credstore", "/run/credstore", "/usr/local/lib/credstore", "/usr/lib/credstore"]

    /// Each credential's source in the unit's text (drop-ins after the unit: the last setting wins).
    static func sources(inUnitText text: String, stores: [String] = credentialStores) -> [String: Source] {
        var sources: [String: Source] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let setting = parts[0].trimmingWhitespace
            let value = parts[1].split(separator: ":", maxSplits: 1).map { $0.trimmingWhitespace }
            guard let name = value.first, !name.isEmpty else { continue }
            switch setting {
            case "LoadCredential":
                let given = value.count == 2 && !value[1].isEmpty ? value[1] : name
                if given.hasPrefix("/") {
                    sources[name] = .file(given)
                } else {
                    let found = stores.map { "\($0)/\(given)" }.first { FileManager.default.fileExists(atPath: $0) }
                    sources[name] = found.map(Source.file) ?? .missing(given)
                }
            case "LoadCredentialEncrypted", "SetCredentialEncrypted": sources[name] = .encrypted
            case "SetCredential": sources[name] = .inUnit
            default: continue
            }
        }
        return sources
    }

    /// One file's finding: nil when it is private enough. `ownGroup` nil: tokend's group is not known.
    static func problem(_ file: CredentialFile, judged path: String, found: FileFacts?, ownGroup: UInt32?) -> (String, String)? {
        guard let found else {
            // A credential's source missing: tokend.service does not start at all (systemd cannot load it).
            let fix = path == file.path ? "correct \(file.key)" : "point LoadCredential= in tokend.service at the file"
            return ("\(file.key) \(path) does not exist", "create it (mode 0600), or \(fix)")
        }
        let mode = "mode \(String.octalMode(found.mode))"
        if let who = CredentialFile.exposure(mode: found.mode, group: found.gid, ownGroup: ownGroup ?? found.gid) {
            return (
                "\(file.key) \(path) (\(mode)) may be read by \(who): they can read \(file.holds)",
                CredentialFile(key: file.key, path: path).fix(ownGroup: ownGroup))
        }
        if ownGroup == nil, found.mode & 0o040 != 0 {
            return (
                "\(file.key) \(path) (\(mode)) may be read by group \(CredentialFile.groupName(found.gid)), and tokend's group is not known here",
                "chmod 0600 \(path), or run the doctor while tokend runs")
        }
        return nil
    }

    /// The session's credential files; `standIns`: the directory standing in
    /// for tokend.service's credentials (a path under it is a credential of the unit).
    static func judge(
        session: String, files: [CredentialFile], standIns: String?, unitSources: [String: Source], ownGroup: UInt32?,
        facts: (String) -> FileFacts? = FileFacts.of
    ) -> DoctorResult {
        var problems: [(String, String)] = []
        var checked: [String] = []
        for file in files {
            var path = file.path
            if let standIns, file.path.hasPrefix(standIns + "/") {
                let credential = String(file.path.dropFirst(standIns.count + 1))
                switch unitSources[credential] {
                case .file(let source)?:
                    path = source
                case .missing(let source)?:
                    problems.append((
                        "the credential \(credential) is loaded from \(source), found in none of \(credentialStores.joined(separator: ", "))",
                        "put it in /etc/credstore/\(source) (mode 0600), or give LoadCredential= an absolute path"))
                    continue
                case .encrypted?:
                    checked.append("\(credential) (encrypted)")
                    continue
                case .inUnit?:
                    problems.append((
                        "the credential \(credential) is written in tokend.service (SetCredential=), which every user may read "
                            + "(systemctl cat tokend.service)",
                        "systemd-creds encrypt --name=\(credential) FILE /etc/credstore.encrypted/\(credential) and "
                            + "LoadCredentialEncrypted=\(credential) instead of SetCredential="))
                    continue
                case nil:
                    continue  // a stand-in for a credential the unit does not load
                }
            }
            if let problem = problem(file, judged: path, found: facts(path), ownGroup: ownGroup) {
                problems.append(problem)
            } else {
                checked.append(path)
            }
        }
        let check = name(session)
        guard !problems.isEmpty else {
            if checked.isEmpty { return .skip(check, "no client secret, client key or store password file") }
            return .ok(check, "no other user may read \(checked.joined(separator: ", "))")
        }
        return .fail(check, problems.map(\.0).joined(separator: "; "), fix: problems.map(\.1).joined(separator: "; "))
    }
}
