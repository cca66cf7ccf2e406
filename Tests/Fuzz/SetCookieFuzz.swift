// libFuzzer target: Set-Cookie parsing, cookie dates, storage, retrieval,
// the change log and export. Built by `make fuzz` into the CookieJar module.

let fuzzNow = 1_800_000_000
let fuzzSuffixes = PublicSuffixList(text: "com\norg\nco.uk\n*.ck\n!www.ck\n")

@_cdecl("LLVMFuzzerTestOneInput")
public func setCookieFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    var policy = CookiePolicy(publicSuffixes: fuzzSuffixes)
    policy.maximumPerDomain = 4
    policy.maximumTotal = 6
    policy.changeLogCapacity = 5
    var jar = CookieJar(policy: policy)
    let requests = ["https://a.example.com/x/y", "http://example.com/", "http://127.0.0.1/p", "https://b.co.uk/"]
        .map { CookieRequest(string: $0)! }
    for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
        _ = CookieDate.parse(String(line))
        let before = jar.version
        if case .success(let changes) = jar.receive(String(line), from: requests[index % requests.count], now: fuzzNow) {
            guard jar.version == before + changes.count else { fatalError("version must grow by one per change") }
        }
        guard jar.cookies.count <= policy.maximumTotal else { fatalError("total limit exceeded") }
    }
    for request in requests {
        let cookies = jar.cookies(for: request, now: fuzzNow + 10)
        guard cookies.allSatisfy({ !($0.expiresAt.map { $0 <= fuzzNow + 10 } ?? false) }) else {
            fatalError("expired cookie returned")
        }
        _ = CookieJar.header(for: cookies)
    }
    _ = jar.netscapeText(now: fuzzNow)
    _ = jar.changes(since: max(0, jar.version - 3))
    _ = jar.removeExpired(now: fuzzNow + 1_000_000)
    return 0
}
