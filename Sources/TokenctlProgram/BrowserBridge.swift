import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Installs the native messaging host manifest (io.tokend.bridge) for one
/// user or one browser profile, pointing at tokend-native-host.
struct BrowserBridgeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "browser-bridge",
        abstract: "Register tokend's native messaging host with a browser, for this user or one profile.",
        discussion: """
            tokenctl browser-bridge --browser chromium                 this user's Chromium
            tokenctl browser-bridge --browser firefox                  this user's Firefox
            tokenctl browser-bridge --user-data-dir DIR                one Chromium profile (--user-data-dir)
            Then load the extension (web/extension, or as packaged) in that browser. `make install`
            registers the host for every user (/etc/chromium, /etc/opt/chrome, /usr/lib/mozilla).
            """)

    static let extensionOrigin = "chrome-extension://eidjeejmieedlnhkabcigeekkgfpheoa/"
    static let firefoxExtension = "bridge@tokend.io"

    @Option(help: "chromium, chrome or firefox.")
    var browser = "chromium"
    @Option(help: "A Chromium user data directory: install there instead of for this user.")
    var userDataDir: String?
    @Option(help: "The host executable (default: tokend-native-host next to tokenctl).")
    var host: String?

    func validate() throws {
        guard ["chromium", "chrome", "firefox"].contains(browser) else {
            throw ValidationError("--browser is chromium, chrome or firefox")
        }
        if userDataDir != nil && browser == "firefox" {
            throw ValidationError("--user-data-dir is a Chromium flag; for Firefox install for the user")
        }
    }

    func run() throws {
        let hostPath = host ?? Self.besideThisProgram("tokend-native-host")
        guard FileManager.default.isExecutableFile(atPath: hostPath) else {
            StandardStream.error.write("tokenctl: \(hostPath) is not an executable; pass --host PATH\n")
            throw ExitCode(Exit.failure)
        }
        let directory = targetDirectory()
        let manifest = Self.manifest(host: hostPath, firefox: browser == "firefox")
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try Data(manifest.utf8).write(to: URL(fileURLWithPath: "\(directory)/io.tokend.bridge.json"), options: .atomic)
        } catch {
            StandardStream.error.write("tokenctl: cannot write \(directory)/io.tokend.bridge.json: \(error)\n")
            throw ExitCode(Exit.failure)
        }
        print("installed \(directory)/io.tokend.bridge.json -> \(hostPath)")
    }

    func targetDirectory() -> String {
        if let userDataDir { return "\(userDataDir)/NativeMessagingHosts" }
        let home = ProcessInfo.processInfo.environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
        let config = ProcessInfo.processInfo.environment["XDG_CONFIG_HOME"] ?? "\(home)/.config"
        switch browser {
        case "chrome": return "\(config)/google-chrome/NativeMessagingHosts"
        case "firefox": return "\(home)/.mozilla/native-messaging-hosts"
        default: return "\(config)/chromium/NativeMessagingHosts"
        }
    }

    static func manifest(host: String, firefox: Bool) -> String {
        let allowed = firefox
            ? "\"allowed_extensions\": [\"\(firefoxExtension)\"]" : "\"allowed_origins\": [\"\(extensionOrigin)\"]"
        return """
            {
              "name": "io.tokend.bridge",
              "description": "tokend: access tokens and session cookies for the tokend extension",
              "path": "\(host)",
              "type": "stdio",
              \(allowed)
            }

            """
    }

    /// The package's `name` beside this tokenctl (ProgramPlaces), else where it would be beside it.
    static func besideThisProgram(_ name: String) -> String {
        ProgramPlaces.find(name) ?? ((ProgramPlaces.directories().first ?? ".") + "/" + name)
    }
}
