/// A secret string (refresh token, access token, client secret) that never
/// prints: `description`, `debugDescription`, `dump` and string interpolation
/// all show `<redacted>`. Reading it takes an explicit `reveal()`.
public struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    private let value: String

    public init(_ value: String) {
        self.value = value
    }

    public func reveal() -> String { value }

    public var isEmpty: Bool { value.isEmpty }
    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}
