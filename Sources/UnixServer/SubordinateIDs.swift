#if canImport(Glibc)
import Glibc
#endif

/// Who owns which subordinate uids (/etc/subuid): a uid inside someone's
/// range is that person to the server's budgets, so a user who enters a
/// user namespace and connects as many inner uids is still one user. Names
/// are resolved once, when the file is read: the loop never asks NSS.
public struct SubordinateIDs: Sendable, Equatable {
    struct Range: Sendable, Equatable {
        let start: UInt32
        /// One past the last uid of the range (as UInt64: a range may end at 2^32).
        let end: UInt64
        let owner: uid_t
    }

    /// In the file's order: for overlapping ranges the one listed first wins.
    let ranges: [Range]

    public init() { ranges = [] }

    /// Parses subuid(5) lines `owner:start:count`; `owner` is a user name or
    /// a numeric uid. Blank lines, comments, malformed lines, empty ranges and
    /// names `resolve` does not know are skipped.
    public init(parsing text: String, resolve: (String) -> uid_t? = SubordinateIDs.uid(named:)) {
        ranges = text.split(whereSeparator: \.isNewline).compactMap { line in
            let fields = line.split(separator: ":", omittingEmptySubsequences: false)
            guard fields.count == 3, !fields[0].isEmpty, let start = UInt32(fields[1]), let count = UInt32(fields[2]),
                count > 0, let owner = UInt32(fields[0]) ?? resolve(String(fields[0]))
            else { return nil }
            return Range(start: start, end: UInt64(start) + UInt64(count), owner: owner)
        }
    }

    /// /etc/subuid, or no ranges if it cannot be read.
    public static func load(from path: String = "/etc/subuid") -> SubordinateIDs {
        guard let file = fopen(path, "r") else { return SubordinateIDs() }
        defer { fclose(file) }
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while case let count = fread(&chunk, 1, chunk.count, file), count > 0 {
            text.append(contentsOf: chunk[..<count])
        }
        return SubordinateIDs(parsing: String(decoding: text, as: UTF8.self))
    }

    /// The uid whose budgets `uid` counts in: the owner of the first range
    /// holding it, or `uid` itself. A file lists a few ranges per user: a scan
    /// at accept costs less than the accept.
    public func person(of uid: uid_t) -> uid_t {
        ranges.first { $0.start <= uid && UInt64(uid) < $0.end }?.owner ?? uid
    }

    public static func uid(named name: String) -> uid_t? {
        getpwnam(name).map { $0.pointee.pw_uid }
    }
}
