import Synchronization
import Threads

/// The kernel's other threads, simulated: every job the kernel hands off (a worker's plan, a snapshot,
/// memory given back) waits here until the simulator runs it, on the simulator's one thread, at the
/// moment and in the order the seed picks; periodic helpers run when simulated time passes their due
/// time. A crash drops the jobs and helpers, as the process's threads die with it.
final class SimulatedExecutor: Executor {
    private let jobs = Mutex<[@Sendable () -> Void]>([])
    /// Periodic helpers (the `everysec` syncer): each one's period, when it is next due (simulated µs),
    /// and its tick.
    private let timers = Mutex<[(period: UInt64, due: UInt64, tick: @Sendable () -> Bool)]>([])
    private let clock: SimulatedClock

    init(clock: SimulatedClock) { self.clock = clock }

    func submit(_ job: @escaping @Sendable () -> Void) {
        jobs.withLock { $0.append(job) }
    }

    func every(micros: UInt64, _ tick: @escaping @Sendable () -> Bool) {
        let due = clock.monotonicMicros() + micros
        timers.withLock { $0.append((micros, due, tick)) }
    }

    /// When the next periodic helper falls due (simulated µs), if any.
    var nextDue: UInt64? { timers.withLock { $0.map(\.due).min() } }

    /// Runs each periodic helper that has fallen due (once: a thread that slept through several periods
    /// runs once when it wakes), in the order they were started; returns how many ran.
    @discardableResult
    func fireDue() -> Int {
        let now = clock.monotonicMicros()
        let due = timers.withLock { t in t.indices.filter { t[$0].due <= now } }
        for i in due {
            let tick = timers.withLock { t -> (@Sendable () -> Bool)? in
                guard i < t.count else { return nil }
                t[i].due = now + t[i].period
                return t[i].tick
            }
            if let tick, !tick() { timers.withLock { t in if i < t.count { t[i].period = .max; t[i].due = .max } } }
        }
        return due.count
    }

    /// Jobs waiting.
    var count: Int { jobs.withLock { $0.count } }

    /// Runs the job at `index` (of `count`).
    func run(at index: Int) {
        let job = jobs.withLock { $0.remove(at: index) }
        job()
    }

    /// Runs every job, oldest first, including those the jobs submit.
    func drain() {
        while count > 0 { run(at: 0) }
    }

    /// Drops every job (the process died); returns how many.
    @discardableResult
    func dropAll() -> Int {
        timers.withLock { $0.removeAll() }
        return jobs.withLock { jobs in
            defer { jobs.removeAll() }
            return jobs.count
        }
    }
}
