import HTTPHead

/// What the proxy knows of MCP's streamable HTTP (spec 2025-06-18, Transports): an answer may be an event
/// stream, relayed as it comes; a client that speaks it reads the proxy's own answers as JSON-RPC errors.
/// Everything else (Mcp-Session-Id, MCP-Protocol-Version, GET streams, DELETE) passes as any request does.
extension ResponseHead {
    /// The answer is an event stream (`text/event-stream`, with parameters or not, in any case).
    var isEventStream: Bool {
        fields.named("content-type").first.map(MediaType.isEventStream) ?? false
    }
}

extension RequestHead {
    /// The client speaks MCP's streamable HTTP: it accepts an event stream (every POST and GET of the
    /// transport says so) or names an MCP session or protocol version. The proxy's own answers go to it
    /// as JSON-RPC errors, which MCP clients show to their user; a status alone they report as "an error".
    var speaksMCP: Bool {
        fields.named("accept").contains { $0.split(separator: ",").contains { MediaType.isEventStream(String($0)) } }
            || !fields.named("mcp-session-id").isEmpty || !fields.named("mcp-protocol-version").isEmpty
    }
}

enum MediaType {
    /// `value` names text/event-stream (its type and subtype, without case; parameters after them).
    static func isEventStream(_ value: String) -> Bool {
        value.prefix { $0 != ";" }.filter { $0 != " " && $0 != "\t" }.lowercased() == "text/event-stream"
    }
}
