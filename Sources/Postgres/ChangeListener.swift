#if canImport(Glibc)
import Glibc
#endif
import Storage
import Threads

/// A commit's announcement on the database's change channel: the user, the user's feed position after the
/// commit, how many positions it took, and the kernel that made it.
struct ChangeAnnouncement: Sendable, Equatable {
    /// The committing kernel's id (`PostgresStore.kernelID`); nil from a kernel older than ids.
    let origin: String?
    let user: String
    let last: UInt64
    let count: UInt64

    /// Parses a payload `"<last> <count> <origin> <user>"`, or an older kernel's `"<last> <count> <user>"`
    /// (the user last: ids may hold spaces). An origin is `k` and 16 hex digits.
    init?(payload: String) {
        let parts = payload.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, let last = UInt64(parts[0]), let count = UInt64(parts[1]) else { return nil }
        let rest = parts[2].utf8
        if rest.count > 18, rest.first == UInt8(ascii: "k"), rest[rest.index(rest.startIndex, offsetBy: 17)] == UInt8(ascii: " "),
           rest.dropFirst().prefix(16).allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }) {
            origin = String(parts[2].prefix(17))
            user = String(parts[2].dropFirst(18))
        } else {
            origin = nil
            user = String(parts[2])
        }
        (self.last, self.count) = (last, count)
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
/// Each connection of the listener is an *epoch*: a commit made while epoch E was connected is heard in
/// E, unless E ends first.
final class ChangeListener: @unchecked Sendable {
    let inbox = Inbox<ChangeAnnouncement>()
    /// Called (on the listener's thread) after announcements arrive: wakes the serving thread.
    var onArrival: @Sendable () -> Void = {}
    private let database: any Database
    private let setup: [Statement]
    private let channel: String
    private let log: @Sendable (String) -> Void
    private let running = SharedFlag()

    init(database: any Database, setup: [Statement], channel: String, log: @escaping @Sendable (String) -> Void) {
        self.database = database
        self.setup = setup
        self.channel = channel
        self.log = log
    }

    /// The epoch connected and registered now (its announcements are being heard), or nil.
    var epoch: Int? { state.withLock { $0.connected ? $0.epoch : nil } }
    private let state = Locked((epoch: 0, connected: false))
    private func setConnected(_ on: Bool) { state.withLock { if on && !$0.connected { $0.epoch += 1 }; $0.connected = on } }
    /// A test's hold on deliveries: while set, what is heard is kept back (a listener running behind).
    let holdForTest = SharedFlag()

    /// Starts listening; returns once the listener is registered, so that every commit after it is heard
    /// (or after one failed attempt: the thread keeps trying). Without `ownThread`, registers at once and
    /// listens only when whoever drives the kernel calls `poll()` (a simulation).
    func start() {
        guard !running.isSet else { return }
        running.set(true)
        guard ownThread else {
            loop.withLock { $0 = Loop() }
            _ = poll(timeoutMilliseconds: 0)
            return
        }
        let generation = generations.withLock { $0 += 1; return $0 }
        let ready = Inbox<Bool>()
        loop.withLock { $0 = Loop() }
        spawnThread { [self] in
            // A thread of an earlier start that has not exited yet ends here too.
            while running.isSet && generations.withLock({ $0 }) == generation {
                if poll(timeoutMilliseconds: holdForTest.isSet ? 20 : 200) { ready.put(true) }
                if loop.withLock({ $0.failed }) { sleep(1) }
            }
            unregister()
            exited.put(true)
        }
        _ = ready.takeAll(wait: true)
    }

    /// Whether the listener runs on a thread of its own (else `poll()` is called for it).
    var ownThread = true

    /// What one listening loop keeps between polls.
    private struct Loop {
        var connection: (any DatabaseSession)?
        var signalled = false
        var kept: [ChangeAnnouncement] = []
        /// The last poll failed: the next connects again, after a pause on a thread of its own.
        var failed = false
    }
    private let loop = Locked(Loop())

    /// One round of listening: connects (and registers) when not connected, then takes what was heard
    /// within `timeoutMilliseconds` into `inbox`. Returns true the first time it has connected or failed
    /// (start-up waits for that).
    @discardableResult
    func poll(timeoutMilliseconds: Int32) -> Bool {
        guard running.isSet else { return false }
        var l = loop.withLock { $0 }
        var first = false
        defer { loop.withLock { $0 = l } }
        do {
            l.failed = false
            if l.connection == nil || l.connection!.broken {
                setConnected(false)
                l.connection = try register()
                setConnected(true)
            }
            if !l.signalled {
                l.signalled = true
                first = true
            }
            for (_, payload) in try l.connection!.notifications(timeoutMilliseconds: timeoutMilliseconds) {
                if let a = ChangeAnnouncement(payload: payload) { l.kept.append(a) }
            }
            guard !l.kept.isEmpty, !holdForTest.isSet else { return first }
            for a in l.kept { inbox.put(a) }
            l.kept.removeAll()
            onArrival()
        } catch {
            setConnected(false)
            log("listening for other kernels' changes: \(error); retrying in 1 s")
            if !l.signalled {
                l.signalled = true
                first = true
            }
            l.connection = nil
            l.failed = true
        }
        return first
    }

    /// Leaves the listeners and stops listening, when connected.
    private func unregister() {
        let connection = loop.withLock { l in defer { l.connection = nil }; return l.connection }
        if let connection, !connection.broken {
            _ = try? connection.run([Statement("DELETE FROM listeners WHERE pid = pg_backend_pid()"), Statement("UNLISTEN *")])
        }
        setConnected(false)
    }

    /// Stops listening; with `wait`, returns once the thread has unregistered (at most about a second).
    func stop(wait: Bool = false) {
        guard running.isSet else { return }
        running.set(false)
        guard ownThread else { return unregister() }
        if wait { _ = exited.takeAll(waitingUpTo: 1_500_000) }
    }
    private let exited = Inbox<Bool>()
    private let generations = Locked(0)

    /// Connects, removes listeners whose processes are gone, adds this one and listens.
    private func register() throws(StorageError) -> any DatabaseSession {
        let connection = try database.connect(setup: setup, log: log)
        try Schema.check(connection.run([
            Statement("DELETE FROM listeners WHERE pid NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)"),
            Statement("INSERT INTO listeners (pid) VALUES (pg_backend_pid()) ON CONFLICT DO NOTHING"),
            Statement("LISTEN \(Schema.quote(channel))"),
        ]))
        return connection
    }
}
