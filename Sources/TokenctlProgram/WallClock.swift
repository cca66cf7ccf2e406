#if canImport(Glibc)
import Glibc
#endif

/// The zone tokenctl reads times in. FoundationEssentials alone knows no zone but UTC and fixed
/// offsets, so the local one is the C library's: TZ (a name, a path or a POSIX rule), else
/// /etc/localtime, as `date` reads it.
struct Zone: Sendable {
    /// Seconds east of UTC at a Unix time.
    let offset: @Sendable (Int) -> Int

    static let local = Zone { unix in
        var time = time_t(WallClock.clamped(unix))
        var parts = tm()
        return localtime_r(&time, &parts) == nil ? 0 : parts.tm_gmtoff
    }

    static let utc = Zone { _ in 0 }
}

/// A Unix time as a wall clock in a zone shows it (the Gregorian calendar, proleptic).
struct WallClock: Equatable {
    var year: Int
    var month: Int
    var day: Int
    var hour: Int
    var minute: Int

    /// Times past ±2^50 s (35 million years) read as that bound; nothing tokend sends is near it.
    static func clamped(_ unix: Int) -> Int { min(max(unix, -(1 << 50)), 1 << 50) }

    init(_ unix: Int, in zone: Zone) {
        let local = Self.clamped(unix) + zone.offset(Self.clamped(unix))
        let (days, seconds) = (local.floorDivided(by: 86_400), local.floorModulo(86_400))
        (hour, minute) = (seconds / 3600, seconds % 3600 / 60)
        // Days since 1970-01-01 to a civil date: Howard Hinnant's civil_from_days, in 400-year eras
        // (146,097 days) that start on 1 March so that a leap day ends its year.
        let shifted = days + 719_468
        let era = shifted.floorDivided(by: 146_097)
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let marchMonth = (5 * dayOfYear + 2) / 153
        day = dayOfYear - (153 * marchMonth + 2) / 5 + 1
        month = marchMonth < 10 ? marchMonth + 3 : marchMonth - 9
        year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    }

    /// "10:42"
    var time: String { "\(Self.digits(hour, 2)):\(Self.digits(minute, 2))" }

    /// "2026-05-28"
    var date: String { "\(Self.digits(year, 4))-\(Self.digits(month, 2))-\(Self.digits(day, 2))" }

    func isSameDay(as other: WallClock) -> Bool { (year, month, day) == (other.year, other.month, other.day) }

    private static func digits(_ value: Int, _ count: Int) -> String {
        let text = String(abs(value))
        return (value < 0 ? "-" : "") + String(repeating: "0", count: max(0, count - text.count)) + text
    }
}

extension Int {
    fileprivate func floorDivided(by divisor: Int) -> Int {
        let quotient = self / divisor
        return self % divisor < 0 ? quotient - 1 : quotient
    }

    fileprivate func floorModulo(_ divisor: Int) -> Int { self - floorDivided(by: divisor) * divisor }
}
