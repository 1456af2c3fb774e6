import Chrono
import Foundation
import Testing
import Storage
import TestSupport
@testable import Store

/// A clock that moves on a millisecond each time it is read.
final class TickingClock: Clock, @unchecked Sendable {
    private let lock = NSLock()
    private var ms: Int64 = 1_700_000_000_000
    func now() -> Timestamp { lock.withLock { ms += 1; return Timestamp(milliseconds: ms) } }
    func monotonicMicros() -> UInt64 { SystemClock().monotonicMicros() }
}

/// The change feed as the store keeps it: stamps beside synced rows, tombstones for deleted ones.
@Suite(.oneStoreOnly) struct FeedTests {
    /// A store with synced tables `notes` (entity `note`, id "n-" + key) and `tasks` (entity `task`,
    /// id "t-" + key), and a table that is not synced.
    final class FeedHarness {
        let dir: String
        let store: Store
        let notes: Table<Note>
        let tasks: Table<Note>
        let other: Table<Note>

        init(dir: String? = nil, copying source: String? = nil, failBeyond: Int? = nil, tombstones: Int = 0) throws {
            self.dir = dir ?? FileManager.default.temporaryDirectory.appendingPathComponent("hk-feed-\(UUID().uuidString)").path
            if let source { try FileManager.default.copyItem(atPath: source, toPath: self.dir) }
            var options = StoreOptions(dataDir: self.dir)
            options.fsync = .never
            options.failAppendsBeyondBytes = failBeyond
            options.tombstonesPerUser = tombstones
            store = Store(options: options, clock: TickingClock(), log: { _ in })
            notes = store.table("notes", of: Note.self, entity: Entity("note", id: { "n-" + $0 }))
            tasks = store.table("tasks", of: Note.self, entity: Entity("task", id: { "t-" + $0 }))
            other = store.table("other", of: Note.self)
            try store.open()
        }

        func feed(_ user: String, after: UInt64? = nil, limit: Int = 1000) -> FeedPage {
            store.feed(user: user, after: after, limit: limit, entities: nil)
        }

        /// The whole feed of `user`, read in pages of `size`.
        func paged(_ user: String, size: Int) -> [FeedEntry] {
            var out: [FeedEntry] = [], after: UInt64? = nil
            while true {
                let page = feed(user, after: after, limit: size)
                out += page.entries
                after = page.entries.last?.position ?? after
                if !page.hasMore { return out }
            }
        }

        /// Whether each synced table's feed index lists exactly the stamps of its rows and tombstones.
        func indexesMatchStamps() -> Bool {
            [notes, tasks].allSatisfy { t in
                Set(t.rows.keys).union(t.deleted.keys).union(t.feedIndex.keys).allSatisfy { user in
                    t.feedIndexReady(user)
                    var want: [String] = [], got: [String] = []
                    t.rows[user]?.forEach { key, _, stamp in want.append("\(stamp!.position) \(key) row") }
                    t.deleted[user]?.forEach { key, stamp, _ in want.append("\(stamp.position) \(key) tombstone") }
                    t.feedIndex[user]?.forEach { seq, ref, _ in got.append("\(seq) \(ref.key) \(ref.deleted ? "tombstone" : "row")") }
                    return Set(want) == Set(got) && got.count == want.count
                }
            }
        }
    }

    /// What the feed must show: per user, per key, the latest change in commit order.
    struct Model {
        var latest: [String: [String: (order: Int, op: FeedEntry.Op)]] = [:]
        var rows: [String: Set<String>] = [:]
        var order = 0

        mutating func put(_ user: String, _ key: String) {
            order += 1
            latest[user, default: [:]][key] = (order, .upsert)
            rows[user, default: []].insert(key)
        }

        mutating func delete(_ user: String, _ key: String) {
            guard rows[user]?.remove(key) != nil else { return }  // deleting nothing changes nothing
            order += 1
            latest[user, default: [:]][key] = (order, .delete)
        }

        mutating func deleteUser(_ user: String) {
            latest[user] = nil
            rows[user] = nil
        }

        /// Keys are entity ids ("n-k1", "t-k1").
        func expected(_ user: String) -> [String] {
            (latest[user] ?? [:]).sorted { $0.value.order < $1.value.order }.map { "\($0.key) \($0.value.op.rawValue)" }
        }
    }

    @Test func randomChangesMatchAModelAndSurviveReplayAndSnapshots() throws {
        let h = try FeedHarness()
        var model = Model()
        var rng = SystemRandomNumberGenerator()
        let users = ["u1", "u2", "u3"]
        for round in 0..<400 {
            var tx = Transaction()
            var next = model
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                let user = users.randomElement(using: &rng)!
                let key = "k\(Int.random(in: 0..<12, using: &rng))"
                let (table, id) = Bool.random(using: &rng) ? (h.notes, "n-" + key) : (h.tasks, "t-" + key)
                switch Int.random(in: 0..<20, using: &rng) {
                case 0..<11:
                    tx.put(table, user: user, key: key, Note("\(round)"))
                    next.put(user, id)
                case 11..<17:
                    tx.delete(table, user: user, key: key)
                    next.delete(user, id)
                case 17, 18:
                    tx.put(h.other, user: user, key: key, Note("x"))  // not synced: no feed entry
                default:
                    tx.deleteUser(user)
                    next.deleteUser(user)
                }
            }
            try h.store.commit(tx)
            model = next
            if round % 37 == 0 { _ = h.store.flush() }
            if round % 50 == 0 { #expect(h.indexesMatchStamps()) }
        }
        #expect(h.indexesMatchStamps())
        _ = h.store.flush()
        var before: [String: [FeedEntry]] = [:]
        for user in users {
            let entries = h.feed(user).entries
            #expect(entries.map { "\($0.id) \($0.op.rawValue)" } == model.expected(user))
            #expect(entries.map(\.position) == entries.map(\.position).sorted() && Set(entries.map(\.position)).count == entries.count)
            #expect(entries.allSatisfy { ($0.entity == "note") == $0.id.hasPrefix("n-") && $0.position <= h.store.feedHorizon })
            #expect(h.paged(user, size: 3) == entries, "pages of 3 differ from one read")
            #expect(h.paged(user, size: 1) == entries, "pages of 1 differ from one read")
            let tasks = h.store.feed(user: user, after: nil, limit: 1000, entities: ["task"]).entries
            #expect(tasks == entries.filter { $0.entity == "task" }, "the entities filter")
            before[user] = entries
        }
        h.store.abandon()
        // Replayed from the log: the same positions and times.
        let replayed = try FeedHarness(dir: h.dir)
        for user in users { #expect(replayed.feed(user).entries == before[user]) }
        #expect(replayed.indexesMatchStamps())
        _ = try replayed.store.snapshot()
        replayed.store.abandon()
        // Loaded from a snapshot: the same again, and new changes come after everything before.
        let loaded = try FeedHarness(dir: h.dir)
        for user in users { #expect(loaded.feed(user).entries == before[user]) }
        #expect(loaded.indexesMatchStamps())
        let horizon = loaded.store.feedHorizon
        var tx = Transaction()
        tx.put(loaded.notes, user: "u1", key: "new", Note("n"))
        try loaded.store.commit(tx)
        // Loaded again, a user's first change comes before any feed read: the index is built then.
        let lazy = try FeedHarness(dir: h.dir + "-copy", copying: h.dir)
        var first = Transaction()
        for user in users {
            first.put(lazy.notes, user: user, key: "k1", Note("again"))
            first.delete(lazy.tasks, user: user, key: "k2")
        }
        try lazy.store.commit(first)
        #expect(lazy.indexesMatchStamps())
        lazy.store.abandon()
        let after = loaded.feed("u1", after: horizon).entries
        #expect(after.map(\.id) == ["n-new"] && after[0].position > horizon)
        loaded.store.abandon()
    }

    @Test func aFailedWriteLeavesTheFeedAsItWas() throws {
        let h = try FeedHarness(failBeyond: 400)
        var tx = Transaction()
        tx.put(h.notes, user: "u1", key: "a", Note("1"))
        tx.put(h.notes, user: "u1", key: "b", Note("1"))
        try h.store.commit(tx)
        tx = Transaction()
        tx.delete(h.notes, user: "u1", key: "b")
        try h.store.commit(tx)
        #expect(h.store.flush().failedCommits.isEmpty)
        let before = h.feed("u1").entries
        #expect(before.map { "\($0.id) \($0.op.rawValue)" } == ["n-a upsert", "n-b delete"])
        // One failed group: the tombstone is replaced, a row changed and deleted, the user deleted.
        tx = Transaction()
        tx.put(h.notes, user: "u1", key: "b", Note(String(repeating: "x", count: 500)))
        tx.delete(h.notes, user: "u1", key: "a")
        try h.store.commit(tx)
        tx = Transaction()
        tx.deleteUser("u1")
        try h.store.commit(tx)
        #expect(h.feed("u1").entries.isEmpty)
        #expect(h.store.flush().failedCommits.count == 1)
        #expect(h.feed("u1").entries == before)
        #expect(h.indexesMatchStamps())
        h.store.abandon()
    }

    /// #38 item 6: past the limit the oldest tombstones go and the floor rises, the same after replay
    /// and after a snapshot; a failed write puts the dropped ones back.
    @Test func tombstonesPastTheLimitAreDroppedTheSameAfterReplayAndSnapshot() throws {
        let h = try FeedHarness(tombstones: 8)
        var tx = Transaction()
        for i in 0..<30 { tx.put(h.notes, user: "u1", key: "k\(i)", Note("1")) }
        tx.put(h.tasks, user: "u1", key: "t", Note("1"))
        try h.store.commit(tx)
        for i in 0..<12 {
            tx = Transaction()
            tx.delete(h.notes, user: "u1", key: "k\(i)")
            try h.store.commit(tx)
        }
        _ = h.store.flush()
        let page = h.feed("u1")
        let deletes = page.entries.filter { $0.op == .delete }
        // The tenth delete passed 8 (+ the floor): the oldest 4 went, leaving 6; two more since.
        #expect(deletes.map(\.id) == (4..<12).map { "n-k\($0)" })
        #expect(page.forgottenThrough > 0 && page.forgottenThrough < deletes[0].position)
        #expect(h.store.feed(user: "u1", after: nil, limit: 100, entities: ["task"]).forgottenThrough == 0, "per table")
        #expect(h.indexesMatchStamps())
        let before = page.entries
        h.store.abandon()
        let replayed = try FeedHarness(dir: h.dir, tombstones: 8)
        #expect(replayed.feed("u1").entries == before)
        #expect(replayed.feed("u1").forgottenThrough == page.forgottenThrough)
        _ = try replayed.store.snapshot()
        replayed.store.abandon()
        let loaded = try FeedHarness(dir: h.dir, tombstones: 8)
        #expect(loaded.feed("u1").entries == before && loaded.feed("u1").forgottenThrough == page.forgottenThrough)
        loaded.store.abandon()

        // A write that fails after its delete dropped tombstones leaves them as they were.
        let failing = try FeedHarness(failBeyond: 3000, tombstones: 4)
        tx = Transaction()
        for i in 0..<10 { tx.put(failing.notes, user: "u1", key: "k\(i)", Note("1")) }
        try failing.store.commit(tx)
        for i in 0..<5 {
            tx = Transaction()
            tx.delete(failing.notes, user: "u1", key: "k\(i)")
            try failing.store.commit(tx)
        }
        #expect(failing.store.flush().failedCommits.isEmpty)
        let kept = failing.feed("u1")
        tx = Transaction()
        tx.put(failing.notes, user: "u1", key: "pad", Note(String(repeating: "x", count: 3000)))
        tx.delete(failing.notes, user: "u1", key: "k5")
        try failing.store.commit(tx)
        #expect(failing.feed("u1").forgottenThrough > kept.forgottenThrough, "the delete dropped more")
        #expect(failing.store.flush().failedCommits.count == 1)
        #expect(failing.feed("u1").entries == kept.entries && failing.feed("u1").forgottenThrough == kept.forgottenThrough)
        #expect(failing.indexesMatchStamps())
        failing.store.abandon()
    }

    @Test func entitiesFilterAndDeleteUserRemovesTheFeed() throws {
        let h = try FeedHarness()
        var tx = Transaction()
        tx.put(h.notes, user: "u1", key: "a", Note("1"))
        tx.put(h.notes, user: "u2", key: "a", Note("1"))
        try h.store.commit(tx)
        #expect(h.store.feed(user: "u1", after: nil, limit: 10, entities: ["elsewhere"]).entries.isEmpty)
        #expect(h.store.feed(user: "u1", after: nil, limit: 10, entities: ["note"]).entries.count == 1)
        tx = Transaction()
        tx.deleteUser("u1")
        try h.store.commit(tx)
        #expect(h.feed("u1").entries.isEmpty)
        #expect(h.feed("u2").entries.count == 1)
        h.store.abandon()
    }
}
