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
        let box = Unmanaged<AnyObject>.fromOpaque(raw!).takeRetainedValue() as! Box
        box.body()
        return nil
    }, context)
    if rc == 0 {
        pthread_detach(thread)
    } else {
        Unmanaged<AnyObject>.fromOpaque(context).release()
        body()
    }
}

/// A bounded first-in, first-out hand-off from one producer thread to one consumer thread.
/// `take` spins briefly before it sleeps: under load the next item is usually moments away, and a
/// sleeping consumer costs a wake-up (tens of microseconds on a busy VM) on every hand-off.
public final class HandoffQueue<Item: Sendable>: @unchecked Sendable {
    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let notEmpty = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private let notFull = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var items: [Item?]
    private var head = 0
    private var count = 0
    private var closed = false
    /// Items queued, readable without the lock (for the consumer's spin).
    private let queued = Atomic<Int>(0)
    private let spinNanoseconds: Int

    /// A queue holding at most `capacity` items; the consumer spins up to `spinMicroseconds` for the
    /// next item before it sleeps (long enough to cover a host's turnaround between two requests).
    public init(capacity: Int, spinMicroseconds: Int = 100) {
        precondition(capacity > 0)
        items = Array(repeating: nil, count: capacity)
        spinNanoseconds = spinMicroseconds * 1000
        pthread_mutex_init(lock, nil)
        pthread_cond_init(notEmpty, nil)
        pthread_cond_init(notFull, nil)
    }

    deinit {
        pthread_cond_destroy(notFull)
        pthread_cond_destroy(notEmpty)
        pthread_mutex_destroy(lock)
        lock.deallocate()
        notEmpty.deallocate()
        notFull.deallocate()
    }

    /// Adds an item, waiting while the queue is full; returns false (dropping it) once the queue is closed.
    @discardableResult
    public func put(_ item: Item) -> Bool {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        while count == items.count && !closed { pthread_cond_wait(notFull, lock) }
        guard !closed else { return false }
        items[(head + count) % items.count] = item
        count += 1
        queued.store(count, ordering: .releasing)
        pthread_cond_signal(notEmpty)
        return true
    }

    /// Removes the oldest item, waiting for one; `spin` false sleeps at once.
    public func take(spin: Bool = true) -> Item {
        if spin, queued.load(ordering: .acquiring) == 0 {
            let deadline = Self.nanoseconds() + spinNanoseconds
            spin: while true {
                for _ in 0..<64 where queued.load(ordering: .acquiring) != 0 { break spin }
                if Self.nanoseconds() >= deadline { break }
            }
        }
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        while count == 0 { pthread_cond_wait(notEmpty, lock) }
        let item = items[head]!
        items[head] = nil
        head = (head + 1) % items.count
        count -= 1
        queued.store(count, ordering: .releasing)
        pthread_cond_signal(notFull)
        return item
    }

    private static func nanoseconds() -> Int {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return ts.tv_sec * 1_000_000_000 + ts.tv_nsec
    }

    /// Stops the producer: a blocked `put` returns false, and later ones drop their items.
    public func close() {
        pthread_mutex_lock(lock)
        closed = true
        pthread_cond_broadcast(notFull)
        pthread_mutex_unlock(lock)
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
    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let notEmpty = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var items: [Item] = []
    /// Items queued, readable without the lock (the serving thread checks it on every batch).
    private let queued = Atomic<Int>(0)

    public init() {
        pthread_mutex_init(lock, nil)
        pthread_cond_init(notEmpty, nil)
    }

    deinit {
        pthread_cond_destroy(notEmpty)
        pthread_mutex_destroy(lock)
        lock.deallocate()
        notEmpty.deallocate()
    }

    /// Whether items wait, without taking the lock.
    public var isEmpty: Bool { queued.load(ordering: .acquiring) == 0 }

    /// Adds an item.
    public func put(_ item: Item) {
        pthread_mutex_lock(lock)
        items.append(item)
        queued.store(items.count, ordering: .releasing)
        pthread_cond_signal(notEmpty)
        pthread_mutex_unlock(lock)
    }

    /// Every queued item, oldest first, after waiting up to `microseconds` for there to be one.
    public func takeAll(waitingUpTo microseconds: Int) -> [Item] {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        let nanos = Int(deadline.tv_nsec) + (microseconds % 1_000_000) * 1000
        deadline.tv_sec += microseconds / 1_000_000 + nanos / 1_000_000_000
        deadline.tv_nsec = nanos % 1_000_000_000
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        while items.isEmpty && pthread_cond_timedwait(notEmpty, lock, &deadline) == 0 {}
        var taken: [Item] = []
        swap(&taken, &items)
        queued.store(0, ordering: .releasing)
        return taken
    }

    /// Every queued item, oldest first; with `wait`, sleeps until there is at least one.
    public func takeAll(wait: Bool) -> [Item] {
        if !wait && isEmpty { return [] }
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        while wait && items.isEmpty { pthread_cond_wait(notEmpty, lock) }
        var taken: [Item] = []
        swap(&taken, &items)
        queued.store(0, ordering: .releasing)
        return taken
    }
}

/// Threads for slow work (password hashing, waits on the network), so that it never runs on the
/// thread that serves every request. Jobs run in the order submitted, each on whichever thread is free.
public final class WorkerPool: Sendable {
    /// How many threads run jobs.
    public let threads: Int
    private let jobs = Inbox<Job>()

    struct Job: Sendable {
        let run: @Sendable () -> Void
    }

    /// A pool of `threads` threads (at least one), started now; they live as long as the process.
    public init(threads: Int) {
        self.threads = max(1, threads)
        let jobs = self.jobs
        for _ in 0..<self.threads {
            spawnThread {
                // Far below the serving thread's priority: slow work gets every idle cycle, but the thread
                // every request waits for gets a core whenever it can run (at nice 10, four busy workers
                // and parsers on two cores held it to about 70% of one; at 19, about 95%).
                #if canImport(Glibc)
                _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)  // 0: this thread (Linux nice is per thread)
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

extension Inbox {
    /// The oldest item, waiting for one; leaves the rest to other consumers (one job per free thread).
    func takeOne() -> Item {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        while items.isEmpty { pthread_cond_wait(notEmpty, lock) }
        let item = items.removeFirst()
        queued.store(items.count, ordering: .releasing)
        if !items.isEmpty { pthread_cond_signal(notEmpty) }
        return item
    }
}
