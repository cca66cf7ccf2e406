/// What a header field is to a reader and to a proxy, from its name (case-insensitive).
public enum FieldKind: UInt8, Sendable {
    case other, host, contentLength, transferEncoding, connection, cookie, authorization, expect, origin, secFetchSite, setCookie
    /// RFC 9110 §7.6.1's hop-by-hop fields besides Connection, and the proxy fields of old.
    case hopByHop

    /// The kind of the name at `name` in `p`.
    static func of(_ p: UnsafeRawBufferPointer, _ name: Range<Int>) -> FieldKind {
        func named(_ lowercase: StaticString) -> Bool { HeadSyntax.equalsLowercase(p, name, lowercase) }
        switch name.count {
        case 2: return named("te") ? .hopByHop : .other
        case 4: return named("host") ? .host : .other
        case 6:
            if named("cookie") { return .cookie }
            if named("origin") { return .origin }
            return named("expect") ? .expect : .other
        case 7: return named("trailer") || named("upgrade") ? .hopByHop : .other
        case 10:
            if named("connection") { return .connection }
            if named("set-cookie") { return .setCookie }
            return named("keep-alive") ? .hopByHop : .other
        case 13: return named("authorization") ? .authorization : .other
        case 14:
            if named("content-length") { return .contentLength }
            return named("sec-fetch-site") ? .secFetchSite : .other
        case 16: return named("proxy-connection") ? .hopByHop : .other
        case 17: return named("transfer-encoding") ? .transferEncoding : .other
        case 18: return named("proxy-authenticate") ? .hopByHop : .other
        case 19: return named("proxy-authorization") ? .hopByHop : .other
        default: return .other
        }
    }
}

/// One header line of a head: where it is in the head's bytes, its CRLF included.
public struct Field: Sendable {
    public let line: Range<Int>
    public let name: Range<Int>
    /// Without the whitespace around it.
    public let value: Range<Int>
    public let kind: FieldKind
}
