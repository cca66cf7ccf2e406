// libFuzzer target: the Varlink frame splitter, message parser, JSON
// round trip and call dispatch. Built by `make fuzz` into the Varlink module.
import Dispatch

let fuzzInterface = try! VarlinkInterface(description: """
    interface org.example.fuzz
    type Item (name: string, count: ?int)
    method Echo(text: string, items: ?[]Item, flag: ?bool) -> (text: string)
    method Stream(count: int) -> (index: int)
    error Bad (reason: string)
    """)

let fuzzService = VarlinkService(
    info: ServiceInfo(vendor: "fuzz", product: "fuzz", version: "0", url: ""),
    implementations: [
        VarlinkImplementation(
            interface: fuzzInterface,
            methods: [
                "Echo": .call { parameters, _ in
                    _ = try parameters.optionalBool("flag")
                    if case .array(let items)? = parameters["items"] {
                        for item in items { _ = item.objectValue?["name"]?.stringValue }
                    }
                    return ["text": .string(try parameters.string("text"))]
                },
                "Stream": .stream { parameters, _, replies in
                    let count = min(max(try parameters.optionalInt("count") ?? 0, 0), 3)
                    for index in 0..<count {
                        try await replies.yield(["index": .int(index)], continues: index < count - 1)
                    }
                },
            ])
    ])

@_cdecl("LLVMFuzzerTestOneInput")
public func varlinkFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    var offset = 0
    var frames: [[UInt8]] = []
    while offset <= bytes.count {
        let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
        switch NULFraming.scan(rest, scanned: 0, limit: 4096) {
        case .frame(let length):
            frames.append(Array(rest[..<length]))
            offset += length + 1
        case .incomplete, .tooLarge:
            offset = bytes.count + 1
        }
    }
    for frame in frames {
        if let value = try? JSONParser.parse(frame) {
            // Whatever we parse, we write back as JSON we can parse again.
            guard (try? JSONParser.parse(JSONWriter.bytes(value))) != nil else { fatalError("round trip failed") }
        }
        guard let call = try? VarlinkCall(frame: frame) else { continue }
        let done = DispatchSemaphore(value: 0)
        Task {
            try? await fuzzService.handle(call, peer: nil) { reply in
                var out: [UInt8] = []
                reply.encode(into: &out)
                guard out.last == 0, (try? VarlinkReply(frame: out.dropLast())) != nil else {
                    fatalError("unparseable reply")
                }
            }
            done.signal()
        }
        done.wait()
    }
    return 0
}
