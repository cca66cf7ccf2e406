import Testing
import Varlink
@testable import NativeMessaging

@Suite struct NativeMessagingTests {
    @Test func framesCarryANativeLength() {
        let frame = NativeMessaging.frame(Array(#"{"a":1}"#.utf8))
        #expect(frame.count == 4 + 7)
        #expect(NativeMessaging.length(Array(frame[0..<4])) == 7)
        #expect(Array(frame[0..<4]) == [7, 0, 0, 0])  // x86-64 and arm64 Linux are little-endian
    }

    @Test func smallMessagesStayWhole() {
        let message: JSONObject = ["id": 1, "parameters": ["changes": [1, 2, 3]]]
        #expect(NativeMessaging.split(message) == [JSONWriter.bytes(.object(message))])
    }

    @Test func largeSnapshotsAreSplitUnderTheLimit() throws {
        let cookie: JSONValue = ["name": "n", "value": .string(String(repeating: "v", count: 3000))]
        let message: JSONObject = [
            "id": 7, "continues": true,
            "parameters": ["event": "cookies", "snapshot": true, "changes": .array(Array(repeating: cookie, count: 1000))],
        ]
        let pieces = NativeMessaging.split(message)
        #expect(pieces.count >= 3)
        #expect(pieces.allSatisfy { $0.count <= NativeMessaging.maximumOutgoing })
        var changes = 0
        for (index, piece) in pieces.enumerated() {
            let object = try #require(try JSONParser.parse(piece).objectValue)
            #expect(object["id"] == 7 && object["continues"] == true)
            #expect(object["parameters"]?["event"] == "cookies" && object["parameters"]?["snapshot"] == true)
            #expect((object["partial"] == true) == (index < pieces.count - 1))
            changes += object["parameters"]?["changes"]?.arrayValue?.count ?? 0
        }
        #expect(changes == 1000)
    }
}
