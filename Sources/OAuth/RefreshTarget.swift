/// What a refresh asks the provider for: RFC 8707 resource indicators (none:
/// whatever the refresh token covers) and a scope (nil: the original one,
/// RFC 6749 §6).
public struct RefreshTarget: Sendable, Equatable {
    public var resources: [String]
    public var scope: String?

    public init(resources: [String] = [], scope: String?) {
        self.resources = resources
        self.scope = scope
    }
}
