/// What the process was started as: the last component of argv[0]
/// (a link's own name, not its target's, which /proc/self/exe would give).
enum ProgramName {
    static var invoked: String {
        let path = CommandLine.arguments.first ?? ""
        return String(path.split(separator: "/", omittingEmptySubsequences: false).last ?? "")
    }
}
