import Deadline
import DPoP
import OAuth
import Secrets
import StateStore

/// How a session uses DPoP (RFC 9449): where new keys are made, and how a
/// stored key is read back (by where it lives).
public struct DPoPSettings: Sendable {
    /// Makes each login's key.
    public var newKeys: any ProofKeyStore
    /// Reads stored keys back, by their storage.
    public var stores: [KeyStorage: any ProofKeyStore]

    public init(newKeys: any ProofKeyStore, stores: [any ProofKeyStore]) {
        self.newKeys = newKeys
        self.stores = Dictionary(stores.map { ($0.storage, $0) }, uniquingKeysWith: { first, _ in first })
    }
}

/// The session's DPoP key as status shows it.
public struct DPoPKeyStatus: Sendable, Equatable {
    public var thumbprint: String?
    /// "tpm" or "state": where the key lives (for a session without one yet, where the next login makes it).
    public var keyStorage: String
    /// "verified", "unverified" or "none" (see the interface's DPoPStatus).
    public var binding: String
    public var problem: String?
}

/// A key whose every signature is reported (see followProofKey).
struct WatchedProofKey: ProofKey {
    let inner: any ProofKey
    let outcome: @Sendable (ProofKeyError?) -> Void
    var publicKey: P256PublicJWK { inner.publicKey }
    var storage: KeyStorage { inner.storage }
    var stored: [UInt8] { inner.stored }
    var forRequests: any ProofKey { WatchedProofKey(inner: inner.forRequests, outcome: outcome) }

    /// The most a TPM signature may take: a TPM that does not answer (hung,
    /// stopped) is reported unreachable after this, not waited for.
    static let signingDeadline: Duration = .seconds(5)

    func sign(_ message: [UInt8]) async throws(ProofKeyError) -> [UInt8] {
        let inner = self.inner
        do {
            let signed = try await within(Self.signingDeadline) { try await inner.sign(message) }
            guard let signed else {
                throw ProofKeyError(
                    .unreachable, "the TPM did not answer within \(Self.signingDeadline): tokend tries again later")
            }
            outcome(nil)
            return signed
        } catch let error as ProofKeyError {
            // A full queue or a caller that gave up tells nothing of the key or the TPM.
            if !error.saysNothingOfTheKey { outcome(error) }
            throw error
        } catch {
            let failed = ProofKeyError(.failed, "the DPoP key cannot sign: \(error)")
            outcome(failed)
            throw failed
        }
    }
}

/// A stored key that cannot be used here: every proof it is asked for fails,
/// so no request goes upstream without one.
struct UnusableProofKey: ProofKey {
    let error: ProofKeyError
    let publicKey: P256PublicJWK
    let storage: KeyStorage
    var stored: [UInt8] { [] }
    func sign(_ message: [UInt8]) async throws(ProofKeyError) -> [UInt8] { throw error }
}

extension SessionActor {
    /// A new login's key: made before the grant exists, so the grant is bound to it from the start.
    func makeLoginKey() async throws -> (any ProofKey)? {
        guard let dpop else { return nil }
        // tokend signs ES256 only; a provider that lists what it takes and leaves ES256 out would refuse every proof.
        if let algorithms = providerMetadata.flatMap(ProviderMetadata.decode)?.dpopSigningAlgValues,
            !algorithms.contains("ES256")
        {
            throw BrokerError.login(
                .loginFailed, name,
                "the provider takes DPoP proofs in \(algorithms.joined(separator: ", ")) (dpop_signing_alg_values_supported), and tokend signs ES256 only")
        }
        let newKeys = dpop.newKeys
        do {
            // Key generation is slower than signing on real chips; a TPM that never answers still ends the login.
            guard let key = try await within(.seconds(30), { try await newKeys.makeKey() }) else {
                throw ProofKeyError(.unreachable, "the TPM did not answer within 30 seconds")
            }
            return key
        } catch {
            let why = (error as? ProofKeyError)?.description ?? "\(error)"
            throw BrokerError.login(.loginFailed, name, "no DPoP key could be made (\(newKeys.storage.rawValue)): \(why)")
        }
    }

    /// The login's key goes into the record that holds its grant.
    func bind(_ key: (any ProofKey)?, into next: inout SessionRecord) {
        guard let key else { return }
        next.dpopKey = DPoPKeyRecord(
            storage: key.storage.rawValue, thumbprint: key.thumbprint, material: Secret(Base64URL.encode(key.stored)))
    }

    /// Makes the endpoint sign with the record's key: called whenever the
    /// record's key changes (login, logout, a grant handed in, start).
    func followProofKey() {
        guard dpop != nil, let stored = record.dpopKey else {
            proofKeyInUse = nil
            dpopProblem = nil
            endpoint.useProofKey(nil)
            return
        }
        if let proofKeyInUse, proofKeyInUse.thumbprint == stored.thumbprint, proofKeyInUse.storage.rawValue == stored.storage {
            return
        }
        let key: any ProofKey
        do {
            key = try loadProofKey(stored)
            dpopProblem = nil
        } catch {
            logger.error("DPoP key unusable", metadata: ["problem": "\(error.description)"])
            dpopProblem = error.kind == .notInThisTPM ? ProofKeyError.notInThisTPMReason : error.description
            let jwk = P256PublicJWK(point: [UInt8](repeating: 0, count: 64))!
            key = UnusableProofKey(error: error, publicKey: jwk, storage: KeyStorage(rawValue: stored.storage) ?? .state)
        }
        proofKeyInUse = key
        guard key.storage == .tpm, !(key is UnusableProofKey) else {
            endpoint.useProofKey(key)
            return
        }
        // Every signature tells the session whether the TPM has the key: status follows the TPM both ways.
        let thumbprint = key.thumbprint
        let watched = WatchedProofKey(inner: key) { [weak self] error in
            guard let self else { return }
            Task { await self.proofKeySigned(thumbprint, error) }
        }
        proofKeyInUse = watched
        endpoint.useProofKey(watched)
        probeProofKey(watched)
    }

    /// What a signature with the key in use showed: nil, it signed; else why not.
    func proofKeySigned(_ thumbprint: String, _ error: ProofKeyError?) {
        guard proofKeyInUse?.thumbprint == thumbprint else { return }
        guard let error else {
            guard dpopProblem != nil else { return }
            logger.notice("DPoP key signs again")
            dpopProblem = nil
            updateSnapshot()
            return
        }
        proofKeyFailed(error)
    }

    func loadProofKey(_ stored: DPoPKeyRecord) throws(ProofKeyError) -> any ProofKey {
        guard let storage = KeyStorage(rawValue: stored.storage), let store = dpop?.stores[storage] else {
            throw ProofKeyError(.unreachable, "the session's DPoP key is in the \(stored.storage), which this tokend cannot use (is [daemon] tpm set?)")
        }
        guard let material = Base64URL.decode(stored.material.reveal()) else {
            throw ProofKeyError(.failed, "the stored DPoP key is damaged")
        }
        let key = try store.load(stored: material)
        guard key.thumbprint == stored.thumbprint else {
            throw ProofKeyError(.failed, "the stored DPoP key does not match its thumbprint")
        }
        return key
    }

    /// A key in the TPM is tried once, off the actor, when it is taken into
    /// use: one this TPM cannot load is found before anything asks for a token.
    func probeProofKey(_ key: any ProofKey) {
        Task { _ = try? await key.sign(Array("tokend probe".utf8)) }
    }

    func proofKeyFailed(_ error: ProofKeyError) {
        let problem = error.kind == .notInThisTPM ? ProofKeyError.notInThisTPMReason : error.description
        guard problem != dpopProblem else { return }
        logger.error("DPoP key cannot sign", metadata: ["problem": "\(error.description)"])
        dpopProblem = problem
        updateSnapshot()
    }

    /// Why the session's DPoP key cannot sign here now (nil: it can, or the
    /// session has none): a key in the TPM is asked for one signature.
    func proofKeyUnusableHere() async -> String? {
        guard dpop != nil, record.dpopKey != nil, let key = proofKeyInUse else { return nil }
        if proofKeyGone { return ProofKeyError.notInThisTPMReason }
        guard key.storage == .tpm || key is UnusableProofKey else { return nil }
        do {
            _ = try await key.sign(Array("tokend probe".utf8))
            return nil
        } catch {
            return error.kind == .notInThisTPM ? ProofKeyError.notInThisTPMReason : error.description
        }
    }

    /// A session whose key is gone makes no upstream call and hands out no
    /// token: only a new login (with a new key) helps.
    func requireProofKey() throws {
        guard proofKeyGone else { return }
        throw BrokerError.loginRequired(name, ProofKeyError.notInThisTPMReason)
    }

    /// The session's key is not in this machine's TPM: no token of it is handed out, not even a cached one.
    var proofKeyGone: Bool {
        dpop != nil && dpopProblem == ProofKeyError.notInThisTPMReason
    }

    /// What status shows of the session's key; nil for a session without DPoP.
    var dpopStatus: DPoPKeyStatus? {
        guard let dpop else { return nil }
        let binding: String
        switch record.tokenType?.lowercased() {
        case _ where record.phase != .active || record.accessToken == nil: binding = "none"
        case "dpop": binding = "verified"
        default: binding = "unverified"
        }
        var problem = dpopProblem
        if problem == nil, record.phase == .active, record.dpopKey == nil {
            problem = "the grant was made without a DPoP key (handed in, or before dpop was set): log in again to bind it"
        }
        // A proof the provider refused (for its time, with the skew, when its clock is off) while that lasts.
        if problem == nil, let lastError, lastError.hasPrefix(HTTPTokenEndpoint.proofRefusedReason) { problem = lastError }
        return DPoPKeyStatus(
            thumbprint: record.dpopKey?.thumbprint, keyStorage: record.dpopKey?.storage ?? dpop.newKeys.storage.rawValue,
            binding: record.dpopKey == nil ? "none" : binding, problem: problem)
    }
}

/// What GetProof can sign with.
public enum ProofKeyForRequests: Sendable {
    /// The session does not use DPoP, or its grant has no key: why.
    case notUsed(String)
    /// The key cannot sign here (not in this machine's TPM): why and what to do.
    case unavailable(String)
    case key(any ProofKey)
}

extension SessionActor {
    /// The key proofs for resource servers are signed with: the grant's own.
    public func keyForProofs() -> ProofKeyForRequests {
        guard dpop != nil else { return .notUsed("the session does not use DPoP (dpop in tokend.toml)") }
        if proofKeyGone { return .unavailable(ProofKeyError.notInThisTPMReason) }
        guard record.phase == .active, record.dpopKey != nil, let proofKeyInUse else {
            return .notUsed("the session's grant has no DPoP key: log in again to make one")
        }
        // Behind the session's own proofs, in a bounded queue, where signing is scarce (a TPM).
        return .key(proofKeyInUse.forRequests)
    }
}

extension SessionActor {
    /// What token files hold: the current token, but never a DPoP-bound one,
    /// which is useless without a proof per request and a file cannot give
    /// one; the files are removed instead, and the journal says why.
    func tokenForFiles(now: Double) -> Secret? {
        guard let token = validToken(now: now) else { return nil }
        // RFC 9449 §7.1: the token type's case is not significant (as TokendClient's isDPoPBound reads it).
        guard token.tokenType.lowercased() == "dpop" else { return token.accessToken }
        if case .some(.none) = tokenFilesHold { return nil }  // said when they were removed
        logger.warning(
            "token files removed: the token is DPoP-bound",
            metadata: ["fix": "use GetProof (tokenctl proof, tokend-proxy) for this session's requests"])
        return nil
    }
}
