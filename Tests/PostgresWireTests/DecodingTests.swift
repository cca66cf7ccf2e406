import Testing

@testable import PostgresWire

@Suite struct TextDecodingTests {
    static func text(_ string: String) -> [UInt8] { Array(string.utf8) }

    @Test func bools() throws {
        #expect(try Bool.decode(postgresText: Self.text("t")) == true)
        #expect(try Bool.decode(postgresText: Self.text("f")) == false)
        #expect(throws: PostgresError.self) { try Bool.decode(postgresText: Self.text("true")) }
        #expect(throws: PostgresError.self) { try Bool.decode(postgresText: nil) }
    }

    @Test func nullOnlyIntoAnOptional() throws {
        #expect(try Int32?.decode(postgresText: nil) == nil)
        #expect(try Int32?.decode(postgresText: Self.text("5432")) == 5432)
        #expect(throws: PostgresError.self) { try Int64.decode(postgresText: nil) }
        #expect(throws: PostgresError.self) { try String.decode(postgresText: nil) }
    }

    @Test func numbers() throws {
        #expect(try Int64.decode(postgresText: Self.text("-9223372036854775808")) == .min)
        #expect(throws: PostgresError.self) { try Int32.decode(postgresText: Self.text("2147483648")) }
        #expect(throws: PostgresError.self) { try Int.decode(postgresText: Self.text(" 1")) }
        #expect(try Double.decode(postgresText: Self.text("1733150000.123456")) == 1_733_150_000.123456)
        #expect(try Double.decode(postgresText: Self.text("1e-05")) == 0.00001)
        #expect(try Double.decode(postgresText: Self.text("-Infinity")) == -.infinity)
        #expect(try Double.decode(postgresText: Self.text("NaN")).isNaN)
        #expect(throws: PostgresError.self) { try Double.decode(postgresText: Self.text("inf")) }
    }

    @Test func byteaHex() throws {
        #expect(try PostgresBytes.decode(postgresText: Self.text(#"\x00ff10Ab"#)).bytes == [0, 0xff, 0x10, 0xab])
        #expect(try PostgresBytes.decode(postgresText: Self.text(#"\x"#)).bytes == [])
        for bad in [#"\x0"#, #"\xzz"#, "00ff", #"\001"#] {
            #expect(throws: PostgresError.self) { try PostgresBytes.decode(postgresText: Self.text(bad)) }
        }
    }

    @Test func strings() throws {
        #expect(try String.decode(postgresText: Self.text("é ✓")) == "é ✓")
        #expect(throws: PostgresError.self) { try String.decode(postgresText: [0xff, 0xfe]) }
    }

    @Test func rowsAsTuples() throws {
        let rows = PostgresRows(
            columns: ["a", "b", "c"], rows: [[Self.text("7"), nil, Self.text("t")], [Self.text("8"), Self.text("x"), Self.text("f")]],
            commandTag: "SELECT 2")
        let decoded = try rows.decode((Int64, String?, Bool).self)
        #expect(decoded.count == 2)
        #expect(decoded[0].0 == 7 && decoded[0].1 == nil && decoded[0].2)
        #expect(decoded[1].0 == 8 && decoded[1].1 == "x" && !decoded[1].2)
        // The wrong number of columns, or NULL where none may be, is an error, not a guess.
        #expect(throws: PostgresError.self) { try rows.decode((Int64, String?).self) }
        #expect(throws: PostgresError.self) { try rows.decode((Int64, String, Bool).self) }
        let single = PostgresRows(columns: ["n"], rows: [[Self.text("1")]], commandTag: "SELECT 1")
        #expect(try single.decode(Int.self) == [1])
        #expect(try single.decode(Int?.self) == [1])
    }
}

@Suite struct InboxTests {
    @Test func messagesBeforeAFailureAreReadFirst() async throws {
        let inbox = Inbox()
        _ = inbox.deliver(.error([.sqlState: "57P01"]))
        inbox.fail(PostgresError(.connectionClosed, "closed"))
        inbox.fail(PostgresError(.connectionError, "later"))
        #expect(try await inbox.receive() == .error([.sqlState: "57P01"]))
        let error = await #expect(throws: PostgresError.self) { try await inbox.receive() }
        #expect(error?.code == .connectionClosed)
    }

    @Test func aFloodingServerIsCut() {
        let inbox = Inbox(limit: 3)
        #expect((0..<3).allSatisfy { _ in inbox.deliver(.noData) == nil })
        #expect(inbox.deliver(.noData)?.code == .protocolViolation)
        #expect(inbox.takeUnread().count == 3)
    }

    @Test func unreadBytesAreBounded() async throws {
        let inbox = Inbox(byteLimit: 1000)
        let row = BackendMessage.dataRow([Array(repeating: 1, count: 600)])
        #expect(inbox.deliver(row) == nil)
        let refusal = inbox.deliver(row)
        #expect(refusal?.code == .protocolViolation && refusal?.reason.contains("1000 bytes") == true)
        // What is read is no longer counted.
        #expect(try await inbox.receive() == row)
        #expect(inbox.deliver(row) == nil)
    }

    @Test func betweenStatementsOnlyAnErrorIsTaken() {
        let inbox = Inbox()
        #expect(inbox.deliver(.readyForQuery(UInt8(ascii: "I"))) == nil)
        let refusal = inbox.deliver(.commandComplete("SELECT 1"))
        #expect(refusal?.reason == "the server sent CommandComplete while no statement was running")
        #expect(inbox.deliver(.error([.sqlState: "57P01"])) == nil)
        inbox.expectAnswers()
        #expect(inbox.deliver(.commandComplete("SELECT 1")) == nil)
        #expect(inbox.takeUnread() == [.readyForQuery(UInt8(ascii: "I")), .error([.sqlState: "57P01"]), .commandComplete("SELECT 1")])
    }

    @Test func everyWaiterGetsATurnOnceTheHolderLeaves() async {
        let turns = Turnstile()
        let order = Order()
        await turns.enter()
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<3 {
                group.addTask {
                    await turns.enter()
                    await order.add(index)
                    turns.leave()
                }
            }
            turns.leave()
        }
        #expect(await order.seen.sorted() == [0, 1, 2])
    }

    actor Order {
        var seen: [Int] = []
        func add(_ index: Int) { seen.append(index) }
    }
}
