import Testing

@testable import TokendWebView

@Suite struct HTTPDateTests {
    @Test func knownDatesAreWrittenAsIMFFixdate() {
        #expect(HTTPDate.string(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.string(784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")  // RFC 9110's example
        #expect(HTTPDate.string(951_782_400) == "Tue, 29 Feb 2000 00:00:00 GMT")  // a leap day of a 400th year
        #expect(HTTPDate.string(2_000_000_000) == "Wed, 18 May 2033 03:33:20 GMT")
        #expect(HTTPDate.string(4_107_542_399) == "Sun, 28 Feb 2100 23:59:59 GMT")  // 2100 has no 29 February
        #expect(HTTPDate.string(4_107_542_400) == "Mon, 01 Mar 2100 00:00:00 GMT")
    }

    @Test func timesOutsideTheFormatAreClamped() {
        #expect(HTTPDate.string(-1) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.string(.min) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.string(HTTPDate.latest) == "Fri, 31 Dec 9999 23:59:59 GMT")
        #expect(HTTPDate.string(.max) == "Fri, 31 Dec 9999 23:59:59 GMT")
    }

    /// Every date the format holds, sampled every 999,983 s (a prime: every time of day comes
    /// round), against GLib's calendar, which the web view uses for libsoup's cookies.
    @Test func theCalendarAgreesWithGLibFrom1970To9999() {
        var mismatches: [String] = []
        for time in stride(from: 0, through: HTTPDate.latest, by: 999_983) {
            let date = g_date_time_new_from_unix_utc(gint64(time))!
            defer { g_date_time_unref(date) }
            let weekday = HTTPDate.weekdays[(Int(g_date_time_get_day_of_week(date)) + 3) % 7]  // GLib: Monday is 1
            let two = { (number: Int32) in number < 10 ? "0\(number)" : "\(number)" }
            let expected = "\(weekday), \(two(g_date_time_get_day_of_month(date))) "
                + "\(HTTPDate.months[Int(g_date_time_get_month(date)) - 1]) \(g_date_time_get_year(date)) "
                + "\(two(g_date_time_get_hour(date))):\(two(g_date_time_get_minute(date))):\(two(g_date_time_get_second(date))) GMT"
            if HTTPDate.string(time) != expected { mismatches.append("\(time): \(HTTPDate.string(time)) != \(expected)") }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
    }
}
