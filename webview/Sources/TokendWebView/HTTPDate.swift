/// RFC 9110's IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") of a Unix time: the date a Set-Cookie's
/// Expires carries. English names and UTC whatever the process's locale, so no calendar library:
/// the civil date comes from the day count (the proleptic Gregorian calendar, as HTTP's).
enum HTTPDate {
    /// The latest time the format holds (9999-12-31 23:59:59); later times are clamped to it,
    /// as are times before 1970 to 1970 (a cookie expired then is expired as much now).
    static let latest = 253_402_300_799

    static let weekdays = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]  // 1 January 1970 was a Thursday
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func string(_ unixTime: Int) -> String {
        let time = min(max(unixTime, 0), latest)
        let (days, second) = time.quotientAndRemainder(dividingBy: 86_400)
        let (year, month, day) = civil(days)
        return "\(weekdays[days % 7]), \(two(day)) \(months[month - 1]) \(year) "
            + "\(two(second / 3600)):\(two(second / 60 % 60)):\(two(second % 60)) GMT"
    }

    /// The year, month (1...12) and day of the month `days` after 1970-01-01 (days >= 0): counted in
    /// 400-year eras of 146,097 days from 0000-03-01, with years starting in March so that the leap day ends them.
    static func civil(_ days: Int) -> (year: Int, month: Int, day: Int) {
        let shifted = days + 719_468  // days from 0000-03-01 to 1970-01-01
        let (era, dayOfEra) = shifted.quotientAndRemainder(dividingBy: 146_097)
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        return (era * 400 + yearOfEra + (month <= 2 ? 1 : 0), month, day)
    }

    private static func two(_ number: Int) -> String { number < 10 ? "0\(number)" : "\(number)" }
}
