/// Serialises JSON values compactly, object members in sorted key order so
/// that output is deterministic.
public enum JSONWriter {
    public static func write(_ value: JSONValue, into output: inout [UInt8]) {
        switch value {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let b): output.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): output.append(contentsOf: String(i).utf8)
        case .double(let d): writeDouble(d, into: &output)
        case .string(let s): writeString(s, into: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                write(element, into: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            writeObject(members, into: &output)
        }
    }

    public static func writeObject(_ members: JSONObject, into output: inout [UInt8]) {
        output.append(UInt8(ascii: "{"))
        var first = true
        for key in members.keys.sorted() {
            if !first { output.append(UInt8(ascii: ",")) }
            first = false
            writeString(key, into: &output)
            output.append(UInt8(ascii: ":"))
            write(members[key]!, into: &output)
        }
        output.append(UInt8(ascii: "}"))
    }

    public static func bytes(_ value: JSONValue) -> [UInt8] {
        var output: [UInt8] = []
        write(value, into: &output)
        return output
    }

    public static func string(_ value: JSONValue) -> String {
        String(decoding: bytes(value), as: UTF8.self)
    }

    static func writeDouble(_ d: Double, into output: inout [UInt8]) {
        guard d.isFinite else {
            output.append(contentsOf: "null".utf8)
            return
        }
        output.append(contentsOf: d.description.utf8)
    }

    static let hexDigits = Array("0123456789abcdef".utf8)

    public static func writeString(_ s: String, into output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""): output.append(contentsOf: [0x5C, 0x22])
            case UInt8(ascii: "\\"): output.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: output.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: output.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: output.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            case 0..<0x20:
                output.append(contentsOf: Array("\\u00".utf8))
                output.append(hexDigits[Int(byte >> 4)])
                output.append(hexDigits[Int(byte & 0xF)])
            default: output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }
}
