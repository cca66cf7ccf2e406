import NIOCore

/// A message from the server (protocol v3), its body parsed.
enum BackendMessage: Sendable, Equatable {
    case authentication(Authentication)
    case backendKeyData(processID: Int32, secretKey: [UInt8])
    case bindComplete
    case closeComplete
    case commandComplete(String)
    case dataRow([[UInt8]?])
    case emptyQueryResponse
    case error([PostgresError.Field: String])
    case noData
    case notice([PostgresError.Field: String])
    case notification(PostgresNotification)
    case parameterDescription
    case parameterStatus(name: String, value: String)
    case parseComplete
    case portalSuspended
    case readyForQuery(UInt8)
    case rowDescription([String])
    /// Not a message: the one byte that answers SSLRequest ('S' or 'N').
    case sslResponse(Bool)

    enum Authentication: Sendable, Equatable {
        case ok
        case cleartextPassword
        case md5Password(salt: [UInt8])
        case sasl(mechanisms: [String])
        case saslContinue([UInt8])
        case saslFinal([UInt8])
        /// Kerberos, SCM, GSSAPI, SSPI, or a code this client does not know.
        case unsupported(Int32)
    }
}

extension BackendMessage {
    /// Parses one message's body. Every count and length in it is checked against what is there.
    static func parse(type: UInt8, body: inout ByteBuffer) throws(PostgresError) -> BackendMessage {
        switch type {
        case UInt8(ascii: "R"): return .authentication(try parseAuthentication(&body))
        case UInt8(ascii: "K"):
            let pid = try body.int32()
            return .backendKeyData(processID: pid, secretKey: body.readBytes(length: body.readableBytes) ?? [])
        case UInt8(ascii: "2"): return .bindComplete
        case UInt8(ascii: "3"): return .closeComplete
        case UInt8(ascii: "C"): return .commandComplete(try body.cString())
        case UInt8(ascii: "D"): return .dataRow(try parseDataRow(&body))
        case UInt8(ascii: "I"): return .emptyQueryResponse
        case UInt8(ascii: "E"): return .error(try parseFields(&body))
        case UInt8(ascii: "n"): return .noData
        case UInt8(ascii: "N"): return .notice(try parseFields(&body))
        case UInt8(ascii: "A"):
            let pid = try body.int32()
            let channel = try body.cString()
            return .notification(PostgresNotification(processID: pid, channel: channel, payload: try body.cString()))
        case UInt8(ascii: "t"): return .parameterDescription
        case UInt8(ascii: "S"):
            let name = try body.cString()
            return .parameterStatus(name: name, value: try body.cString())
        case UInt8(ascii: "1"): return .parseComplete
        case UInt8(ascii: "s"): return .portalSuspended
        case UInt8(ascii: "Z"):
            guard let status = body.readInteger(as: UInt8.self) else { throw .short("ReadyForQuery") }
            return .readyForQuery(status)
        case UInt8(ascii: "T"): return .rowDescription(try parseRowDescription(&body))
        default:
            // COPY, NegotiateProtocolVersion, FunctionCallResponse: nothing this client asks for.
            throw PostgresError(.protocolViolation, "unexpected message type \(type) from the server")
        }
    }

    static func parseAuthentication(_ body: inout ByteBuffer) throws(PostgresError) -> Authentication {
        switch try body.int32() {
        case 0: return .ok
        case 3: return .cleartextPassword
        case 5:
            guard let salt = body.readBytes(length: 4) else { throw .short("AuthenticationMD5Password") }
            return .md5Password(salt: salt)
        case 10:
            var mechanisms: [String] = []
            while true {
                let name = try body.cString()
                if name.isEmpty { break }
                mechanisms.append(name)
            }
            return .sasl(mechanisms: mechanisms)
        case 11: return .saslContinue(body.readBytes(length: body.readableBytes) ?? [])
        case 12: return .saslFinal(body.readBytes(length: body.readableBytes) ?? [])
        case let other: return .unsupported(other)
        }
    }

    static func parseDataRow(_ body: inout ByteBuffer) throws(PostgresError) -> [[UInt8]?] {
        let count = try body.int16()
        guard count >= 0 else { throw PostgresError(.protocolViolation, "DataRow with \(count) columns") }
        var columns: [[UInt8]?] = []
        columns.reserveCapacity(Int(count))
        for _ in 0..<count {
            let length = try body.int32()
            if length == -1 {
                columns.append(nil)
                continue
            }
            guard length >= 0, let bytes = body.readBytes(length: Int(length)) else {
                throw PostgresError(.protocolViolation, "DataRow column length \(length) past the message's end")
            }
            columns.append(bytes)
        }
        return columns
    }

    static func parseRowDescription(_ body: inout ByteBuffer) throws(PostgresError) -> [String] {
        let count = try body.int16()
        guard count >= 0 else { throw PostgresError(.protocolViolation, "RowDescription with \(count) columns") }
        var names: [String] = []
        for _ in 0..<count {
            names.append(try body.cString())
            // Table OID, attribute number, type OID, type size, type modifier, format: 18 bytes.
            guard body.readSlice(length: 18) != nil else { throw .short("RowDescription") }
        }
        return names
    }

    static func parseFields(_ body: inout ByteBuffer) throws(PostgresError) -> [PostgresError.Field: String] {
        var fields: [PostgresError.Field: String] = [:]
        while true {
            guard let letter = body.readInteger(as: UInt8.self) else { throw .short("ErrorResponse") }
            if letter == 0 { return fields }
            fields[PostgresError.Field(letter)] = try body.cString()
        }
    }
}

extension BackendMessage {
    /// Roughly the memory it holds, for the inbox's byte budget.
    var size: Int {
        switch self {
        case .dataRow(let columns): columns.reduce(16) { $0 + 8 + ($1?.count ?? 0) }
        case .commandComplete(let tag): 16 + tag.utf8.count
        case .error(let fields), .notice(let fields): fields.values.reduce(16) { $0 + 8 + $1.utf8.count }
        case .rowDescription(let names): names.reduce(16) { $0 + 8 + $1.utf8.count }
        case .notification(let note): 24 + note.channel.utf8.count + note.payload.utf8.count
        case .parameterStatus(let name, let value): 16 + name.utf8.count + value.utf8.count
        case .backendKeyData(_, let key): 16 + key.count
        case .authentication(.sasl(let mechanisms)): mechanisms.reduce(16) { $0 + 8 + $1.utf8.count }
        case .authentication(.saslContinue(let data)), .authentication(.saslFinal(let data)): 16 + data.count
        default: 16
        }
    }
}

extension PostgresError {
    static func short(_ message: String) -> PostgresError {
        PostgresError(.protocolViolation, "\(message) ends early")
    }
}

extension ByteBuffer {
    mutating func int32() throws(PostgresError) -> Int32 {
        guard let value = readInteger(as: Int32.self) else { throw .short("a message") }
        return value
    }

    mutating func int16() throws(PostgresError) -> Int16 {
        guard let value = readInteger(as: Int16.self) else { throw .short("a message") }
        return value
    }

    /// A NUL-terminated UTF-8 string.
    mutating func cString() throws(PostgresError) -> String {
        guard let end = readableBytesView.firstIndex(of: 0) else { throw .short("a string") }
        let length = end - readableBytesView.startIndex
        let bytes = readBytes(length: length) ?? []
        moveReaderIndex(forwardBy: 1)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw PostgresError(.protocolViolation, "a string from the server is not UTF-8")
        }
        return text
    }
}
