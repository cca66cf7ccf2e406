import CTSS2
import DPoP
import Dispatch
import Synchronization

/// ESAPI calls block (milliseconds on a firmware TPM, 100-200 ms for a
/// proof's commands on a discrete chip): they run one at a time on a thread
/// of their own, never on a server loop or an actor's executor.
///
/// Work waits in two lanes. The session's own work (its token endpoint's
/// proofs, the probe of its key, making a login's key) goes first, always;
/// callers' requests (GetProof) take the chip only when no session's work
/// waits, and their lane holds at most what the chip signs in
/// `requestsWait`: a request beyond that is refused at once (`busy`, which
/// GetProof answers RateLimited) instead of making everyone behind it late.
/// Work whose caller gave up (its task cancelled: a deadline passed) leaves
/// its lane and never reaches the chip.
///
/// A TPM that never answers holds the thread until it does (a blocked read
/// cannot be taken back); meanwhile every call that would queue behind it
/// fails at once as unreachable instead of waiting, and the callers' own
/// deadline (the session's) bounds the one that hangs.
final class TPMThread: Sendable {
    static let shared = TPMThread()

    enum Lane: Sendable {
        /// The session's own proofs and keys.
        case session
        /// Callers' requests for proofs (GetProof): bounded, and behind the session's.
        case requests
    }

    private struct Job: Sendable {
        let id: UInt64
        let run: @Sendable () -> Void
        let drop: @Sendable () -> Void
    }

    private struct State {
        var session: [Job] = []
        var requests: [Job] = []
        var lastID: UInt64 = 0
        /// When the call on the thread began; nil when none runs.
        var running: ContinuousClock.Instant?
        var signing = SigningTime()
    }

    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "tokend.tpm")
    /// The ESAPI connection and what is kept loaded (keep.h); touched on `queue` only.
    nonisolated(unsafe) let keeper: UnsafeMutablePointer<tokend_tpm_keeper> = {
        let keeper = UnsafeMutablePointer<tokend_tpm_keeper>.allocate(capacity: 1)
        tokend_keeper_init(keeper)
        return keeper
    }()

    /// A call that has not come back within this is taken for a TPM that does not answer.
    static let stuckAfter: Duration = .seconds(5)
    /// The most time of signing the requests' lane holds.
    static let requestsWait: Duration = .seconds(2)
    /// The requests' lane never holds more than this, however fast the chip.
    static let requestsMost = 64

    static let blobLimit = MemoryLayout<TPM2B_PUBLIC>.size + MemoryLayout<TPM2B_PRIVATE>.size

    /// tpm2-tss is opened when first used (see CTSS2): on a host without it, keys in a TPM cannot be made or used.
    static var missingLibrary: ProofKeyError? {
        guard let missing = tokend_tss2_missing() else { return nil }
        return ProofKeyError(
            .unreachable,
            "tpm2-tss is not installed (\(String(cString: missing)) is missing; Debian: libtss2-esys-3.0.2-0, libtss2-tctildr0, libtss2-mu0, libtss2-rc0)")
    }

    /// What one proof takes the TPM, measured (see SigningTime).
    var signingTime: Duration { state.withLock { $0.signing.time } }

    /// Jobs waiting in each lane.
    var waiting: (session: Int, requests: Int) { state.withLock { ($0.session.count, $0.requests.count) } }

    /// How many requests the lane holds now: what the chip signs in `requestsWait`.
    static func requestsCapacity(signingTime: Duration) -> Int {
        let each = max(signingTime / .milliseconds(1), 0.1)
        return max(1, min(requestsMost, Int(requestsWait / .milliseconds(1) / each)))
    }

    /// Runs `body` on the TPM's thread in `lane`; `signature`: its time is
    /// what a proof takes (measured when it succeeds).
    func run<T: Sendable>(
        tcti: String, lane: Lane = .session, signature: Bool = false,
        _ body: @escaping @Sendable () -> Result<T, ProofKeyError>
    ) async -> Result<T, ProofKeyError> {
        if let began = state.withLock({ $0.running }), ContinuousClock.now - began > Self.stuckAfter {
            return .failure(ProofKeyError(
                .unreachable, "the TPM (\(tcti)) has not answered for \(ContinuousClock.now - began): tokend tries again later"))
        }
        let id = state.withLock { state in
            state.lastID += 1
            return state.lastID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, ProofKeyError>, Never>) in
                let job = Job(
                    id: id,
                    run: {
                        let began = ContinuousClock.now
                        self.state.withLock { $0.running = began }
                        let result = body()
                        let took = ContinuousClock.now - began
                        self.state.withLock { state in
                            state.running = nil
                            if signature, case .success = result { state.signing.observe(took) }
                        }
                        continuation.resume(returning: result)
                    },
                    drop: { continuation.resume(returning: .failure(Self.gaveUp)) })
                let refused: ProofKeyError? = state.withLock { state in
                    // Checked under the lock the cancellation handler takes: a job is either refused here or found there.
                    if Task.isCancelled { return Self.gaveUp }
                    switch lane {
                    case .session:
                        state.session.append(job)
                    case .requests:
                        let time = state.signing.time
                        guard state.requests.count < Self.requestsCapacity(signingTime: time) else {
                            let ahead = Double(state.requests.count + state.session.count + 1)
                            let wait = max(1, Int((ahead * (time / .seconds(1))).rounded(.up)))
                            return ProofKeyError(
                                .busy,
                                "the TPM has \(state.requests.count) proofs for requests waiting, all it signs in \(Self.requestsWait): try again in \(wait) s",
                                retryAfter: wait)
                        }
                        state.requests.append(job)
                    }
                    return nil
                }
                if let refused {
                    continuation.resume(returning: .failure(refused))
                    return
                }
                queue.async { self.runNext() }
            }
        } onCancel: {
            let dropped: Job? = state.withLock { state in
                if let at = state.requests.firstIndex(where: { $0.id == id }) { return state.requests.remove(at: at) }
                if let at = state.session.firstIndex(where: { $0.id == id }) { return state.session.remove(at: at) }
                return nil  // running, done, or not queued yet (then refused when it is)
            }
            dropped?.drop()
        }
    }

    /// One turn of the thread (there is one per job queued): the session's
    /// work first, then the oldest request; nothing when the job it was
    /// queued for has been dropped and the lanes are empty.
    private func runNext() {
        let job: Job? = state.withLock { state in
            if !state.session.isEmpty { return state.session.removeFirst() }
            if !state.requests.isEmpty { return state.requests.removeFirst() }
            return nil
        }
        job?.run()
    }

    static let gaveUp = ProofKeyError(.cancelled, "the caller gave up before the TPM came to it: nothing was signed")
}

/// What one proof takes the TPM: all its commands, from the first byte sent
/// to the last received (on a discrete chip 30-200 ms, through a resource
/// manager one TPM2_Sign; without one also a connection, ContextLoad and a
/// flush). A moving average of the last signatures; before the first, a slow
/// discrete chip's time is assumed.
struct SigningTime: Sendable {
    static let assumed: Duration = .milliseconds(150)
    private(set) var time: Duration = SigningTime.assumed
    private var observed = 0

    mutating func observe(_ took: Duration) {
        guard took > .zero else { return }
        // The first signatures decide quickly; later ones move it by a fifth each.
        observed += 1
        let weight = max(0.2, 1 / Double(observed))
        time = time * (1 - weight) + took * weight
    }
}
