import Broker
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import StateStore

/// Times in the shared record are in the database's clock. A host whose clock
/// is off writes its expiry as its own clock says; the others would then
/// serve an expired token as valid (or refresh a valid one). So every read and
/// write also returns the database's `now()`, the host keeps the offset, and
/// converts: to the database's time when it writes, back to its own when it reads.
extension PostgresStore {
    /// Above this many seconds the journal says the host's clock is off.
    static let clockWarning = 3.0

    /// This host's wall clock, seconds since 1970 (the records' clock).
    static func localNow() -> Double { Date().timeIntervalSince1970 }

    /// A statement sent at `sent` and answered at `received` (this host's clock) ran at `databaseNow`.
    func sawDatabaseClock(_ databaseNow: Double, sent: Double, received: Double) {
        let offset = databaseNow - (sent + received) / 2
        let warn = sightings.withLock { seen -> Bool in
            seen.clockOffset = offset
            if abs(offset) < Self.clockWarning / 2 { seen.clockWarned = false }
            guard abs(offset) > Self.clockWarning, !seen.clockWarned else { return false }
            seen.clockWarned = true
            return true
        }
        if warn {
            logger.warning(
                "this host's clock differs from the database's; expiry times in the shared store are converted",
                metadata: ["database_ahead_s": "\(Int(offset.rounded()))"])
        }
    }

    /// Whole seconds to add to this host's times for the database's (0 before the first measurement).
    var clockShift: Int {
        guard let offset = sightings.withLock({ $0.clockOffset }), offset.isFinite else { return 0 }
        return Int(max(-1e9, min(1e9, offset)).rounded())
    }

    /// `record` with its times moved by `seconds` (to the database's time, or back with a negative shift).
    static func shifted(_ record: SessionRecord, by seconds: Int) -> SessionRecord {
        guard seconds != 0 else { return record }
        var record = record
        record.expiresAt = record.expiresAt.map { $0.addingReportingOverflow(seconds).partialValue }
        record.lastRefreshAt = record.lastRefreshAt.map { $0.addingReportingOverflow(seconds).partialValue }
        return record
    }
}
