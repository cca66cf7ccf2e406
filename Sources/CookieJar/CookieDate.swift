/// The cookie-date algorithm of RFC 6265 §5.1.1: tokens separated by
/// delimiters, each tried as time, day of month, month and year, in that order.
public enum CookieDate {
    /// Unix seconds for a cookie-date string, or nil when it is not one.
    public static func parse(_ string: String) -> Int? {
        var time: (Int, Int, Int)?
        var day: Int?
        var month: Int?
        var year: Int?
        for token in tokens(Array(string.utf8)) {
            if time == nil, let parsed = hmsTime(token) {
                time = parsed
            } else if day == nil, let parsed = digits(token, min: 1, max: 2) {
                day = parsed
            } else if month == nil, let parsed = monthNumber(token) {
                month = parsed
            } else if year == nil, let parsed = digits(token, min: 2, max: 4) {
                year = parsed
            }
        }
        guard let (hour, minute, second) = time, let day, let month, var year else { return nil }
        if (70...99).contains(year) { year += 1900 }
        if (0...69).contains(year) { year += 2000 }
        guard (1...31).contains(day), year >= 1601, hour <= 23, minute <= 59, second <= 59,
            day <= daysIn(month: month, year: year)
        else { return nil }
        return (daysFromCivil(year: year, month: month, day: day) * 86_400) + hour * 3600 + minute * 60 + second
    }

    /// %x09 / %x20-2F / %x3B-40 / %x5B-60 / %x7B-7E
    static func isDelimiter(_ byte: UInt8) -> Bool {
        byte == 0x09 || (0x20...0x2F).contains(byte) || (0x3B...0x40).contains(byte)
            || (0x5B...0x60).contains(byte) || (0x7B...0x7E).contains(byte)
    }

    static func tokens(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        bytes.split(whereSeparator: isDelimiter)
    }

    static func isDigit(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) }

    /// `min...max` digits, then optionally a non-digit and anything.
    static func digits(_ token: ArraySlice<UInt8>, min: Int, max: Int) -> Int? {
        let count = token.prefix(while: isDigit).count
        guard (min...max).contains(count) else { return nil }
        return token.prefix(count).reduce(0) { $0 * 10 + Int($1 - 0x30) }
    }

    /// hms-time = time-field ":" time-field ":" time-field, then optionally a non-digit and anything.
    static func hmsTime(_ token: ArraySlice<UInt8>) -> (Int, Int, Int)? {
        var fields: [Int] = []
        var rest = token[...]
        for index in 0..<3 {
            let count = rest.prefix(while: isDigit).count
            guard (1...2).contains(count) else { return nil }
            fields.append(rest.prefix(count).reduce(0) { $0 * 10 + Int($1 - 0x30) })
            rest = rest.dropFirst(count)
            if index < 2 {
                guard rest.first == UInt8(ascii: ":") else { return nil }
                rest = rest.dropFirst()
            }
        }
        if let next = rest.first, isDigit(next) { return nil }
        return (fields[0], fields[1], fields[2])
    }

    static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    static func monthNumber(_ token: ArraySlice<UInt8>) -> Int? {
        guard token.count >= 3 else { return nil }
        let prefix = String(decoding: token.prefix(3), as: UTF8.self).lowercased()
        return months.firstIndex(of: prefix).map { $0 + 1 }
    }

    public static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar.
    public static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
