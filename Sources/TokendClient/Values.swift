import TokendInterface
import Varlink

/// The values tokend answers with: the interface's own types.
public typealias AccessToken = BrokerInterface.Token
public typealias SessionStatus = BrokerInterface.SessionStatus
public typealias PendingLogin = BrokerInterface.PendingLogin
public typealias SessionEvent = BrokerInterface.Event
public typealias Cookie = BrokerInterface.Cookie
/// GetCookies' answer: the cookies, the Cookie header a browser would send, the jar's version.
public typealias CookieSet = BrokerInterface.GetCookies.Out

extension Encodable {
    /// The value as tokend sent it (for `--json` output).
    public var json: JSONValue { (try? JSONValue(encoding: self)) ?? .null }
}
