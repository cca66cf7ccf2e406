import NIOCore
import Testing
@testable import Varlink
@testable import VarlinkNIO

@Suite struct FramingTests {
    func frames(_ chunks: [String], limit: Int = 64) throws -> [String] {
        var decoder = NULFrameDecoder(maximumFrameLength: limit)
        var buffer = ByteBuffer()
        var out: [String] = []
        for chunk in chunks {
            buffer.writeBytes(Array(chunk.utf8))
            while let frame = try decoder.nextFrame(&buffer) { out.append(String(buffer: frame)) }
        }
        return out
    }

    @Test func splitFrameIsReassembled() throws {
        #expect(try frames(["{\"me", "thod\":", "\"a.b\"}\0"]) == ["{\"method\":\"a.b\"}"])
    }

    @Test func coalescedFramesAreSeparated() throws {
        #expect(try frames(["one\0two\0thr", "ee\0"]) == ["one", "two", "three"])
    }

    @Test func emptyFrameIsAFrame() throws {
        #expect(try frames(["\0x\0"]) == ["", "x"])
    }

    @Test func oversizedFrameWithoutTerminatorIsRefused() {
        #expect(throws: FrameTooLarge(limit: 8)) { try frames(["0123456789"], limit: 8) }
    }

    @Test func oversizedFrameWithTerminatorIsRefused() {
        #expect(throws: FrameTooLarge(limit: 8)) { try frames(["0123456789\0"], limit: 8) }
    }

    @Test func frameAtTheLimitPasses() throws {
        #expect(try frames(["01234567\0"], limit: 8) == ["01234567"])
    }

    @Test func callsDecodeAndMalformedOnesAreRefused() throws {
        let call = try VarlinkCall(frame: Array(#"{"method":"a.B","parameters":{"x":1},"more":true}"#.utf8))
        #expect(call == VarlinkCall(method: "a.B", parameters: ["x": 1], more: true))
        for bad in [#"[]"#, #"{"parameters":{}}"#, #"{"method":"a.B","parameters":[]}"#, #"{"method":"a.B","more":1}"#, "{"] {
            #expect(throws: VarlinkProtocolError.self) { try VarlinkCall(frame: Array(bad.utf8)) }
        }
    }

    @Test func repliesEncodeWithTerminator() throws {
        var bytes: [UInt8] = []
        VarlinkReply(parameters: ["a": 1], continues: true).encode(into: &bytes)
        #expect(bytes.last == 0)
        #expect(try VarlinkReply(frame: bytes.dropLast()) == VarlinkReply(parameters: ["a": 1], continues: true))
    }
}
