import CookieJar

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
            (1...CookieDate.daysIn(month: month + 1, year: year)).contains(day)
        else { return nil }
        return CookieDate.daysFromCivil(year: year, month: month + 1, day: day) * 86_400 + hour * 3600 + minute * 60 + second
    }

    private static func number(_ text: Substring, digits: Int) -> Int? {
        guard text.utf8.count == digits, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int(text)
    }
}
