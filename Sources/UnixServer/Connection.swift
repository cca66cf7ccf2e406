import CLinux
import TokendMetrics
import Varlink

#if canImport(Glibc)
import Glibc
#endif


/// A connection while the loop serves it. Loop thread only.
final class Connection {
    let fd: CInt
    /// Tells this connection from a later one that reuses its descriptor.
    let id: UInt64
    let peer: PeerCredentials?
    /// Whose budgets the connection counts in (see `SubordinateIDs`), set at accept.
    let person: UInt32
    /// Whose closer lane what it passes goes to: its peer's own person, also
    /// through a share (whose budgets are its creator's).
    let sender: UInt32
    /// Over the limit or turned away: answered, read once, closed.
    let refused: Bool
    /// The side listener it came through; nil for the main socket.
    var side: SideListener?
    /// A descriptor the client passed, and where (counted as `received`)
    /// the read that brought it ended: it goes with the frame ending there.
    var passed: (fd: CInt, end: Int)?
    /// Asked for one descriptor with its next call (ExpectDescriptor): the
    /// kernel takes one for it until it arrives.
    var expecting = false
    /// Descriptors may wait unread in its socket (the kernel took them), so
    /// its close may block: it goes to the closer, not on the loop.
    var mayHoldDescriptors: Bool
    /// Bytes read, and bytes of frames taken, since the connection began.
    var received = 0
    var taken = 0
    /// What a refused connection is answered.
    var refusal: VarlinkError?
    /// Counted in its person's connection slots.
    var holdsSlot = false
    /// The last read, or the last answer.
    var lastActive: Int64
    /// When the first byte of the unfinished message at the end of
    /// `unprocessed` arrived; nil when no message is known to be unfinished.
    var frameStarted: Int64?
    /// Bytes read and not yet taken: the start of an unfinished message, or
    /// calls held back (a call with the service, or replies past the watermark).
    var unprocessed = ByteQueue()
    /// How much of `unprocessed` is known to hold no NUL.
    var scanned = 0
    /// Bytes the NUL scan was given to search, over the connection's life
    /// (what `scanned` saves shows here).
    var examined = 0
    /// `unprocessed.count` and the bytes of `unwritten` behind the reply
    /// being written, as last counted against the person's total.
    var accounted = 0
    var unwritten = ByteQueue()
    /// When the socket last took bytes of `unwritten` (or it began to fill).
    var lastProgress: Int64 = 0
    /// Bytes handed to the kernel, and bytes queued, since the connection began.
    var sent = 0
    var queued = 0
    /// Where (counted as `sent` is) the reply being written ends, which the
    /// hard cap and the budget do not count (`replyInProgress`).
    var replyEnd = 0
    /// A call is with the service; the connection is not read until it answers.
    var busy = false
    /// The client sends no more: the connection closes once all is answered.
    var readEnded = false
    /// The task of the `more` call in progress, cancelled if the connection closes.
    var stream: Task<Void, Never>?
    /// Streamed replies queued and not yet on the socket, oldest first.
    var deliveries: [(end: Int, delivery: Delivery)] = []
    /// The broadcast whose member this connection's `more` call is.
    var member: ObjectIdentifier?
    var gone = false
    /// The epoll events asked for.
    var interest = EPOLLIN.rawValue
    /// The last frame the fast path answered, its call, and the answer while
    /// it may be given again (`until` on CLOCK_BOOTTIME). Kept only for
    /// frames up to `rememberedFrame` bytes.
    var lastFrame: [UInt8] = []
    var lastCall: VarlinkCall?
    var lastFast: (bytes: [UInt8], until: Int64, stamp: UInt64)?
    /// Where the remembered call's answers are counted (resolved once, not per call).
    var lastCounter: Counter?
    /// GetToken with a session name is well under this.
    static let rememberedFrame = 1024

    init(
        fd: CInt, id: UInt64, peer: PeerCredentials?, person: UInt32, sender: UInt32, now: Int64, refused: Bool,
        mayHoldDescriptors: Bool
    ) {
        self.fd = fd
        self.sender = sender
        self.mayHoldDescriptors = mayHoldDescriptors
        self.id = id
        self.peer = peer
        self.person = person
        self.lastActive = now
        self.refused = refused
    }

    func forgetLastCall() {
        guard lastCall != nil else { return }
        lastFrame = []
        lastCall = nil
        lastFast = nil
        lastCounter = nil
    }
}
