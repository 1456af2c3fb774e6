import Chrono
import Foundation
import Testing
import Storage
import TestSupport
@testable import Store

/// Big units of work applied in slices (`Backlog`): between slices other users' commits go on, and the
/// end state, feed positions, log and snapshots are exactly those of the unit applied at once.
@Suite(.oneStoreOnly) struct BacklogTests {
    /// A store with a synced table, on a fixed clock so that two stores given the same commits match.
    final class Slices {
        let dir: String
        let store: Store
        let notes: Table<Note>

        init(dir: String? = nil, failBeyond: Int? = nil, snapshotEveryRecords: Int? = nil) throws {
            self.dir = dir ?? FileManager.default.temporaryDirectory.appendingPathComponent("hk-backlog-\(UUID().uuidString)").path
            var options = StoreOptions(dataDir: self.dir)
            options.fsync = .never
            options.failAppendsBeyondBytes = failBeyond
            if let snapshotEveryRecords { options.snapshotEveryRecords = snapshotEveryRecords }
            store = Store(options: options, clock: FixedClock(ms: 1_700_000_000_000), log: { _ in })
            notes = store.table("notes", of: Note.self, entity: Entity("note", id: { "n-" + $0 }))
            try store.open()
        }

        /// Commits `tx`, leaving it to the backlog when it is big enough.
        func commit(_ tx: Transaction, sliced: Bool) throws {
            store.beginUnit(mayFinishLater: sliced)
            defer { _ = store.endUnit() }
            try store.commit(tx)
        }

        func small(_ user: String, _ key: String, _ text: String = "small") throws {
            var tx = Transaction()
            tx.put(notes, user: user, key: key, Note(text))
            try store.commit(tx)
        }

        func feed(_ user: String) -> [FeedEntry] { store.feed(user: user, after: nil, limit: .max, entities: nil).entries }
    }

    /// A unit of `count` puts of random keys for `user`, and deletes of `deleting`.
    static func unit(_ notes: Table<Note>, _ user: String, keys: [String], deleting: [String] = []) -> Transaction {
        var tx = Transaction()
        for key in deleting { tx.delete(notes, user: user, key: key) }
        for (i, key) in keys.enumerated() { tx.put(notes, user: user, key: key, Note("v\(i)")) }
        return tx
    }

    static let keys = (0..<(Transaction.bigUnit + 1000)).map { _ in UUID().uuidString }

    /// A plan checks the versions of the user's tables it read (`versions(of:in:)`): a sliced unit must
    /// move them, even right after a commit of the same user that marked the same tables (once, it
    /// marked them with the user's version from before its slice, the same number, when the unit was
    /// finished in one slice, and a plan made on rows from before the unit passed the check: seed 30 of
    /// the simulation with small big units).
    @Test func aSlicedUnitMovesTheVersionOfEveryTableItChanges() throws {
        let s = try Slices()
        try s.small("u1", "first")
        let before = s.store.versions(of: "u1", in: [s.notes])
        try s.commit(Self.unit(s.notes, "u1", keys: Array(Self.keys.prefix(Transaction.bigUnit))), sliced: true)
        #expect(s.store.hasBacklog)
        // Reading the versions finishes the unit first, in one go (as a plan's check does).
        let after = s.store.versions(of: "u1", in: [s.notes])
        #expect(!s.store.hasBacklog)
        #expect(after != before, "the sliced unit left the table's version at \(after)")
    }

    @Test func aBigUnitAppliesInSlicesBetweenOtherUsersAndEndsAsIfAppliedAtOnce() throws {
        let sliced = try Slices(), whole = try Slices()
        for s in [sliced, whole] {
            for key in Self.keys.prefix(100) { try s.small("u1", key, "old") }
        }
        let big = { (s: Slices) in Self.unit(s.notes, "u1", keys: Array(Self.keys.dropFirst(50)), deleting: Array(Self.keys.prefix(50))) }
        try sliced.commit(big(sliced), sliced: true)
        let commit = sliced.store.lastCommitID
        #expect(sliced.store.hasBacklog && !sliced.store.isApplied(commit))
        // Another user's commits go on between slices of 256 changes (a budget of 0 applies one).
        var slices = 0
        while sliced.store.applyBacklog(budgetMicros: 0) {
            slices += 1
            if slices % 5 == 0 { try sliced.small("u2", "k\(slices)") }
        }
        #expect(slices >= Transaction.bigUnit / Backlog.entriesPerCheck)
        #expect(sliced.store.isApplied(commit))
        try whole.commit(big(whole), sliced: false)
        for i in 1...slices where i % 5 == 0 { try whole.small("u2", "k\(i)") }
        #expect(sliced.store.fingerprint() == whole.store.fingerprint())
        #expect(sliced.feed("u1") == whole.feed("u1"))
        #expect(sliced.notes.scan(user: "u1").count == Self.keys.count - 50)
        // The log holds the unit as one record: recovery gives the same state.
        #expect(sliced.store.flush().failedCommits.isEmpty)
        let expected = sliced.store.fingerprint()
        sliced.store.abandon()
        let again = try Slices(dir: sliced.dir)
        #expect(again.store.fingerprint() == expected)
        again.store.abandon()
        whole.store.abandon()
    }

    @Test func aReadOrWriteOfTheUserFinishesTheUnitFirst() throws {
        let s = try Slices()
        try s.commit(Self.unit(s.notes, "u1", keys: Self.keys), sliced: true)
        #expect(s.store.applyBacklog(budgetMicros: 0))
        // A read of another user leaves the unit where it is; a read of u1 sees all of it.
        #expect(s.notes.scan(user: "u2").isEmpty && s.store.hasBacklog)
        #expect(s.notes.get(user: "u1", key: Self.keys.last!)?.text == "v\(Self.keys.count - 1)")
        #expect(!s.store.hasBacklog)
        // A write of the user after a unit comes after it in the feed.
        try s.commit(Self.unit(s.notes, "u1", keys: Self.keys.reversed()), sliced: true)
        try s.small("u1", "after")
        #expect(!s.store.hasBacklog)
        #expect(s.feed("u1").last?.id == "n-after")
        s.store.abandon()
    }

    @Test func aFailedWriteUndoesAHalfAppliedUnit() throws {
        let s = try Slices(failBeyond: 20_000)
        try s.small("u1", "kept", "1")
        #expect(s.store.flush().failedCommits.isEmpty)
        let before = s.store.fingerprint()
        try s.commit(Self.unit(s.notes, "u1", keys: Self.keys), sliced: true)
        let commit = s.store.lastCommitID
        #expect(s.store.applyBacklog(budgetMicros: 0))
        #expect(s.store.flush().failedCommits == [commit...commit])
        #expect(!s.store.hasBacklog && s.store.isApplied(commit))
        #expect(s.store.fingerprint() == before)
        s.store.abandon()
    }

    @Test func aUnitWrittenBeforeAFailedWriteIsAppliedWhole() throws {
        let s = try Slices(failBeyond: 1_000_000)
        try s.commit(Self.unit(s.notes, "u1", keys: Self.keys), sliced: true)
        #expect(s.store.flush().failedCommits.isEmpty)  // the unit's record is durable
        #expect(s.store.applyBacklog(budgetMicros: 0))
        try s.small("u2", "huge", String(repeating: "x", count: 1_100_000))
        #expect(s.store.flush().failedCommits.count == 1)  // only u2's write is undone
        while s.store.applyBacklog(budgetMicros: 0) {}
        #expect(s.notes.scan(user: "u1").count == Self.keys.count)
        #expect(s.notes.scan(user: "u2").isEmpty)
        let expected = s.store.fingerprint()
        s.store.abandon()
        let again = try Slices(dir: s.dir)
        #expect(again.store.fingerprint() == expected)
        again.store.abandon()
    }

    @Test func aSnapshotHoldsWholeUnitsOnly() throws {
        let s = try Slices(snapshotEveryRecords: 1)
        try s.commit(Self.unit(s.notes, "u1", keys: Self.keys), sliced: true)
        #expect(s.store.applyBacklog(budgetMicros: 0))
        #expect(s.store.flush().failedCommits.isEmpty)
        s.store.snapshotIfDue()  // due, but not taken while a unit is being applied
        #expect(s.store.hasBacklog && !s.store.isSnapshotRunning && StoreFiles.list(s.dir).snapshots.isEmpty)
        _ = try s.store.snapshot()  // finishes it first
        #expect(!s.store.hasBacklog)
        let expected = s.store.fingerprint()
        s.store.abandon()
        let again = try Slices(dir: s.dir)
        #expect(again.store.fingerprint() == expected)
        #expect(again.notes.scan(user: "u1").count == Self.keys.count)
        again.store.abandon()
    }

    @Test func smallUnitsAndUnitsOfSeveralUsersApplyAtOnce() throws {
        let s = try Slices()
        try s.commit(Self.unit(s.notes, "u1", keys: Array(Self.keys.prefix(Transaction.bigUnit - 1))), sliced: true)
        #expect(!s.store.hasBacklog)
        var tx = Self.unit(s.notes, "u1", keys: Self.keys)
        tx.put(s.notes, user: "u2", key: "x", Note("x"))
        try s.commit(tx, sliced: true)
        #expect(!s.store.hasBacklog)
        s.store.abandon()
    }
}
