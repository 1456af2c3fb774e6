#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// A value behind a mutex, with a condition to wait on: the kernel's one lock type, shared by the
/// serving thread and its helper threads (the queues of this module are built on it). It is a pthread
/// mutex rather than the standard library's `Mutex` because ThreadSanitizer sees pthread calls but not
/// `Mutex`'s futex on Linux, and reports every value it guards as a race (scripts/sanitize thread).
/// Uncontended, either costs a few tens of nanoseconds. Timed waits run on the monotonic clock, so
/// setting the wall clock never lengthens or cuts one short.
public final class Locked<Value>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        #if canImport(Glibc)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        #endif
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock; `body` must not take this lock again.
    public func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    /// Waits (not holding the lock meanwhile) until `ready` holds, or until `timeoutMicroseconds` have
    /// passed when given, then runs `body` with the lock held. Whoever makes `ready` true calls `wake`.
    /// With a `Waiting.waiter` (a simulation), the wait is its, unless a thread the kernel did not start
    /// releases it (`releasedOutside`: Swift's concurrency pool): that one always sleeps.
    public func withLock<R>(waitingUntil ready: (inout Value) -> Bool, timeoutMicroseconds: Int? = nil, releasedOutside: Bool = false,
                            _ body: (inout Value) -> R) -> R {
        if !releasedOutside, let waiter = Waiting.waiterOfThisThread {
            // Every thread is simulated on this one: the simulation takes other steps instead of sleeping.
            if !withLock({ ready(&$0) }) {
                waiter.wait(until: { self.withLock { ready(&$0) } }, timeoutMicros: timeoutMicroseconds.map { UInt64(max(0, $0)) })
            }
            return withLock { body(&$0) }
        }
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        if let timeoutMicroseconds {
            var deadline = Self.monotonicNow()
            let nanos = Int(deadline.tv_nsec) + (timeoutMicroseconds % 1_000_000) * 1000
            deadline.tv_sec += timeoutMicroseconds / 1_000_000 + nanos / 1_000_000_000
            deadline.tv_nsec = nanos % 1_000_000_000
            while !ready(&value) && pthread_cond_timedwait(condition, mutex, &deadline) == 0 {}
        } else {
            while !ready(&value) { pthread_cond_wait(condition, mutex) }
        }
        return body(&value)
    }

    /// Wakes one thread waiting in `withLock(waitingUntil:)`, or every one.
    public func wake(all: Bool = false) {
        if all { pthread_cond_broadcast(condition) } else { pthread_cond_signal(condition) }
    }

    /// The monotonic clock now (what timed waits count on).
    static func monotonicNow() -> timespec {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return ts
    }
}

/// How a wait on `Locked` that cannot go on at once is spent when no thread may sleep: a simulation runs
/// every thread of the kernel on its one thread, so a wait there lets it take other steps (the other
/// threads' and clients') until `ready` holds or `timeoutMicros` of its time have passed.
public protocol Waiter: Sendable {
    func wait(until ready: () -> Bool, timeoutMicros: UInt64?)
}

/// The `Waiter` of one thread: none in the binary (waits sleep on the condition); in the simulation, its
/// thread's, which runs every thread of the kernel. Other threads' waits sleep as always.
public enum Waiting {
    private static let installed = Locked<(waiter: any Waiter, thread: pthread_t)?>(nil)
    /// Whether one is installed: read first, so that a wait in the binary takes no other lock.
    private static let any = Atomic<Bool>(false)

    /// Makes `waiter` the calling thread's (nil: none).
    public static func install(_ waiter: (any Waiter)?) {
        installed.withLock { $0 = waiter.map { ($0, pthread_self()) } }
        any.store(waiter != nil, ordering: .releasing)
    }

    /// The calling thread's waiter, if it has one.
    static var waiterOfThisThread: (any Waiter)? {
        guard any.load(ordering: .acquiring) else { return nil }
        return installed.withLock { i in i.flatMap { pthread_equal($0.thread, pthread_self()) != 0 ? $0.waiter : nil } }
    }
}
