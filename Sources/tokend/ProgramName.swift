/// What the process was started as: the last component of argv[0] (a link's
/// own name, not its target's, which /proc/self/exe would give), without the
/// `-` a login shell puts before it.
enum ProgramName {
    static var invoked: String { name(of: CommandLine.arguments.first ?? "") }

    static func name(of path: String) -> String {
        let last = path.split(separator: "/", omittingEmptySubsequences: false).last ?? ""
        return String(last.hasPrefix("-") ? last.dropFirst() : last)
    }
}
