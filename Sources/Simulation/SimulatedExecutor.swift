import Synchronization
import Threads

/// The kernel's other threads, simulated: every job the kernel hands off (a worker's plan, a snapshot,
/// memory given back) waits here until the simulator runs it, on the simulator's one thread, at the
/// moment and in the order the seed picks. A crash drops the jobs, as the process's threads die with it.
final class SimulatedExecutor: Executor {
    private let jobs = Mutex<[@Sendable () -> Void]>([])

    func submit(_ job: @escaping @Sendable () -> Void) {
        jobs.withLock { $0.append(job) }
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
        jobs.withLock { jobs in
            defer { jobs.removeAll() }
            return jobs.count
        }
    }
}
