/// Bytes waiting on a connection, in order: taken from the front without
/// moving the rest, and handed back to the allocator as soon as they are all
/// taken, so that a connection that once held a large message holds nothing
/// once it is served.
struct ByteQueue {
    private var storage: [UInt8] = []
    private var start = 0

    var count: Int { storage.count - start }
    var isEmpty: Bool { start == storage.count }
    /// What the queue's storage holds, live bytes or not.
    var capacity: Int { storage.capacity }

    mutating func append(contentsOf bytes: some Sequence<UInt8>) {
        storage.append(contentsOf: bytes)
    }

    /// Drops `count` bytes from the front. Returns the capacity this gave
    /// back to the allocator (when the queue emptied), else 0.
    @discardableResult
    mutating func removeFirst(_ count: Int) -> Int {
        start += count
        if start == storage.count {
            let released = storage.capacity
            storage = []
            start = 0
            return released
        }
        // Taken bytes are not kept past half the storage: moving the rest
        // costs no more than the bytes taken since the last move.
        if start >= 64 * 1024, start * 2 >= storage.count {
            storage.removeFirst(start)
            start = 0
        }
        return 0
    }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[start...])) }
    }
}
