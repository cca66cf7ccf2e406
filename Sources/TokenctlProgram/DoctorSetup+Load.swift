import Config

extension DoctorSetup {
    /// The configuration as tokend reads it (the same parser, so the doctor
    /// never sees a value tokend would not).
    static func load(path: String, environment: [String: String]) throws -> DoctorSetup {
        let configuration = try Configuration.load(path: path, environment: environment)
        let daemon = configuration.daemon
        return DoctorSetup(
            socket: daemon.socket, socketMode: daemon.socketMode, stateDirectory: daemon.stateDirectory,
            stateKeyFile: daemon.stateKeyFile,
            sessions: configuration.sessions.map { session in
                Session(
                    name: session.name, issuer: session.issuer, tokenEndpoint: session.tokenEndpoint?.absoluteString,
                    tokenFiles: session.tokenFiles.map { TokenFile(path: $0.path, mode: $0.mode, group: $0.group) },
                    sharedStore: session.sharedStore, webOrigins: session.webOrigins,
                    credentialFiles: session.credentialFiles)
            })
    }
}
