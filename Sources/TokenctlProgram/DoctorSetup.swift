import Config

/// What `tokenctl doctor` compares the machine against: the configured
/// values tokend itself acts on, as plain values so each check is a
/// function of them and of what it finds.
struct DoctorSetup: Equatable, Sendable {
    struct TokenFile: Equatable, Sendable {
        var path: String
        var mode: UInt32
        /// nil: tokend's own group.
        var group: String?
    }

    struct Session: Equatable, Sendable {
        var name: String
        var issuer: String?
        var tokenEndpoint: String?
        var tokenFiles: [TokenFile] = []
        /// The shared store's URL (postgresql://…), when the session is a fleet's.
        var sharedStore: String?
        var webOrigins: [String] = []
        /// Its secret, key and password files, as tokend resolves them.
        var credentialFiles: [CredentialFile] = []
    }

    var socket: String
    var socketMode: UInt32
    var stateDirectory: String
    var stateKeyFile: String?
    var sessions: [Session]
}
