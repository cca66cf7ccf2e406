import Config
import OAuth

extension UserSessionSettings {
    /// What tokend may connect to for these sessions' requests.
    var outbound: OutboundPolicy { OutboundPolicy(allowLoopbackHTTP: allowLoopbackHTTP, patterns: issuers) }
}
