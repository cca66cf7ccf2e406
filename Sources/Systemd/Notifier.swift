import CSystemd

#if canImport(Glibc)
import Glibc
#endif

/// sd_notify(3): tells the service manager about readiness, status,
/// reloads, shutdown and liveness. Does nothing without $NOTIFY_SOCKET.
public enum Notifier {
    /// Sends newline-separated assignments; returns false if nothing was sent.
    @discardableResult
    public static func send(_ assignments: String) -> Bool {
        sd_notify(0, assignments) > 0
    }

    public static func ready(status: String) { send("READY=1\nSTATUS=\(status)") }
    public static func status(_ text: String) { send("STATUS=\(text)") }
    public static func stopping(status: String) { send("STOPPING=1\nSTATUS=\(status)") }
    public static func watchdog() { send("WATCHDOG=1") }

    /// FDSTORE=1: systemd keeps a copy of `fd`, named `name`, and passes it
    /// back at the next start (the unit needs FileDescriptorStoreMax=).
    /// False when nothing was stored (not under systemd, or refused).
    @discardableResult
    public static func store(_ fd: CInt, name: String) -> Bool {
        var descriptor = fd
        return sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=\(name)", &descriptor, 1) > 0
    }

    /// FDSTOREREMOVE=1: systemd closes its copies of the descriptors named `name`.
    public static func removeStored(name: String) { send("FDSTOREREMOVE=1\nFDNAME=\(name)") }

    /// RELOADING=1 with the CLOCK_MONOTONIC time systemd needs (Type=notify-reload).
    public static func reloading(status: String) {
        send("RELOADING=1\nMONOTONIC_USEC=\(monotonicMicroseconds())\nSTATUS=\(status)")
    }

    /// The watchdog interval systemd expects pings within, if enabled for us.
    public static func watchdogInterval() -> Duration? {
        var usec: UInt64 = 0
        guard sd_watchdog_enabled(0, &usec) > 0, usec > 0 else { return nil }
        return .microseconds(Int64(usec))
    }

    static func monotonicMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
    }
}

/// sd_listen_fds_with_names(3): sockets passed by socket activation.
public enum ListenFDs {
    /// The passed descriptor named `name` (FileDescriptorName=), or the only
    /// one passed when it has no name. Unsets the environment variables so
    /// children do not inherit them.
    public static func take(named name: String) -> CInt? {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count > 0 else { return nil }
        defer {
            if let names {
                for index in 0..<Int(count) { free(names[index]) }
                free(names)
            }
        }
        var found: CInt?
        for index in 0..<Int(count) {
            let fdName = names?[index].map { String(cString: $0) } ?? "unknown"
            if fdName == name { found = SD_LISTEN_FDS_START + CInt(index) }
        }
        // A descriptor kept in the store (`stored(prefix:)`'s) is never taken for another.
        if found == nil, count == 1, !(names?[0].map { String(cString: $0) } ?? "").hasPrefix(storedPrefix) {
            found = SD_LISTEN_FDS_START
        }
        return found
    }

    /// What names of descriptors kept in systemd's store begin with.
    public static let storedPrefix = "stored-"

    /// The passed descriptors whose names begin with `storedPrefix` (those
    /// given back from the file descriptor store), by name. Leaves the
    /// environment for `take(named:)`, which is called after.
    public static func stored() -> [(name: String, fd: CInt)] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(0, &names)
        guard count > 0 else { return [] }
        defer {
            if let names {
                for index in 0..<Int(count) { free(names[index]) }
                free(names)
            }
        }
        return (0..<Int(count)).compactMap { index in
            guard let name = names?[index].map({ String(cString: $0) }), name.hasPrefix(storedPrefix) else { return nil }
            return (name, SD_LISTEN_FDS_START + CInt(index))
        }
    }
}
