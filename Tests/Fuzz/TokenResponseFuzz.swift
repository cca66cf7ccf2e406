// libFuzzer target: classifying token-endpoint answers (status, Retry-After,
// body, read with the project's JSON model), and taking their lifetimes on
// through the stored record (Sources/StateStore/SessionRecord.swift, compiled
// in by build.sh) the way the broker does. Built by `make fuzz` into the
// OAuth module. JWT expiry is read by jwt-kit's parser, a package this
// standalone build does not link: it is not fuzzed here.
import Foundation

/// TokenRequest names the private_key_jwt key it would sign with; signing is
/// jwt-kit's, which this standalone build does not link, so the key is a
/// stand-in here (what this target fuzzes never signs).
public struct ClientKey: Sendable {}

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
        if let expiresIn = response.expiresIn { storeLifetime(expiresIn, issuedAt: issuedAt(from: bytes)) }
    case .failure(let error):
        guard error.reason.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else {
            fatalError("control character in a reason")
        }
    }
    // Any expiry and refresh time a state file may hold loads within bounds.
    loadStored(expiresAt: integer(bytes, at: 0), lastRefreshAt: integer(bytes, at: 8))
    return 0
}

/// A clock reading from the input: any time a machine may have, and some it may not.
func issuedAt(from bytes: [UInt8]) -> Int {
    let times = [0, 1_700_000_000, Int(Date().timeIntervalSince1970), SessionRecord.latestTime, -1, Int.max, Int.min]
    return times[Int(bytes[bytes.count - 1]) % times.count]
}

func integer(_ bytes: [UInt8], at offset: Int) -> Int {
    var value = 0
    for index in offset..<(offset + 8) { value = value << 8 | Int(bytes[index % bytes.count]) }
    return value
}

/// The broker's step: expires_in becomes an expiry no more than a year on,
/// written and read back; what the fast path computes from it fits.
func storeLifetime(_ expiresIn: Int, issuedAt: Int) {
    let (expiresAt, note) = SessionRecord.expiry(issuedAt: issuedAt, lifetime: expiresIn, source: "expires_in")
    guard let expiresAt else {
        guard expiresIn <= 0, note != nil else { fatalError("a positive lifetime was ignored") }
        return
    }
    let issued = SessionRecord.clampedTime(issuedAt)
    guard expiresAt > issued, expiresAt - issued <= SessionRecord.maximumLifetime else {
        fatalError("lifetime \(expiresAt - issued) s outside 1...maximumLifetime")
    }
    guard (note != nil) == (expiresIn > SessionRecord.maximumLifetime) else { fatalError("clamp not noted") }
    let stored = roundTrip(SessionRecord(phase: .active, expiresAt: expiresAt, lastRefreshAt: issued))
    guard stored.expiresAt == expiresAt, stored.lifetimeNote == nil else { fatalError("the stored expiry changed") }
    // The fast path's reuse window: remaining life in milliseconds, as an Int64.
    guard (Double(expiresAt) - Double(issued)) * 1000 < Double(Int64.max) else { fatalError("reuse window overflows") }
}

func loadStored(expiresAt: Int, lastRefreshAt: Int) {
    let loaded = roundTrip(SessionRecord(phase: .active, expiresAt: expiresAt, lastRefreshAt: lastRefreshAt))
    guard let issued = loaded.lastRefreshAt, (0...SessionRecord.latestTime).contains(issued),
        let expiry = loaded.expiresAt, expiry >= 0, expiry <= issued + SessionRecord.maximumLifetime
    else { fatalError("a stored record loaded out of bounds: \(loaded)") }
}

func roundTrip(_ record: SessionRecord) -> SessionRecord {
    guard let data = try? JSONEncoder().encode(StoredRecord(record)),
        let decoded = try? JSONDecoder().decode(StoredRecord.self, from: data)
    else { fatalError("a record does not survive the disk") }
    return decoded.record
}
