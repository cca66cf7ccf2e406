import Broker
import Config

extension SessionSettings {
    /// The keys (resource, scope) the session may serve besides its own token.
    var keyPolicy: KeyPolicy {
        var policy = KeyPolicy(resources: resources, scope: scope, narrowing: KeyPolicy.Narrowing(rawValue: narrowing) ?? .auto)
        policy.webResources = webResources
        policy.proofTargets = proofTargets
        policy.restrictsResources = !resourceAccess.isEmpty
        policy.audiences = resourceAudiences
        return policy
    }
}
