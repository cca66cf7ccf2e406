import Varlink

/// The WebExtension native messaging wire format: each message is a 32-bit
/// length in native byte order followed by that many bytes of UTF-8 JSON.
/// Browsers refuse messages over 1 MiB from a host, so larger replies are
/// split (see `split`).
public enum NativeMessaging {
    /// The most a host may send in one message.
    public static let maximumOutgoing = 1024 * 1024
    /// The most this host accepts in one message (the browser allows 64 MiB).
    public static let maximumIncoming = 1024 * 1024

    /// One framed message.
    public static func frame(_ json: [UInt8]) -> [UInt8] {
        withUnsafeBytes(of: UInt32(json.count)) { Array($0) } + json
    }

    /// The length prefix of a frame (native byte order).
    public static func length(_ header: [UInt8]) -> Int {
        precondition(header.count == 4)
        return Int(header.withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) })
    }

    /// `message` as one or more messages of at most `limit` bytes: when it is
    /// too large, its `parameters`' largest array (the cookies of a snapshot)
    /// is spread over several messages, each marked `"partial": true` but the
    /// last, every one carrying the other members unchanged.
    public static func split(_ message: JSONObject, limit: Int = maximumOutgoing) -> [[UInt8]] {
        let whole = JSONWriter.bytes(.object(message))
        guard whole.count > limit, let parameters = message["parameters"]?.objectValue,
            let (key, elements) = parameters.compactMap({ k, v in v.arrayValue.map { (k, $0) } })
                .max(by: { $0.1.count < $1.1.count }),
            elements.count > 1
        else { return [whole] }
        var pieces: [[UInt8]] = []
        var chunk: [JSONValue] = []
        var chunkSize = 0
        // Room for the rest of the message plus the partial marker.
        var emptied = parameters
        emptied[key] = .array([])
        let overhead = JSONWriter.bytes(.object(message.merging(["parameters": .object(emptied), "partial": true]) { _, b in b })).count
        func emit(last: Bool) {
            var parts = parameters
            parts[key] = .array(chunk)
            var piece = message
            piece["parameters"] = .object(parts)
            if !last { piece["partial"] = true }
            pieces.append(JSONWriter.bytes(.object(piece)))
            chunk = []
            chunkSize = 0
        }
        for element in elements {
            let size = JSONWriter.bytes(element).count + 1
            if !chunk.isEmpty && overhead + chunkSize + size > limit { emit(last: false) }
            chunk.append(element)
            chunkSize += size
        }
        emit(last: true)
        return pieces
    }
}
