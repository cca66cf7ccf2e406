#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Varlink

/// The browser bridge for this user: native messaging host manifests
/// (io.tokend.bridge.json) in the directories browsers read, each naming an
/// executable host and tokend's extension.
enum DoctorBridgeCheck {
    static let name = "browser bridge"
    static let manifestName = "io.tokend.bridge.json"

    /// Browser and directory: this user's, then the system-wide ones `make install` fills.
    static func directories(home: String, configHome: String) -> [(browser: String, directory: String)] {
        [
            ("chromium", "\(configHome)/chromium/NativeMessagingHosts"),
            ("chrome", "\(configHome)/google-chrome/NativeMessagingHosts"),
            ("firefox", "\(home)/.mozilla/native-messaging-hosts"),
            ("chromium", "/etc/chromium/native-messaging-hosts"),
            ("chrome", "/etc/opt/chrome/native-messaging-hosts"),
            ("firefox", "/usr/lib/mozilla/native-messaging-hosts"),
        ]
    }

    /// One manifest's problem, nil when it is sound.
    static func problem(manifest text: String, browser: String, hostIsExecutable: (String) -> Bool) -> String? {
        guard let json = try? JSONParser.parse(text), json["name"]?.stringValue == "io.tokend.bridge" else {
            return "is not a manifest for io.tokend.bridge"
        }
        guard let host = json["path"]?.stringValue, hostIsExecutable(host) else {
            return "names a host that is not an executable (\(json["path"]?.stringValue ?? "no path"))"
        }
        let allowed = browser == "firefox"
            ? json["allowed_extensions"]?.arrayValue?.compactMap(\.stringValue).contains(BrowserBridgeCommand.firefoxExtension)
            : json["allowed_origins"]?.arrayValue?.compactMap(\.stringValue).contains(BrowserBridgeCommand.extensionOrigin)
        return allowed == true ? nil : "does not allow tokend's extension"
    }

    /// `found`: browser, manifest path and its problem (nil: sound).
    static func judge(found: [(browser: String, path: String, problem: String?)], webOrigins: Bool, user: String)
        -> DoctorResult
    {
        if let broken = found.first(where: { $0.problem != nil }) {
            return .fail(
                name, "\(broken.path) \(broken.problem!)", fix: "tokenctl browser-bridge --browser \(broken.browser)")
        }
        if !found.isEmpty {
            let browsers = Set(found.map(\.browser)).sorted().joined(separator: ", ")
            return .ok(name, "registered for \(browsers)")
        }
        guard webOrigins else { return .skip(name, "no session has web-origins") }
        return .warn(
            name, "no browser has tokend's native messaging host for \(user), so pages of web-origins cannot ask",
            fix: "tokenctl browser-bridge --browser chromium (or chrome, firefox), then load the extension")
    }

    static func run(webOrigins: Bool, user: String, environment: [String: String]) -> DoctorResult {
        let home = environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
        let configHome = environment["XDG_CONFIG_HOME"] ?? "\(home)/.config"
        var found: [(browser: String, path: String, problem: String?)] = []
        for (browser, directory) in directories(home: home, configHome: configHome) {
            let path = "\(directory)/\(manifestName)"
            guard let data = FileManager.default.contents(atPath: path) else { continue }
            let problem = problem(
                manifest: String(decoding: data, as: UTF8.self), browser: browser,
                hostIsExecutable: { FileManager.default.isExecutableFile(atPath: $0) })
            found.append((browser, path, problem))
        }
        return judge(found: found, webOrigins: webOrigins, user: user)
    }
}
