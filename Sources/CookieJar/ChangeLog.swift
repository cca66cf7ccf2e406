/// The last `capacity` changes of a jar, for subscribers that reconnect.
struct ChangeLog: Sendable {
    let capacity: Int
    private var entries: [CookieChange] = []
    /// The version just before the oldest kept change.
    private var baseVersion: Int

    init(capacity: Int, baseVersion: Int) {
        self.capacity = capacity
        self.baseVersion = baseVersion
    }

    mutating func append(_ change: CookieChange) {
        entries.append(change)
        if entries.count > capacity {
            let dropped = entries.count - capacity
            baseVersion = entries[dropped - 1].version
            entries.removeFirst(dropped)
        }
    }

    /// The changes after `version`, or nil when the log does not reach back that far.
    func changes(since version: Int) -> [CookieChange]? {
        let latest = entries.last?.version ?? baseVersion
        guard version >= baseVersion, version <= latest else { return nil }
        return entries.filter { $0.version > version }
    }
}
