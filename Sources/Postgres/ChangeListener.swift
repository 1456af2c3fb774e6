#if canImport(Glibc)
import Glibc
#endif
import Storage
import Threads

/// A commit's announcement on the database's change channel: the user, the user's feed position after the
/// commit, how many positions it took, and the server process that made it.
struct ChangeAnnouncement: Sendable {
    let pid: Int32
    let user: String
    let last: UInt64
    let count: UInt64

    /// Parses a payload `"<last> <count> <user>"` (the user last: ids may hold spaces).
    init?(pid: Int32, payload: String) {
        let parts = payload.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, let last = UInt64(parts[0]), let count = UInt64(parts[1]) else { return nil }
        (self.pid, self.user, self.last, self.count) = (pid, String(parts[2]), last, count)
    }
}

/// Listens on the database's change channel for as long as this kernel has subscribed hosts, on a
/// connection and thread of its own, and leaves what it hears in `inbox` in delivery order (commit order
/// across every kernel: PostgreSQL delivers notifications in the order their transactions committed).
///
/// Kernels send notifications only while some kernel listens, which the `listeners` table tells them: a
/// listener adds its server process there and removes it when it stops; rows of processes that are gone
/// (a killed kernel) are removed by the next listener to start. A listener whose connection breaks
/// reconnects every second; what was committed meanwhile is not announced (hosts catch up from the feed).
final class ChangeListener: @unchecked Sendable {
    let inbox = Inbox<ChangeAnnouncement>()
    /// Called (on the listener's thread) after announcements arrive: wakes the serving thread.
    var onArrival: @Sendable () -> Void = {}
    private let url: String
    private let setup: [Statement]
    private let channel: String
    private let log: @Sendable (String) -> Void
    private let running = SharedFlag()

    init(url: String, setup: [Statement], channel: String, log: @escaping @Sendable (String) -> Void) {
        self.url = url
        self.setup = setup
        self.channel = channel
        self.log = log
    }

    /// Whether the listener is connected and registered now (announcements are being heard).
    var isConnected: Bool { connected.isSet }
    private let connected = SharedFlag()

    /// Starts listening; returns once the listener is registered, so that every commit after it is heard
    /// (or after one failed attempt: the thread keeps trying).
    func start() {
        guard !running.isSet else { return }
        running.set(true)
        let generation = generations.withLock { $0 += 1; return $0 }
        let ready = Inbox<Bool>()
        spawnThread { [self] in
            var connection: DatabaseConnection?
            var signalled = false
            // A thread of an earlier start that has not exited yet ends here too.
            while running.isSet && generations.withLock({ $0 }) == generation {
                do {
                    if connection == nil || connection!.broken {
                        connection = try register()
                        connected.set(true)
                    }
                    if !signalled {
                        signalled = true
                        ready.put(true)
                    }
                    let heard = try connection!.notifications(timeoutMilliseconds: 200)
                    guard !heard.isEmpty else { continue }
                    for (pid, payload) in heard {
                        if let a = ChangeAnnouncement(pid: pid, payload: payload) { inbox.put(a) }
                    }
                    onArrival()
                } catch {
                    connected.set(false)
                    log("listening for other kernels' changes: \(error); retrying in 1 s")
                    if !signalled {
                        signalled = true
                        ready.put(true)
                    }
                    connection = nil
                    sleep(1)
                }
            }
            if let connection, !connection.broken {
                _ = try? connection.run([Statement("DELETE FROM listeners WHERE pid = pg_backend_pid()"), Statement("UNLISTEN *")])
            }
            connected.set(false)
            exited.put(true)
        }
        _ = ready.takeAll(wait: true)
    }

    /// Stops listening; with `wait`, returns once the thread has unregistered (at most about a second).
    func stop(wait: Bool = false) {
        guard running.isSet else { return }
        running.set(false)
        if wait { _ = exited.takeAll(waitingUpTo: 1_500_000) }
    }
    private let exited = Inbox<Bool>()
    private let generations = Locked(0)

    /// Connects, removes listeners whose processes are gone, adds this one and listens.
    private func register() throws(StorageError) -> DatabaseConnection {
        let connection = try DatabaseConnection(url: url, setup: setup, log: log)
        try Schema.check(connection.run([
            Statement("DELETE FROM listeners WHERE pid NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)"),
            Statement("INSERT INTO listeners (pid) VALUES (pg_backend_pid()) ON CONFLICT DO NOTHING"),
            Statement("LISTEN \(Schema.quote(channel))"),
        ]))
        return connection
    }
}
