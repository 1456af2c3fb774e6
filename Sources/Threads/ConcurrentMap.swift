import Synchronization

/// `body` over every item with at most `width` running at once, each on a thread of its own, and the
/// results in the items' order: for calls that mostly wait on the network (the App Store Server API),
/// where a pool of one thread per core would leave the network idle. `makeState` runs once on each
/// thread, before its first item, so that a thread keeps what is worth reusing between its items (an
/// HTTP connection). Threads are made per call: a call's items take a network round trip each, next to
/// which starting a thread (tens of microseconds) is nothing. Returns when every item is done.
public func concurrentMap<Item: Sendable, State, Result: Sendable>(
    _ items: [Item], width: Int, makeState: @escaping @Sendable () -> State, _ body: @escaping @Sendable (inout State, Item) -> Result
) -> [Result] {
    if items.isEmpty { return [] }
    let done = Inbox<(Int, Result)>()
    let threads = min(max(1, width), items.count)
    let work = ConcurrentWork(items)
    for _ in 0..<threads {
        spawnThread {
            var state = makeState()
            while true {
                let i = work.next.add(1, ordering: .relaxed).oldValue
                guard i < work.items.count else { return }
                done.put((i, body(&state, work.items[i])))
            }
        }
    }
    var results = [Result?](repeating: nil, count: items.count)
    var received = 0
    while received < items.count {
        for (i, result) in done.takeAll(wait: true) {
            results[i] = result
            received += 1
        }
    }
    return results.map { $0! }
}

/// The items of a `concurrentMap` and the next one to take, shared by reference with its threads.
private final class ConcurrentWork<Item: Sendable>: Sendable {
    let items: [Item]
    let next = Atomic<Int>(0)
    init(_ items: [Item]) { self.items = items }
}
