import Testing
@testable import Varlink

@Suite struct JSONTests {
    @Test func roundTripsValues() throws {
        let text = #"{"a":[1,-2.5,true,false,null],"b":"x\"y\\z\n\u00e9\ud83d\ude00","c":{}}"#
        let value = try JSONParser.parse(text)
        #expect(value["a"] == [1, -2.5, true, false, nil])
        #expect(value["b"] == .string("x\"y\\z\né😀"))
        #expect(try JSONParser.parse(JSONWriter.string(value)) == value)
    }

    @Test func keepsIntegersApartFromFloats() throws {
        #expect(try JSONParser.parse("1") == .int(1))
        #expect(try JSONParser.parse("1.0") == .double(1.0))
        #expect(try JSONParser.parse("1e2") == .double(100))
        #expect(JSONWriter.string(.double(3.141592653589793)) == "3.141592653589793")
    }

    @Test(arguments: [
        "", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", "tru", "\"\\x\"", "\"\u{01}\"", "{} x", "[1 2]",
        "\"\\ud800\"", "{1:2}", "nul",
    ])
    func rejectsMalformedInput(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONParser.parse(text) }
    }

    @Test func rejectsInvalidUTF8() {
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xFF, 0x22]) }
    }

    @Test func limitsNestingDepth() {
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        #expect(throws: JSONParseError.self) { try JSONParser.parse(deep) }
        let fine = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(throws: Never.self) { try JSONParser.parse(fine) }
    }

    @Test func escapesControlCharacters() {
        #expect(JSONWriter.string(.string("a\u{01}\t")) == #""a\u0001\t""#)
    }
}
