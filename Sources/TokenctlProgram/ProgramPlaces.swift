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
    /// directory), then PATH's.
    static func directories(
        invoked: String = CommandLine.arguments.first ?? "",
        running: String? = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"),
        path: String = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    ) -> [String] {
        var directories: [String] = []
        if let slash = invoked.lastIndex(of: "/") { directories.append(String(invoked[..<slash])) }
        if let running, let slash = running.lastIndex(of: "/") { directories.append(String(running[..<slash])) }
        return directories + path.split(separator: ":").map(String.init)
    }

    /// The first executable `name` in `directories`, else nil.
    static func find(_ name: String, in directories: [String] = directories()) -> String? {
        directories.map { ($0.isEmpty ? "/" : $0 + "/") + name }.first { access($0, X_OK) == 0 }
    }
}
