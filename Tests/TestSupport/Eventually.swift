/// A condition that did not come true in time: thrown, so the test that waited fails.
public struct TimedOut: Error, CustomStringConvertible {
    public let seconds: Double
    public let location: String
    public var description: String { "condition not met within \(seconds) s (\(location))" }
}

/// Waits until `condition` holds, which other threads or processes make true.
/// A timeout throws `TimedOut`: a test cannot pass by waiting out its limit.
public func eventually(
    within seconds: Double = 5, fileID: String = #fileID, line: Int = #line,
    _ condition: () async throws -> Bool
) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + .milliseconds(Int(seconds * 1000))
    while clock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(5))
    }
    if try await condition() { return }
    throw TimedOut(seconds: seconds, location: "\(fileID):\(line)")
}
