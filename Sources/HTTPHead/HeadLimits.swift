/// What one head may cost its reader: each listener passes its own. A head
/// past a limit is refused before any of it is noted further (431, or 414
/// for a request line).
public struct HeadLimits: Sendable, Equatable {
    /// The most bytes of a head, its start line and empty line included.
    public var bytes: Int
    /// The most header lines.
    public var fields: Int
    /// The most bytes of one line, its CRLF included.
    public var line: Int

    public init(bytes: Int, fields: Int, line: Int) {
        self.bytes = bytes
        self.fields = fields
        self.line = line
    }
}
