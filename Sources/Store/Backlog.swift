import Chrono
import Storage

/// Units of work that are committed (their log record is queued or written whole) but whose changes are
/// still being applied to memory, a slice at a time between other requests. A month of a first HealthKit
/// sync is 43,000 changes and about half a second of applying on this machine's cores; applied at once it
/// held every other user's requests that long. In slices of a few milliseconds, another user's request
/// waits for at most one slice.
///
/// Nothing can see a half-applied unit: any read or write of a user with a unit in the backlog first
/// finishes that user's units (`settle(_:)`), a snapshot first finishes them all, and the log holds each
/// unit as one record, so recovery applies all of it or none. The dispatcher holds the same stream's
/// later requests of the user and the unit's answer until the unit is applied, so in the usual flow the
/// settling never happens on the serving thread's time.
final class Backlog {
    /// One unit being applied.
    struct Unit {
        let entries: [Transaction.Entry]
        let user: String
        /// Its log record (feed positions derive from it) and commit time.
        let record: UInt64
        let at: Int64
        /// Its commit id (what `Store.isApplied` answers for).
        let commit: UInt64
        /// Entries before this index are applied.
        var next = 0
        /// Its record was written: slices applied from now on need no undo (a later failed write undoes
        /// only what came after it).
        var durable = false
        /// Changes for host events, handed over when the unit is done (so they are announced once, in
        /// commit order for the user, after the unit is whole in memory).
        var changes: [(commit: UInt64, user: String, change: FeedCandidate)] = []
    }

    /// Units in commit order. A handful at most: one per user syncing at once.
    var units: [Unit] = []
    /// Units per user, so that the per-read check is one dictionary probe, and none when empty.
    private(set) var users: [String: Int] = [:]
    /// Applies every unit of a user at once, or of every user for nil (set by the store).
    var finish: (String?) -> Void = { _ in }

    /// Changes applied between looks at the clock (the dispatcher sets a slice's time).
    static let entriesPerCheck = 256

    var isEmpty: Bool { units.isEmpty }

    /// Finishes `user`'s units before their rows are read or written. O(1) when the backlog is empty.
    @inline(__always)
    func settle(_ user: String) {
        if !users.isEmpty, users[user] != nil { finish(user) }
    }

    /// Finishes every unit before a read across users.
    func finishAll() {
        if !units.isEmpty { finish(nil) }
    }

    func add(_ unit: Unit) {
        units.append(unit)
        users[unit.user, default: 0] += 1
    }

    func remove(at index: Int) -> Unit {
        let unit = units.remove(at: index)
        if let n = users[unit.user], n > 1 { users[unit.user] = n - 1 } else { users[unit.user] = nil }
        return unit
    }

    /// Whether `tx` may be applied in slices: big, every change a put or delete of one user's rows (no
    /// unique keys, whose holders other users' requests read, and no removal of a user).
    static func user(ofSliceable tx: Transaction, bigUnit: Int) -> String? {
        guard tx.entries.count >= bigUnit, let user = tx.entries.first?.user else { return nil }
        for entry in tx.entries {
            switch entry {
            case .put(_, let u, _, _), .delete(_, let u, _): if u != user { return nil }
            case .deleteUser, .claim, .release: return nil
            }
        }
        return user
    }
}

extension Store {
    /// Applies the backlog for up to `budgetMicros`, oldest unit first; returns whether any is left.
    public func applyBacklog(budgetMicros: UInt64) -> Bool {
        let began = clock.monotonicMicros()
        while !backlog.isEmpty {
            applySlice(of: 0, entries: Backlog.entriesPerCheck)
            if clock.monotonicMicros() - began >= budgetMicros { break }
        }
        return !backlog.isEmpty
    }

    /// Whether commit `id` is wholly applied in memory (or was undone): false while it is in the backlog.
    public func isApplied(_ commit: UInt64) -> Bool {
        !backlog.units.contains { $0.commit == commit }
    }

    /// Whether any unit is waiting to be applied.
    public var hasBacklog: Bool { !backlog.isEmpty }

    /// Applies every unit of `user` (every unit for nil) now: someone reads or writes their rows.
    func finishUnits(of user: String?) {
        while let index = backlog.units.firstIndex(where: { user == nil || $0.user == user }) {
            applySlice(of: index, entries: .max)
        }
    }

    /// Queues a sliceable unit: its record goes to the log now, whole, and its changes to memory in
    /// slices. Takes its record number and commit id now, so later commits follow it in the log.
    func enqueue(_ tx: Transaction, user: String, record: UInt64, at: Int64) {
        backlog.add(Backlog.Unit(entries: tx.entries, user: user, record: record, at: at, commit: lastCommitID))
    }

    /// Applies up to `entries` changes of unit `index`; removes it once done.
    private func applySlice(of index: Int, entries count: Int) {
        var unit = backlog.units[index]
        let end = count == .max ? unit.entries.count : min(unit.entries.count, unit.next + count)
        // The user's version moves before the slice's tables are marked with it: marked with the version
        // before, a table the user's previous commit had marked kept its version, and a plan made before
        // the slice passed the check meant to refuse it (found by the simulation: a day summary missing
        // the samples of a sliced ingest).
        touch(unit.user)
        for i in unit.next..<end {
            let entry = unit.entries[i]
            let entryUndo = apply(entry, Stamp(position: Stamp.position(record: unit.record, index: i), at: unit.at),
                                  commit: unit.commit, changes: &unit.changes)
            if keepsRecords && !unit.durable { undo.append(entryUndo) }
            switch entry {
            case .put(let handle, let user, _, _), .delete(let handle, let user, _): markChanged(handle, user)
            default: break
            }
        }
        unit.next = end
        guard unit.next == unit.entries.count else {
            backlog.units[index] = unit
            return
        }
        _ = backlog.remove(at: index)
        handOver(unit.changes, durable: unit.durable || !keepsRecords)
    }

    /// The log write of everything queued succeeded (`true`) or failed: units still being applied are
    /// durable from now on, or were undone with the rest and are dropped.
    func backlogWritten(_ succeeded: Bool) {
        guard !backlog.isEmpty else { return }
        if succeeded {
            for i in backlog.units.indices { backlog.units[i].durable = true }
        } else {
            var i = 0
            while i < backlog.units.count {
                if backlog.units[i].durable { i += 1 } else { _ = backlog.remove(at: i) }
            }
        }
    }
}
