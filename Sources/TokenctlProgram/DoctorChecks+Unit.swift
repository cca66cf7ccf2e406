#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// systemd, when it is PID 1 here: the unit's text and properties through systemctl.
struct DoctorSystemd {
    let systemctl: DoctorProgram

    /// nil when systemd is not the init system (a container, a chroot) or systemctl is missing.
    static func here() -> DoctorSystemd? {
        guard access("/run/systemd/system", F_OK) == 0, let systemctl = DoctorProgram.find("systemctl") else {
            return nil
        }
        return DoctorSystemd(systemctl: systemctl)
    }

    /// The unit file with its drop-ins (`systemctl cat`), nil when not installed.
    func unitText(_ unit: String) -> String? {
        guard let output = systemctl.run(["cat", "--no-pager", unit]), output.status == 0 else { return nil }
        return output.standardOutput
    }

    /// The credentials the unit hands tokend (LoadCredential=, SetCredential= and
    /// their Encrypted forms), nil when the unit is not installed.
    func credentials(_ unit: String) -> Set<String>? {
        unitText(unit).map(Self.credentials(inUnitText:))
    }

    static func credentials(inUnitText text: String) -> Set<String> {
        var names: Set<String> = []
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            guard parts.count == 2,
                ["LoadCredential", "LoadCredentialEncrypted", "SetCredential", "SetCredentialEncrypted"].contains(
                    parts[0].trimmingWhitespace)
            else { continue }
            let name = parts[1].split(separator: ":", maxSplits: 1).first.map(String.init) ?? ""
            if !name.isEmpty { names.insert(name.trimmingWhitespace) }
        }
        return names
    }

    func properties(_ unit: String, _ names: [String]) -> [String: String] {
        guard let output = systemctl.run(["show", unit, "--property=" + names.joined(separator: ",")]),
            output.status == 0
        else { return [:] }
        var properties: [String: String] = [:]
        for line in output.standardOutput.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2 { properties[String(parts[0])] = String(parts[1]) }
        }
        return properties
    }
}

/// The unit's hardening: the settings tokend.service ships with, as systemd
/// applies them now (a drop-in may have turned one off).
enum DoctorUnitCheck {
    static let name = "unit hardening"

    /// Property and the value the shipped unit gives it.
    static let expected: [(property: String, value: String)] = [
        ("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("ProtectHome", "yes"), ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"), ("ProtectKernelTunables", "yes"), ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"), ("RestrictSUIDSGID", "yes"), ("MemoryDenyWriteExecute", "yes"),
        ("LockPersonality", "yes"), ("CapabilityBoundingSet", ""), ("UMask", "0077"), ("LimitCORE", "0"),
    ]

    static func judge(loadState: String?, properties: [String: String]) -> DoctorResult {
        guard loadState == "loaded" else {
            return .skip(name, "tokend.service is not installed here (\(loadState ?? "unknown")): tokend runs another way")
        }
        let weaker = expected.filter { properties[$0.property] != $0.value }
        guard weaker.isEmpty else {
            let found = weaker.map { "\($0.property)=\(properties[$0.property] ?? "")" }.joined(separator: ", ")
            let wanted = weaker.map { "\($0.property)=\($0.value)" }.joined(separator: ", ")
            return .fail(
                name, "tokend.service runs with \(found); the shipped unit says \(wanted)",
                fix: "remove the override (`systemctl cat tokend.service` shows the drop-in; `systemctl revert tokend.service` drops all), then systemctl restart tokend")
        }
        return .ok(name, "tokend.service keeps the shipped sandbox (\(expected.count) settings checked)")
    }

    static func run(systemd: DoctorSystemd?) -> DoctorResult {
        guard let systemd else { return .skip(name, "systemd is not PID 1 here") }
        let properties = systemd.properties("tokend.service", ["LoadState"] + expected.map(\.property))
        return judge(loadState: properties["LoadState"], properties: properties)
    }
}
