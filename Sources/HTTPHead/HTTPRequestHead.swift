/// A request head that owns its bytes: what a small listener (tokend's
/// metrics, tokenctl's login) keeps of a request it answers by itself.
public struct HTTPRequestHead: Sendable {
    /// The head, from its request line through its empty line.
    public let bytes: [UInt8]
    public let syntax: RequestHeadSyntax

    /// `bytes` is a whole head, as `HeadScanner` found it.
    public init(_ bytes: [UInt8], limits: HeadLimits) throws(HeadError) {
        self.bytes = bytes
        syntax = try bytes.withUnsafeBytes { p in Result { () throws(HeadError) in try RequestHeadSyntax(p, limits: limits) } }.get()
    }

    /// The method as it came ("GET").
    public var method: String { text(syntax.methodBytes) }
    public var target: String { text(syntax.target) }
    /// The target without its query.
    public var path: Substring { target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0] }

    /// Every value of a field, by its name in any case.
    public func values(_ name: String) -> [String] {
        bytes.withUnsafeBytes { syntax.fields.values(named: name, in: $0) }
    }

    private func text(_ range: Range<Int>) -> String {
        bytes.withUnsafeBytes { HeadSyntax.string($0, range) }
    }
}
