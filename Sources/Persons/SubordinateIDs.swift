#if canImport(Glibc)
import Glibc
#endif

/// Who owns which subordinate uids (/etc/subuid): a uid inside someone's
/// range is that person to the server's budgets, so a user who enters a
/// user namespace and connects as many inner uids is still one user. Names
/// are resolved once, when the file is read: the loop never asks NSS.
///
/// Where ranges of two owners overlap, the overlap is a person of its own,
/// keyed by its first uid: neither owner can spend the other's budgets from
/// there, and the overlap's uids are still one person, not one each (which
/// would hand both owners a budget per uid again). The key is safe because
/// only uids of that overlap map to it: a uid outside every range is itself,
/// and the key lies inside ranges. A uid that owns a range is always itself,
/// even inside another's range (SSSD's ids overlapping useradd's ranges): a
/// range owner is a login user, and their budgets stay theirs.
public struct SubordinateIDs: Sendable, Equatable {
    struct Range: Sendable, Equatable {
        let start: UInt32
        /// One past the last uid of the range (as UInt64: a range may end at 2^32).
        let end: UInt64
        /// Whose budgets a uid of the range counts in.
        let person: uid_t
    }

    /// Disjoint, in ascending order.
    let ranges: [Range]
    /// Uids that own a range: each is always itself.
    let owners: Set<uid_t>
    /// What the daemon should log: unreadable file, unknown names, malformed
    /// lines, overlaps. Not part of the table's identity.
    public let problems: [String]

    public init() { self.init(ranges: [], owners: [], problems: []) }

    init(ranges: [Range], owners: Set<uid_t>, problems: [String]) {
        self.ranges = ranges
        self.owners = owners
        self.problems = problems
    }

    public static func == (a: SubordinateIDs, b: SubordinateIDs) -> Bool {
        a.ranges == b.ranges && a.owners == b.owners
    }

    /// Parses subuid(5) lines `owner:start:count`; `owner` is a user name or
    /// a numeric uid. Blank lines and comments are skipped; malformed lines,
    /// empty ranges and names `resolve` does not know are skipped and reported.
    public init(parsing text: String, resolve: (String) -> uid_t? = SubordinateIDs.uid(named:)) {
        var problems: [String] = []
        var listed: [Range] = []
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let trimmed = line.drop { $0 == " " || $0 == "\t" }
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let fields = line.split(separator: ":", omittingEmptySubsequences: false)
            guard fields.count == 3, !fields[0].isEmpty, let start = UInt32(fields[1]), let count = UInt32(fields[2]),
                count > 0
            else {
                problems.append("line \(number + 1) is not owner:start:count with a count above 0; skipped")
                continue
            }
            guard let owner = UInt32(fields[0]) ?? resolve(String(fields[0])) else {
                problems.append("line \(number + 1): no user \(fields[0]); its range counts uid by uid")
                continue
            }
            listed.append(Range(start: start, end: UInt64(start) + UInt64(count), person: owner))
        }
        let (ranges, overlaps) = Self.disjoint(listed)
        problems += overlaps
        let owners = Set(listed.map(\.person))
        for owner in owners.sorted() {
            if let other = listed.first(where: { $0.person != owner && $0.start <= owner && UInt64(owner) < $0.end }) {
                problems.append(
                    "uid \(owner) owns a range and lies in uid \(other.person)'s range: it counts as itself")
            }
        }
        self.init(ranges: ranges, owners: owners, problems: problems)
    }

    /// Splits the listed ranges at every boundary: a piece one owner claims
    /// is theirs; each run of adjacent pieces two or more owners claim is one
    /// person keyed by its first uid.
    static func disjoint(_ listed: [Range]) -> ([Range], [String]) {
        let bounds = Set(listed.flatMap { [UInt64($0.start), $0.end] }).sorted()
        var ranges: [Range] = []
        var problems: [String] = []
        var overlapStart: UInt64?
        var overlapOwners = Set<uid_t>()
        func closeOverlap(at end: UInt64) {
            guard let start = overlapStart else { return }
            ranges.append(Range(start: UInt32(start), end: end, person: UInt32(start)))
            let owners = overlapOwners.sorted().map(String.init).joined(separator: ", ")
            problems.append(
                "uids \(start)–\(end - 1) lie in ranges of uids \(owners): they count as one person of their own")
            overlapStart = nil
            overlapOwners = []
        }
        for (low, high) in zip(bounds, bounds.dropFirst()) {
            let claimants = Set(listed.filter { UInt64($0.start) <= low && high <= $0.end }.map(\.person))
            if claimants.count > 1 {
                if overlapStart == nil { overlapStart = low }
                overlapOwners.formUnion(claimants)
                continue
            }
            closeOverlap(at: low)
            if let owner = claimants.first {
                if let last = ranges.last, last.person == owner, last.end == low {
                    ranges[ranges.count - 1] = Range(start: last.start, end: high, person: owner)
                } else {
                    ranges.append(Range(start: UInt32(low), end: high, person: owner))
                }
            }
        }
        closeOverlap(at: bounds.last ?? 0)
        return (ranges, problems)
    }

    /// /etc/subuid. A missing file is no ranges; one that cannot be read is
    /// no ranges too (every uid counts as itself), with a problem to log.
    public static func load(from path: String = "/etc/subuid") -> SubordinateIDs {
        guard let file = fopen(path, "r") else {
            let error = errno
            if error == ENOENT { return SubordinateIDs() }
            return SubordinateIDs(
                ranges: [], owners: [],
                problems: [
                    "cannot read \(path) (\(String(cString: strerror(error)))): every uid counts as its own person"
                ])
        }
        defer { fclose(file) }
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while case let count = fread(&chunk, 1, chunk.count, file), count > 0 {
            text.append(contentsOf: chunk[..<count])
        }
        if ferror(file) != 0 {
            return SubordinateIDs(
                ranges: [], owners: [],
                problems: ["cannot read \(path): every uid counts as its own person"])
        }
        return SubordinateIDs(parsing: String(decoding: text, as: UTF8.self))
    }

    /// The person whose budgets `uid` counts in: itself when it owns a range
    /// or lies in none; else the range's owner, or the overlap's own key.
    public func person(of uid: uid_t) -> uid_t {
        if owners.contains(uid) { return uid }
        var low = 0
        var high = ranges.count
        while low < high {
            let middle = (low + high) / 2
            if ranges[middle].end <= UInt64(uid) { low = middle + 1 } else { high = middle }
        }
        guard low < ranges.count, ranges[low].start <= uid else { return uid }
        return ranges[low].person
    }

    public static func uid(named name: String) -> uid_t? {
        getpwnam(name).map { $0.pointee.pw_uid }
    }
}
