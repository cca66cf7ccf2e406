import CSystemd
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// A swift-log handler writing structured entries with sd_journal_sendv(3):
/// MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, CODE_FILE/LINE/FUNC, MESSAGE_ID for
/// known messages, and each metadata key as a field: `session` becomes
/// TOKEND_SESSION, `peer.uid` TOKEND_PEER_UID.
public struct JournalLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    let identifier: String
    let fieldPrefix: String
    /// Constant message → 128-bit MESSAGE_ID (32 hex digits).
    let messageIDs: [String: String]

    public init(identifier: String, fieldPrefix: String, messageIDs: [String: String]) {
        self.identifier = identifier
        self.fieldPrefix = fieldPrefix
        self.messageIDs = messageIDs
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let text = event.message.description
        var fields = [
            "MESSAGE=\(text)",
            "PRIORITY=\(Self.priority(event.level))",
            "SYSLOG_IDENTIFIER=\(identifier)",
            "CODE_FILE=\(event.file)",
            "CODE_LINE=\(event.line)",
            "CODE_FUNC=\(event.function)",
        ]
        if let id = messageIDs[text] { fields.append("MESSAGE_ID=\(id)") }
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        for (key, value) in merged {
            fields.append("\(fieldName(key))=\(value)")
        }
        Self.send(fields)
    }

    /// `peer.uid` → TOKEND_PEER_UID: journal field names are upper-case
    /// letters, digits and underscores.
    func fieldName(_ key: String) -> String {
        let cleaned = key.uppercased().map { $0.isLetter || $0.isNumber ? $0 : "_" }
        return fieldPrefix + String(cleaned)
    }

    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    static func send(_ fields: [String]) {
        let buffers = fields.map { Array($0.utf8) }
        var pointers: [UnsafeMutablePointer<UInt8>] = []
        defer { pointers.forEach { $0.deallocate() } }
        var vectors: [iovec] = []
        for bytes in buffers {
            let pointer = UnsafeMutablePointer<UInt8>.allocate(capacity: max(bytes.count, 1))
            pointer.initialize(from: bytes, count: bytes.count)
            pointers.append(pointer)
            vectors.append(iovec(iov_base: UnsafeMutableRawPointer(pointer), iov_len: bytes.count))
        }
        _ = vectors.withUnsafeBufferPointer { sd_journal_sendv($0.baseAddress, CInt($0.count)) }
    }
}

extension JournalLogHandler {
    /// Whether to log to the journal for `log-target`: "auto" means under
    /// systemd (JOURNAL_STREAM or INVOCATION_ID set), else standard error.
    public static func isWanted(target: String, environment: [String: String]) -> Bool {
        switch target {
        case "journal": return true
        case "console": return false
        default: return environment["JOURNAL_STREAM"] != nil || environment["INVOCATION_ID"] != nil
        }
    }
}
