#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Runs `body` on a new detached thread (or inline if no thread can be made). The kernel uses a few
/// long-lived threads of its own (request reader, log syncer, snapshot writer) rather than a pool,
/// so that none of them can be starved by the others.
public func spawnThread(_ body: @escaping @Sendable () -> Void) {
    final class Box { let body: @Sendable () -> Void; init(_ b: @escaping @Sendable () -> Void) { body = b } }
    let context = Unmanaged.passRetained(Box(body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(&thread, nil, { raw in
        guard let raw else { return nil }
        Unmanaged<Box>.fromOpaque(raw).takeRetainedValue().body()
        return nil
    }, context)
    if rc == 0 {
        pthread_detach(thread)
    } else {
        Unmanaged<Box>.fromOpaque(context).release()
        body()
    }
}

/// A bounded first-in, first-out hand-off from one producer thread to one consumer thread.
/// `take` spins briefly before it sleeps: under load the next item is usually moments away, and a
/// sleeping consumer costs a wake-up (tens of microseconds on a busy VM) on every hand-off. With one
/// producer and one consumer, at most one of them sleeps at a time, so one condition serves both.
///
/// Any thread may also `signal` the consumer without queueing an item and without ever waiting: bits
/// of a mask that `takeOrSignals` hands over, merged, once no item is queued. (A signal wakes whichever
/// side sleeps; if that is the producer, the queue is full and the consumer takes the signals after
/// the items.)
public final class HandoffQueue<Item: Sendable>: @unchecked Sendable {
    private struct Ring {
        var items: [Item?]
        var head = 0
        var count = 0
        var closed = false
        var signals: UInt32 = 0
    }

    private let ring: Locked<Ring>
    private let capacity: Int
    /// Items queued, readable without the lock (for the consumer's spin).
    private let queued = Atomic<Int>(0)
    private let spinNanoseconds: Int

    /// A queue holding at most `capacity` items; the consumer spins up to `spinMicroseconds` for the
    /// next item before it sleeps (long enough to cover a host's turnaround between two requests).
    public init(capacity: Int, spinMicroseconds: Int = 100) {
        precondition(capacity > 0)
        self.capacity = capacity
        ring = Locked(Ring(items: Array(repeating: nil, count: capacity)))
        spinNanoseconds = spinMicroseconds * 1000
    }

    /// Adds an item, waiting while the queue is full; returns false (dropping it) once the queue is closed.
    @discardableResult
    public func put(_ item: Item) -> Bool {
        let capacity = capacity
        let added = ring.withLock(waitingUntil: { $0.count < capacity || $0.closed }) { ring -> Bool in
            guard !ring.closed else { return false }
            ring.items[(ring.head + ring.count) % capacity] = item
            ring.count += 1
            self.queued.store(ring.count + (ring.signals != 0 ? 1 : 0), ordering: .releasing)
            return true
        }
        if added { ring.wake() }
        return added
    }

    /// Removes the oldest item, waiting for one; `spin` false sleeps at once.
    public func take(spin: Bool = true) -> Item {
        while true {
            if case .item(let item) = takeOrSignals(spin: spin, signalsToo: false) { return item }
        }
    }

    /// What `takeOrSignals` gives: the oldest item, or (none being queued) the signals since the last.
    public enum Taken {
        case item(Item)
        case signals(UInt32)
    }

    /// Sets `bits` for the consumer (from any thread; never waits).
    public func signal(_ bits: UInt32) {
        ring.withLock { ring in
            ring.signals |= bits
            self.queued.store(ring.count + 1, ordering: .releasing)
        }
        ring.wake()
    }

    /// Removes the oldest item, or takes the signals when no item is queued, waiting for either; `spin`
    /// false sleeps at once.
    public func takeOrSignals(spin: Bool = true) -> Taken {
        takeOrSignals(spin: spin, signalsToo: true)
    }

    private func takeOrSignals(spin: Bool, signalsToo: Bool) -> Taken {
        if spin, queued.load(ordering: .acquiring) == 0 {
            let deadline = Self.nanoseconds() + spinNanoseconds
            spin: while true {
                for _ in 0..<64 where queued.load(ordering: .acquiring) != 0 { break spin }
                if Self.nanoseconds() >= deadline { break }
            }
        }
        let capacity = capacity
        let taken = ring.withLock(waitingUntil: { $0.count > 0 || (signalsToo && $0.signals != 0) }) { ring -> Taken? in
            guard ring.count > 0 else {
                let bits = ring.signals
                ring.signals = 0
                self.queued.store(0, ordering: .releasing)
                return .signals(bits)
            }
            return self.removeOldest(&ring).map { .item($0) }
        }
        ring.wake()
        // The ring holds an item at every counted slot.
        guard let taken else { preconditionFailure("HandoffQueue: a counted slot was empty") }
        return taken
    }

    /// Removes the ring's oldest item (holding its lock; `count` > 0).
    private func removeOldest(_ ring: inout Ring) -> Item? {
        let item = ring.items[ring.head]
        ring.items[ring.head] = nil
        ring.head = (ring.head + 1) % capacity
        ring.count -= 1
        // A signal left counts as one more, so the consumer's spin sees it.
        queued.store(ring.count + (ring.signals != 0 ? 1 : 0), ordering: .releasing)
        return item
    }

    /// The oldest item without waiting, when one is queued and `wanted` takes it; else nil, and the queue
    /// is as it was (signals stay for `takeOrSignals`).
    public func pollItem(if wanted: (Item) -> Bool) -> Item? {
        let item = ring.withLock { ring -> Item? in
            guard ring.count > 0, let oldest = ring.items[ring.head], wanted(oldest) else { return nil }
            return self.removeOldest(&ring)
        }
        if item != nil { ring.wake() }
        return item
    }

    private static func nanoseconds() -> Int {
        let ts = Locked<Int>.monotonicNow()
        return ts.tv_sec * 1_000_000_000 + ts.tv_nsec
    }

    /// The oldest item, or the signals when no item is queued, without waiting: nil when there is
    /// neither (a consumer driven step by step, as the simulation drives the stdio server).
    public func poll() -> Taken? {
        guard queued.load(ordering: .acquiring) != 0 else { return nil }
        return takeOrSignals(spin: false)
    }

    /// Whether a `put` would wait now.
    public var isFull: Bool { ring.withLock { $0.count >= capacity } }

    /// Stops the producer: a blocked `put` returns false, and later ones drop their items.
    public func close() {
        ring.withLock { $0.closed = true }
        ring.wake(all: true)
    }
}

/// A boolean that one thread sets and others read without locking.
public final class SharedFlag: Sendable {
    private let value = Atomic<Bool>(false)

    /// A flag, initially false.
    public init() {}

    /// The current value.
    public var isSet: Bool { value.load(ordering: .acquiring) }

    /// Sets the value.
    public func set(_ newValue: Bool) { value.store(newValue, ordering: .releasing) }
}

/// An unbounded multi-producer queue whose one consumer can wait for the next items: where worker
/// threads leave finished work for the serving thread. `put` never blocks, so a worker is never held
/// up by a busy serving thread.
public final class Inbox<Item: Sendable>: @unchecked Sendable {
    /// Items from `head` on are queued; taken ones before it are dropped when the rest are taken, so
    /// `takeOne` is O(1) however many wait.
    private struct Pending {
        var items: [Item] = []
        var head = 0
        var count: Int { items.count - head }

        mutating func takeAll() -> [Item] {
            let taken = head == 0 ? items : Array(items[head...])
            items = []
            head = 0
            return taken
        }
    }

    private let pending = Locked(Pending())
    /// Items queued, readable without the lock (the serving thread checks it on every batch).
    private let queued = Atomic<Int>(0)

    public init() {}

    /// Whether items wait, without taking the lock.
    public var isEmpty: Bool { queued.load(ordering: .acquiring) == 0 }

    /// Adds an item.
    public func put(_ item: Item) {
        pending.withLock { p in
            p.items.append(item)
            self.queued.store(p.count, ordering: .releasing)
        }
        pending.wake()
    }

    /// Every queued item, oldest first, after waiting up to `microseconds` for there to be one.
    public func takeAll(waitingUpTo microseconds: Int) -> [Item] {
        return pending.withLock(waitingUntil: { $0.count > 0 }, timeoutMicroseconds: microseconds) { p in
            self.queued.store(0, ordering: .releasing)
            return p.takeAll()
        }
    }

    /// Every queued item, oldest first; with `wait`, sleeps until there is at least one.
    public func takeAll(wait: Bool) -> [Item] {
        if !wait && isEmpty { return [] }
        return pending.withLock(waitingUntil: { !wait || $0.count > 0 }) { p in
            self.queued.store(0, ordering: .releasing)
            return p.takeAll()
        }
    }

    /// The oldest item, waiting for one; leaves the rest to other consumers (one job per free thread).
    func takeOne() -> Item {
        let (item, more) = pending.withLock(waitingUntil: { $0.count > 0 }) { p -> (Item, Bool) in
            let item = p.items[p.head]
            p.head += 1
            // Drop the taken prefix once it is half the array: amortised O(1) a take.
            if p.head * 2 >= p.items.count {
                p.items.removeFirst(p.head)
                p.head = 0
            }
            self.queued.store(p.count, ordering: .releasing)
            return (item, p.count > 0)
        }
        if more { pending.wake() }
        return item
    }
}

/// Where the kernel runs work off the serving thread. Every job the kernel hands to another thread goes
/// through one (a worker's plan, a snapshot, memory given back), so that a simulation can run them all
/// on its one thread, each at the moment its seed picks (`healthkernel-sim`).
public protocol Executor: Sendable {
    /// Runs `job` on another thread, some time later.
    func submit(_ job: @escaping @Sendable () -> Void)
    /// Runs `tick` on another thread every `micros` microseconds until it returns false (a periodic
    /// helper: the log's `everysec` syncer).
    func every(micros: UInt64, _ tick: @escaping @Sendable () -> Bool)
}

extension Executor {
    /// A thread of its own at the serving thread's priority (a starved syncer would widen the window of
    /// writes a power cut may take), sleeping between ticks.
    public func every(micros: UInt64, _ tick: @escaping @Sendable () -> Bool) {
        spawnThread {
            repeat { usleep(UInt32(min(micros, UInt64(UInt32.max)))) } while tick()
        }
    }
}

/// A new thread for each job, at `nice` (Linux: per thread): for rare, long jobs that must never wait
/// behind other work (a background snapshot).
public struct ThreadPerJob: Executor {
    public let nice: Int32

    public init(nice: Int32 = 0) { self.nice = nice }

    public func submit(_ job: @escaping @Sendable () -> Void) {
        let nice = nice
        spawnThread {
            #if canImport(Glibc)
            if nice != 0 { _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, nice) }  // 0: this thread
            #endif
            job()
        }
    }
}

/// Threads for slow work (password hashing, waits on the network), so that it never runs on the
/// thread that serves every request. Jobs run in the order submitted, each on whichever thread is free.
public final class WorkerPool: Executor {
    /// How many threads run jobs.
    public let threads: Int
    private let jobs = Inbox<Job>()

    struct Job: Sendable {
        let run: @Sendable () -> Void
    }

    /// How a pool's threads are scheduled against the serving thread.
    public enum Priority: Sendable {
        /// Far below the serving thread: slow work gets every idle cycle, but the thread every request
        /// waits for gets a core whenever it can run (at nice 10, four busy workers and parsers on two
        /// cores held it to about 70% of one; at 19, about 95%). Only for work that holds nothing others
        /// wait for: a starved thread holding a lock starves its waiters too.
        case background
        /// As the serving thread (a thread that holds a user's lock while it runs).
        case serving
    }

    /// A pool of `threads` threads (at least one), started now; they live as long as the process.
    public init(threads: Int, priority: Priority = .background) {
        self.threads = max(1, threads)
        let jobs = self.jobs
        for _ in 0..<self.threads {
            spawnThread {
                #if canImport(Glibc)
                if priority == .background {
                    _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)  // 0: this thread (Linux nice is per thread)
                }
                #endif
                while true { jobs.takeOne().run() }
            }
        }
    }

    /// One thread per core (at least one): the serving thread mostly waits while slow work runs, so
    /// every core hashes.
    public static func perCore() -> WorkerPool {
        WorkerPool(threads: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
    }

    /// Runs `job` on a pool thread.
    public func submit(_ job: @escaping @Sendable () -> Void) {
        jobs.put(Job(run: job))
    }
}
