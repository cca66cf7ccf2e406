/// A statement's result: its rows, each column's text (nil for NULL), and the command tag.
public struct PostgresRows: Sendable {
    public let columns: [String]
    public let rows: [[[UInt8]?]]
    /// "INSERT 0 1", "SELECT 2"…
    public let commandTag: String

    /// Each row as a tuple of `types`, one per column: `rows.decode((Int64, String?).self)`.
    public func decode<each Column: PostgresDecodable>(_ types: (repeat each Column).Type) throws(PostgresError)
        -> [(repeat each Column)]
    {
        var decoded: [(repeat each Column)] = []
        decoded.reserveCapacity(rows.count)
        for row in rows { decoded.append(try Self.decode(row, as: types)) }
        return decoded
    }

    /// Each row's one column as `type`: `rows.decode(Int64.self)`.
    public func decode<Column: PostgresDecodable>(_ type: Column.Type) throws(PostgresError) -> [Column] {
        var decoded: [Column] = []
        decoded.reserveCapacity(rows.count)
        for row in rows { decoded.append(try Self.decode(row, as: (Column).self)) }
        return decoded
    }

    static func decode<each Column: PostgresDecodable>(_ row: [[UInt8]?], as _: (repeat each Column).Type)
        throws(PostgresError) -> (repeat each Column)
    {
        var index = 0
        func next<C: PostgresDecodable>(_: C.Type) throws(PostgresError) -> C {
            defer { index += 1 }
            guard index < row.count else {
                throw PostgresError(.decoding, "a row of \(row.count) columns read as more")
            }
            do {
                return try C.decode(postgresText: row[index])
            } catch {
                throw PostgresError(.decoding, "column \(index + 1): \(error.reason)")
            }
        }
        let values = (repeat try next((each Column).self))
        guard index == row.count else { throw PostgresError(.decoding, "a row of \(row.count) columns read as \(index)") }
        return values
    }
}

/// A NotificationResponse: NOTIFY or pg_notify on a channel this connection listens on.
public struct PostgresNotification: Sendable, Equatable {
    public let processID: Int32
    public let channel: String
    public let payload: String
}
