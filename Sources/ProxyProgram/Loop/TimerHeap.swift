/// A loop's timers: a binary min-heap of deadlines (monotonic nanoseconds).
/// A cancelled timer's entry stays in the heap until it comes to the top and
/// is dropped there; its action is gone at once.
struct TimerHeap {
    typealias ID = UInt64

    private var heap: [(at: UInt64, id: ID)] = []
    private var actions: [ID: () -> Void] = [:]
    private var lastID: ID = 0

    mutating func add(at deadline: UInt64, _ action: @escaping () -> Void) -> ID {
        lastID += 1
        actions[lastID] = action
        heap.append((deadline, lastID))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].at < heap[parent].at else { break }
            heap.swapAt(child, parent)
            child = parent
        }
        return lastID
    }

    mutating func cancel(_ id: ID) { actions[id] = nil }

    /// The earliest deadline of a timer not cancelled.
    mutating func next() -> UInt64? {
        while let top = heap.first {
            if actions[top.id] != nil { return top.at }
            removeTop()
        }
        return nil
    }

    /// The action of the earliest timer due by `now`, taken out; the caller runs it (an action may add
    /// or cancel timers, so it runs outside the heap).
    mutating func takeDue(now: UInt64) -> (() -> Void)? {
        while let top = heap.first, top.at <= now {
            removeTop()
            if let action = actions.removeValue(forKey: top.id) { return action }
        }
        return nil
    }

    private mutating func removeTop() {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var least = parent
            if left < heap.count, heap[left].at < heap[least].at { least = left }
            if right < heap.count, heap[right].at < heap[least].at { least = right }
            guard least != parent else { return }
            heap.swapAt(parent, least)
            parent = least
        }
    }
}
