import NIOCore

/// The messages this client sends, written into a buffer.
enum Frontend {
    static let protocolVersion: Int32 = 3 << 16
    static let sslRequestCode: Int32 = 80_877_103

    static func sslRequest(into buffer: inout ByteBuffer) {
        buffer.writeInteger(Int32(8))
        buffer.writeInteger(sslRequestCode)
    }

    static func startup(_ parameters: [(String, String)], into buffer: inout ByteBuffer) throws(PostgresError) {
        try untyped(into: &buffer) { (body: inout ByteBuffer) throws(PostgresError) in
            body.writeInteger(protocolVersion)
            for (name, value) in parameters {
                try body.cString(name)
                try body.cString(value)
            }
            body.writeInteger(UInt8(0))
        }
    }

    /// PasswordMessage: cleartext or MD5.
    static func password(_ text: String, into buffer: inout ByteBuffer) throws(PostgresError) {
        try typed("p", into: &buffer) { (body: inout ByteBuffer) throws(PostgresError) in try body.cString(text) }
    }

    static func saslInitial(mechanism: String, _ data: [UInt8], into buffer: inout ByteBuffer) throws(PostgresError) {
        try typed("p", into: &buffer) { (body: inout ByteBuffer) throws(PostgresError) in
            try body.cString(mechanism)
            body.writeInteger(Int32(data.count))
            body.writeBytes(data)
        }
    }

    static func saslResponse(_ data: [UInt8], into buffer: inout ByteBuffer) throws(PostgresError) {
        try typed("p", into: &buffer) { (body: inout ByteBuffer) throws(PostgresError) in body.writeBytes(data) }
    }

    /// Parse, Bind, Describe (portal), Execute, Sync: one statement, unnamed statement and portal,
    /// parameters and results in text. One Sync per statement, as a transaction pooler needs.
    static func extendedQuery(_ query: PostgresQuery, into buffer: inout ByteBuffer) throws(PostgresError) {
        guard query.binds.count <= Int(Int16.max) else {
            throw PostgresError(.encoding, "\(query.binds.count) parameters; at most \(Int16.max)")
        }
        try typed("P", into: &buffer) { (body: inout ByteBuffer) throws(PostgresError) in
            try body.cString("")
            try body.cString(query.sql)
            body.writeInteger(Int16(query.binds.count))
            for bind in query.binds { body.writeInteger(bind.type) }
        }
        try typed("B", into: &buffer) { (body: inout ByteBuffer) throws(PostgresError) in
            try body.cString("")
            try body.cString("")
            body.writeInteger(Int16(0))  // every parameter in text
            body.writeInteger(Int16(query.binds.count))
            for bind in query.binds {
                if let value = bind.value {
                    guard value.count <= Int(Int32.max) else { throw PostgresError(.encoding, "a parameter too long") }
                    body.writeInteger(Int32(value.count))
                    body.writeBytes(value)
                } else {
                    body.writeInteger(Int32(-1))
                }
            }
            body.writeInteger(Int16(0))  // every result column in text
        }
        try typed("D", into: &buffer) { (body: inout ByteBuffer) throws(PostgresError) in
            body.writeInteger(UInt8(ascii: "P"))
            try body.cString("")
        }
        try typed("E", into: &buffer) { (body: inout ByteBuffer) throws(PostgresError) in
            try body.cString("")
            body.writeInteger(Int32(0))  // all rows
        }
        try typed("S", into: &buffer) { (_: inout ByteBuffer) throws(PostgresError) in }
    }

    static func terminate(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "X"))
        buffer.writeInteger(Int32(4))
    }

    /// A message with a type byte: the length (itself included) is filled in after the body.
    static func typed(
        _ type: Unicode.Scalar, into buffer: inout ByteBuffer, _ body: (inout ByteBuffer) throws(PostgresError) -> Void
    ) throws(PostgresError) {
        buffer.writeInteger(UInt8(ascii: type))
        try untyped(into: &buffer, body)
    }

    static func untyped(into buffer: inout ByteBuffer, _ body: (inout ByteBuffer) throws(PostgresError) -> Void)
        throws(PostgresError)
    {
        let start = buffer.writerIndex
        buffer.writeInteger(Int32(0))
        try body(&buffer)
        let length = buffer.writerIndex - start
        guard length <= Int(Int32.max) else { throw PostgresError(.encoding, "a message too long") }
        buffer.setInteger(Int32(length), at: start)
    }
}

extension ByteBuffer {
    /// A C string: one with a NUL inside would be cut there, so it is refused.
    mutating func cString(_ text: String) throws(PostgresError) {
        guard !text.utf8.contains(0) else { throw PostgresError(.encoding, "a NUL character in a string sent") }
        writeString(text)
        writeInteger(UInt8(0))
    }
}
