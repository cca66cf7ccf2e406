// libFuzzer target: the Redactor. Each input makes a random secret, a text
// around it and one encoding of it (as sent, percent-encoded in either case,
// form-encoded, JSON-escaped, base64 or base64url inside a longer run with or
// without padding, or a cut piece); the redacted text must hold no part of
// that encoding that depends on the secret alone. Built by `make fuzz` into
// the Secrets module.
import Foundation

let secretAlphabet = Array("abcXYZ0189-._~+/= :%".utf8)
let textAlphabet = Array("abcXYZ0189-._~+/=%\\\"{}: ".utf8)

struct FuzzInput {
    var bytes: [UInt8]
    var index = 0
    mutating func next() -> Int {
        defer { index += 1 }
        return index < bytes.count ? Int(bytes[index]) : 0
    }
    mutating func string(length: Int, from alphabet: [UInt8]) -> [UInt8] {
        (0..<length).map { _ in alphabet[next() % alphabet.count] }
    }
}

func percent(_ bytes: [UInt8], upper: Bool, plusForSpace: Bool) -> String {
    var out = ""
    for byte in bytes {
        let scalar = Character(Unicode.Scalar(byte))
        if scalar.isLetter || scalar.isNumber || "-._~".contains(scalar) {
            out.append(scalar)
        } else if byte == UInt8(ascii: " ") && plusForSpace {
            out.append("+")
        } else {
            let hex = String(byte, radix: 16)
            out += "%" + (hex.count == 1 ? "0" : "") + (upper ? hex.uppercased() : hex)
        }
    }
    return out
}

/// The encoded text, and the parts of it that must not survive.
func encode(_ secret: [UInt8], _ input: inout FuzzInput) -> (String, [String]) {
    let text = String(decoding: secret, as: UTF8.self)
    switch input.next() % 7 {
    case 0: return (text, [text])
    case 1, 2:
        let encoded = percent(secret, upper: input.next() % 2 == 0, plusForSpace: input.next() % 2 == 0)
        return (encoded, [encoded])
    case 3:
        let escaped = text.replacingOccurrences(of: "/", with: "\\/")
        return (escaped, [escaped])
    case 4:
        let piece = String(text.prefix(max(12, secret.count / 2)))
        return (piece, [piece])
    default:
        // secret inside a longer base64 run: `before` bytes shift its alignment.
        let before = input.string(length: input.next() % 6, from: textAlphabet)
        let after = input.string(length: input.next() % 4, from: textAlphabet)
        var encoded = Data(before + secret + after).base64EncodedString()
        if input.next() % 2 == 0 {
            encoded = encoded.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            while encoded.hasSuffix("=") { encoded.removeLast() }
        }
        let characters = Array(encoded)
        let first = (8 * before.count + 5) / 6
        let end = 8 * (before.count + secret.count) / 6
        return (encoded, [String(characters[first..<end])])
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func redactorFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = FuzzInput(bytes: Array(UnsafeBufferPointer(start: data, count: size)))
    let secret = input.string(length: 12 + input.next() % 53, from: secretAlphabet)
    let other = input.string(length: 12 + input.next() % 20, from: secretAlphabet)
    let (encoded, mustVanish) = encode(secret, &input)
    let before = String(decoding: input.string(length: input.next() % 40, from: textAlphabet), as: UTF8.self)
    let after = String(decoding: input.string(length: input.next() % 40, from: textAlphabet), as: UTF8.self)
    let redactor = Redactor([String(decoding: other, as: UTF8.self), String(decoding: secret, as: UTF8.self)])
    let text = before + encoded + after
    let redacted = redactor.redact(text)
    for part in mustVanish where redacted.contains(part) {
        fatalError("secret survived: \(text) -> \(redacted)")
    }
    let cleaned = redactor.clean(text, limit: 1 + input.next())
    for part in mustVanish where part.count >= 12 {
        for start in 0...(part.count - 12) where cleaned.contains(String(Array(part)[start..<(start + 12)])) {
            fatalError("a piece of the secret survived cleaning: \(text) -> \(cleaned)")
        }
    }
    return 0
}
