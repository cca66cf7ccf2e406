/// RFC 9110's IMF-fixdate, the Date header every HTTP/1.1 server sends: "Sun, 06 Nov 1994 08:49:37 GMT".
enum HTTPDate {
    static let weekdays = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
    static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// The Unix time it names, or nil for anything else (RFC 850 and asctime dates included). As
    /// DateFormatter read it: names in any case, the comma after the weekday optional, and the
    /// weekday not checked against the date.
    static func parse(_ text: String) -> Int? {
        let words = text.split(separator: " ", omittingEmptySubsequences: false)
        guard words.count == 6, weekdays.contains(words[0].prefix(3).lowercased()),
            words[0].count == 3 || words[0].dropFirst(3) == ",",
            let day = number(words[1], digits: 2), let month = months.firstIndex(of: words[2].lowercased()),
            let year = number(words[3], digits: 4), words[5] == "GMT"
        else { return nil }
        let clock = words[4].split(separator: ":", omittingEmptySubsequences: false)
        guard clock.count == 3, let hour = number(clock[0], digits: 2), let minute = number(clock[1], digits: 2),
            let second = number(clock[2], digits: 2), hour < 24, minute < 60, second < 60,
            (1...daysIn(month: month + 1, year: year)).contains(day)
        else { return nil }
        return daysSince1970(year: year, month: month + 1, day: day) * 86_400 + hour * 3600 + minute * 60 + second
    }

    private static func number(_ text: Substring, digits: Int) -> Int? {
        guard text.utf8.count == digits, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int(text)
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        return month == 2 ? (leap ? 29 : 28) : [4, 6, 9, 11].contains(month) ? 30 : 31
    }

    /// Howard Hinnant's days_from_civil (the inverse of WallClock's), for years 0...9999.
    static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        let year = month <= 2 ? year - 1 : year
        let era = (year >= 0 ? year : year - 399) / 400
        let yearOfEra = year - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
