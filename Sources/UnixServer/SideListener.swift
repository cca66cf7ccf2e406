import CLinux
import Synchronization
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// A listening socket the loop serves beside its own, with a service of its
/// own (tokend's shares): no fast path, no admission (whoever can open the
/// socket file may connect), and its connections counted in one person's
/// budget (`person`: the bytes they hold, and at most `limit` connections
/// through all that person's side listeners). Stopped, the loop closes the
/// listening socket and every connection accepted through it.
public final class SideListener: Sendable {
    let fd: CInt
    let service: VarlinkService
    let person: UInt32
    let limit: Int
    /// Connections through this one listener at most (at most `limit`).
    let ownLimit: Int
    /// What a connection past `limit` or `ownLimit` is answered.
    let limitError: VarlinkError
    private let open = Atomic(0)

    init(fd: CInt, service: VarlinkService, person: UInt32, limit: Int, ownLimit: Int, limitError: VarlinkError) {
        self.fd = fd
        self.service = service
        self.person = person
        self.limit = limit
        self.ownLimit = min(limit, ownLimit)
        self.limitError = limitError
    }

    /// Connections open through it now.
    public var connections: Int { open.load(ordering: .relaxed) }

    func opened(_ delta: Int) { open.add(delta, ordering: .relaxed) }
}

extension VarlinkServer {
    /// Serves `fd`, a listening Unix socket, with `service` on the loop
    /// until `stopServing`. The loop owns `fd` from here on, even when this
    /// throws (the loop is not running): it is closed then.
    public func serve(
        listener fd: CInt, service: VarlinkService, person: UInt32, limit: Int, ownLimit: Int? = nil,
        limitError: VarlinkError
    ) throws -> SideListener {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0,
            let loop = running.loop.withLock({ $0 })
        else {
            close(fd)
            throw ServerLoopFailed(reason: "not running")
        }
        let side = SideListener(
            fd: fd, service: service, person: person, limit: limit, ownLimit: ownLimit ?? limit, limitError: limitError)
        guard loop.post(.addSide(side), fd: -1, connection: 0) else {
            close(fd)
            throw ServerLoopFailed(reason: "stopped")
        }
        return side
    }

    /// Closes the side listener's socket and every connection through it,
    /// at the loop's next turn (at once: the loop is woken for it).
    public func stopServing(_ side: SideListener) {
        _ = running.loop.withLock { $0 }?.post(.removeSide(side), fd: -1, connection: 0)
    }
}

extension ServerLoop {
    func addSide(_ side: SideListener) {
        // Its connections refuse descriptors from here on (they inherit it).
        if intake == .kernelRefuses { Self.allowDescriptors(on: side.fd, false) }
        guard watch(side.fd, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD) else {
            logger.warning("cannot serve a side listener", metadata: ["error": "\(String(cString: strerror(errno)))"])
            closer.close(side.fd, for: side.person)
            return
        }
        sides[side.fd] = side
    }

    func removeSide(_ side: SideListener) {
        guard sides[side.fd] === side else { return }
        sides[side.fd] = nil
        _ = watch(side.fd, events: 0, operation: EPOLL_CTL_DEL)
        // Connections not yet accepted may hold descriptors: its close drops them.
        closer.close(side.fd, for: side.person)
        for connection in Array(connections.values) where connection.side === side { close(connection) }
    }

    /// Accepts what waits on a side listener; a connection past the server's
    /// or the person's limit is answered and closed, as on the main socket.
    func acceptSide(_ side: SideListener) {
        for _ in 0..<64 {
            guard sides[side.fd] === side else { return }
            let fd = accept4(side.fd, nil, nil, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            guard fd >= 0 else {
                switch errno {
                case EAGAIN, EINTR: return
                case ECONNABORTED, EPROTO: continue
                default:
                    // Out of descriptors: not watched until the next check, rather than spin.
                    _ = watch(side.fd, events: 0, operation: EPOLL_CTL_DEL)
                    pausedSides.append(side)
                    return
                }
            }
            let peer = PeerCredentials.of(socket: fd)
            guard admitted < limits.maximumConnections else {
                metrics?.refused(.connections)
                refuse(fd, peer: peer, with: errors.overloaded, reason: "too many connections")
                continue
            }
            guard sidePerPerson[side.person, default: 0] < side.limit, side.connections < side.ownLimit else {
                metrics?.refused(.perUser)
                refuse(fd, peer: peer, with: side.limitError, reason: "too many connections through shares", limit: side.limit)
                continue
            }
            guard let connection = register(fd, peer: peer, refused: false, side: side) else { continue }
            sidePerPerson[side.person, default: 0] += 1
            side.opened(1)
            _ = connection
        }
    }

    /// A side connection closing gives back its place in its person's count.
    func leftSide(_ connection: Connection) {
        guard let side = connection.side, !connection.refused else { return }
        side.opened(-1)
        let left = sidePerPerson[side.person, default: 1] - 1
        sidePerPerson[side.person] = left > 0 ? left : nil
    }

    /// At each check: side listeners paused for want of descriptors are watched again.
    func resumeSides() {
        for side in pausedSides where sides[side.fd] === side {
            _ = watch(side.fd, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD)
        }
        pausedSides = []
    }
}
