#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Where tokenctl finds the package's other programs (tokend-proxy,
/// tokend-native-host). The package installs one binary under several names
/// (/usr/sbin/tokend, /usr/bin/tokenctl…), so the file this process runs
/// (/proc/self/exe) lies beside none of the others' names; the path it was
/// started by does.
enum ProgramPlaces {
    /// The directories to look in, in order: the one of the path tokenctl was
    /// started by (when it names one), the one of the file it runs (a build
    /// directory), then PATH's. Each is absolute: what is found is written into
    /// a browser's host manifest, which must name an absolute path, so a
    /// relative start (`./bin/tokenctl`) is made absolute from `workingDirectory`
    /// and a relative PATH entry is skipped.
    static func directories(
        invoked: String = CommandLine.arguments.first ?? "",
        running: String? = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"),
        path: String = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        workingDirectory: String = FileManager.default.currentDirectoryPath
    ) -> [String] {
        var directories: [String] = []
        if let slash = invoked.lastIndex(of: "/") {
            let directory = String(invoked[..<slash])
            if directory.hasPrefix("/") || slash == invoked.startIndex {
                directories.append(directory)
            } else if workingDirectory.hasPrefix("/") {
                directories.append(workingDirectory + "/" + directory)
            }
        }
        if let running, running.hasPrefix("/"), let slash = running.lastIndex(of: "/") {
            directories.append(String(running[..<slash]))
        }
        return directories + path.split(separator: ":").map(String.init).filter { $0.hasPrefix("/") }
    }

    /// The first executable `name` in `directories`, else nil.
    static func find(_ name: String, in directories: [String] = directories()) -> String? {
        directories.map { ($0.isEmpty ? "/" : $0 + "/") + name }.first { access($0, X_OK) == 0 }
    }
}
