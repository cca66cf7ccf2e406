import NIOCore
import Testing

@testable import PostgresWire

@Suite struct BackendMessageTests {
    /// `type`, a length, `body`: one backend message's bytes.
    static func message(_ type: Character, _ body: [UInt8]) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(type.asciiValue!)
        buffer.writeInteger(Int32(body.count + 4))
        buffer.writeBytes(body)
        return buffer
    }

    static func decode(_ buffer: ByteBuffer) throws -> [BackendMessage] {
        var decoder = BackendDecoder(awaitingSSLResponse: false)
        var buffer = buffer
        var out: [BackendMessage] = []
        while let message = try decoder.next(&buffer) { out.append(message) }
        return out
    }

    @Test func readyForQueryAndCommandComplete() throws {
        var buffer = Self.message("C", Array("SELECT 1\0".utf8))
        var ready = Self.message("Z", [UInt8(ascii: "I")])
        buffer.writeBuffer(&ready)
        #expect(try Self.decode(buffer) == [.commandComplete("SELECT 1"), .readyForQuery(UInt8(ascii: "I"))])
    }

    @Test func aMessageSplitAcrossReadsWaitsForItsEnd() throws {
        let whole = Self.message("C", Array("INSERT 0 1\0".utf8))
        var decoder = BackendDecoder(awaitingSSLResponse: false)
        var part = whole.getSlice(at: 0, length: 7)!
        #expect(try decoder.next(&part) == nil)
        var buffer = whole
        #expect(try decoder.next(&buffer) == .commandComplete("INSERT 0 1"))
    }

    @Test func dataRowWithNull() throws {
        var body = ByteBuffer()
        body.writeInteger(Int16(3))
        body.writeInteger(Int32(2))
        body.writeString("42")
        body.writeInteger(Int32(-1))
        body.writeInteger(Int32(0))
        #expect(try Self.decode(Self.message("D", Array(body.readableBytesView))) == [.dataRow([Array("42".utf8), nil, []])])
    }

    @Test(arguments: [Int32(-2), Int32(1000), Int32.max])
    func dataRowColumnLengthPastTheEndIsRefused(length: Int32) {
        var body = ByteBuffer()
        body.writeInteger(Int16(1))
        body.writeInteger(length)
        body.writeString("ab")
        #expect(throws: PostgresError.self) { try Self.decode(Self.message("D", Array(body.readableBytesView))) }
    }

    @Test func negativeColumnCountIsRefused() {
        var body = ByteBuffer()
        body.writeInteger(Int16(-1))
        #expect(throws: PostgresError.self) { try Self.decode(Self.message("D", Array(body.readableBytesView))) }
    }

    @Test(arguments: [Int32(3), Int32(-1), Int32.min, Int32.max, Int32(16 << 20 + 5)])
    func hostileMessageLengthsAreRefusedBeforeBuffering(length: Int32) {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt8(ascii: "D"))
        buffer.writeInteger(length)
        #expect(throws: PostgresError.self) { try Self.decode(buffer) }
    }

    @Test func theLimitIsTheDecodersOwn() throws {
        var decoder = BackendDecoder(awaitingSSLResponse: false, limit: 8)
        var buffer = Self.message("C", Array("SELECT 10\0".utf8))
        #expect(throws: PostgresError.self) { try decoder.next(&buffer) }
    }

    @Test func shortBodiesAreRefused() {
        // A string without its NUL, a ReadyForQuery without status, an authentication without a code.
        for (type, body) in [("C", Array("SELECT".utf8)), ("Z", []), ("R", [0, 0]), ("R", [0, 0, 0, 5, 1, 2])] as [(Character, [UInt8])] {
            #expect(throws: PostgresError.self) { try Self.decode(Self.message(type, body)) }
        }
    }

    @Test func unknownTypeIsRefused() {
        #expect(throws: PostgresError.self) { try Self.decode(Self.message("G", [0, 0, 0])) }
    }

    @Test func errorResponseFields() throws {
        let body = Array("SERROR\0VERROR\0C42501\0Mpermission denied for table tokend_shared\0\0".utf8)
        let decoded = try Self.decode(Self.message("E", body))
        guard case .error(let fields) = decoded.first else {
            Issue.record("not an error: \(decoded)")
            return
        }
        let error = PostgresError.server(fields)
        #expect(error.code == .server && error.sqlState == "42501")
        #expect(error.serverInfo?[.message] == "permission denied for table tokend_shared")
        #expect(error.description == "permission denied for table tokend_shared (SQLSTATE 42501)")
    }

    @Test func authenticationRequests() throws {
        #expect(try Self.decode(Self.message("R", [0, 0, 0, 0])) == [.authentication(.ok)])
        #expect(try Self.decode(Self.message("R", [0, 0, 0, 5, 1, 2, 3, 4])) == [.authentication(.md5Password(salt: [1, 2, 3, 4]))])
        let sasl = [0, 0, 0, 10] + Array("SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0".utf8)
        #expect(try Self.decode(Self.message("R", sasl)) == [.authentication(.sasl(mechanisms: ["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]))])
        #expect(try Self.decode(Self.message("R", [0, 0, 0, 7])) == [.authentication(.unsupported(7))])
    }

    @Test func notification() throws {
        let body: [UInt8] = [0, 0, 0, 9] + Array("tokend\u{0}5 default\u{0}".utf8)
        #expect(try Self.decode(Self.message("A", body)) == [.notification(PostgresNotification(processID: 9, channel: "tokend", payload: "5 default"))])
    }

    @Test func sslAnswerAndNothingAfterIt() throws {
        var decoder = BackendDecoder(awaitingSSLResponse: true)
        var yes = ByteBuffer(bytes: [UInt8(ascii: "S")])
        #expect(try decoder.next(&yes) == .sslResponse(true))
        var no = ByteBuffer(bytes: [UInt8(ascii: "N")])
        var plain = BackendDecoder(awaitingSSLResponse: true)
        #expect(try plain.next(&no) == .sslResponse(false))
        // Bytes sent before the handshake would be read as if TLS had protected them.
        var injected = ByteBuffer(bytes: [UInt8(ascii: "S"), UInt8(ascii: "Z"), 0, 0, 0, 5, UInt8(ascii: "I")])
        var fresh = BackendDecoder(awaitingSSLResponse: true)
        #expect(throws: PostgresError.self) { try fresh.next(&injected) }
    }
}

@Suite struct FrontendMessageTests {
    @Test func extendedQueryIsParseBindDescribeExecuteSync() throws {
        let session = "default"
        let query: PostgresQuery = "SELECT version FROM t WHERE session = \(session) AND n = \(Int64(7)) AND x IS \(String?.none)"
        #expect(query.sql == "SELECT version FROM t WHERE session = $1 AND n = $2 AND x IS $3")
        var buffer = ByteBuffer()
        try Frontend.extendedQuery(query, into: &buffer)
        var types: [UInt8] = []
        while buffer.readableBytes > 0 {
            let type = buffer.readInteger(as: UInt8.self)!
            let length = buffer.readInteger(as: Int32.self)!
            types.append(type)
            var body = buffer.readSlice(length: Int(length) - 4)!
            if type == UInt8(ascii: "P") {
                #expect(try body.cString() == "")
                #expect(try body.cString() == query.sql)
                #expect(body.readInteger(as: Int16.self) == 3)
                #expect([body.readInteger(as: UInt32.self), body.readInteger(as: UInt32.self), body.readInteger(as: UInt32.self)] == [25, 20, 25])
            }
            if type == UInt8(ascii: "B") {
                #expect(try body.cString() == "" && body.cString() == "")
                #expect(body.readInteger(as: Int16.self) == 0)
                #expect(body.readInteger(as: Int16.self) == 3)
                #expect(body.readInteger(as: Int32.self) == 7 && body.readString(length: 7) == "default")
                #expect(body.readInteger(as: Int32.self) == 1 && body.readString(length: 1) == "7")
                #expect(body.readInteger(as: Int32.self) == -1)
                #expect(body.readInteger(as: Int16.self) == 0)
            }
            if type == UInt8(ascii: "S") { #expect(body.readableBytes == 0) }
        }
        #expect(String(decoding: types, as: UTF8.self) == "PBDES")
    }

    @Test func aNulInTheStatementIsRefused() {
        var buffer = ByteBuffer()
        #expect(throws: PostgresError.self) { try Frontend.extendedQuery(PostgresQuery(unsafeSQL: "SELECT 1\0; DROP"), into: &buffer) }
    }

    @Test func startupAndSSLRequest() throws {
        var buffer = ByteBuffer()
        try Frontend.startup([("user", "tokend"), ("database", "db")], into: &buffer)
        #expect(buffer.readInteger(as: Int32.self) == Int32(buffer.readableBytes + 4))
        #expect(buffer.readInteger(as: Int32.self) == 196_608)
        #expect(buffer.readString(length: buffer.readableBytes) == "user\0tokend\0database\0db\0\0")
        var ssl = ByteBuffer()
        Frontend.sslRequest(into: &ssl)
        #expect(Array(ssl.readableBytesView) == [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
    }

    @Test func parameterTexts() {
        #expect(Double.infinity.postgresText == "Infinity" && (-Double.infinity).postgresText == "-Infinity")
        #expect(Double.nan.postgresText == "NaN" && 1.5.postgresText == "1.5")
        #expect(true.postgresText == "t" && Int32(-3).postgresText == "-3")
        #expect(["a", "b\"c", "d\\e"].postgresText == #"{"a","b\"c","d\\e"}"#)
        #expect(PostgresBytes([0, 0xab, 0x10]).postgresText == #"\x00ab10"#)
        #expect(PostgresConnection.identifier("to\"kend") == #""to""kend""#)
    }
}
