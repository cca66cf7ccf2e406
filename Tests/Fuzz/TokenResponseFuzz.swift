// libFuzzer target: classifying token-endpoint answers (status, Retry-After,
// body, read with the project's JSON model). Built by `make fuzz` into the
// OAuth module. JWT expiry is read by jwt-kit's parser, a package this
// standalone build does not link: it is not fuzzed here.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func tokenResponseFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let statuses = [200, 201, 400, 401, 429, 500, 502, 503]
    let status = statuses[Int(bytes[0]) % statuses.count]
    let headerLength = min(Int(bytes[1]) % 32, bytes.count - 2)
    let retryAfter = String(decoding: bytes[2..<(2 + headerLength)], as: UTF8.self)
    let body = Array(bytes[(2 + headerLength)...])
    switch TokenResponse.classify(status: status, retryAfterHeader: retryAfter, body: body) {
    case .success(let response):
        guard !response.accessToken.reveal().isEmpty else { fatalError("empty access token accepted") }
        guard "\(response.accessToken)" == "<redacted>" else { fatalError("secret printed") }
    case .failure(let error):
        guard error.reason.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else {
            fatalError("control character in a reason")
        }
    }
    return 0
}
