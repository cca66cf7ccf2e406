/// The values the proxy puts in headers itself.
enum Headers {
    /// A value a header may carry (RFC 9110 §5.5): no control character but tab, so no CR or LF that
    /// would end the header and begin another. The proxy's own values (tokend's token and cookies) are
    /// checked once, when tokend gives them; the rest came through the proxy's parser (`Wire`).
    static func isFieldValue(_ value: String) -> Bool {
        value.utf8.allSatisfy(Wire.isValueByte)
    }
}
