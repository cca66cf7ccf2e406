#if canImport(Glibc)
import Glibc
#endif

/// Runs `body` on a thread of its own (pthread_create, detached), for work that blocks in a system
/// call (poll, accept, read, waitpid) and so must not hold one of the concurrency pool's threads.
/// `name` is what ps and gdb show for it (its first 15 bytes).
func detachThread(named name: String? = nil, _ body: @escaping @Sendable () -> Void) {
    final class Work: Sendable {
        let name: String?
        let body: @Sendable () -> Void
        init(_ name: String?, _ body: @escaping @Sendable () -> Void) { (self.name, self.body) = (name, body) }
    }
    var thread = pthread_t()
    let started = pthread_create(
        &thread, nil,
        { argument in
            let work = Unmanaged<Work>.fromOpaque(argument!).takeRetainedValue()
            if let name = work.name { nameThisThread(name) }
            work.body()
            return nil
        }, Unmanaged.passRetained(Work(name, body)).toOpaque())
    precondition(started == 0, "cannot start a thread: \(String(cString: strerror(started)))")
    pthread_detach(thread)
}

/// What pthread_setname_np does (Swift's Glibc leaves the GNU extensions out): the name in
/// /proc/thread-self/comm, where the kernel keeps it.
private func nameThisThread(_ name: String) {
    let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    _ = Array(name.utf8.prefix(15)).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
}
