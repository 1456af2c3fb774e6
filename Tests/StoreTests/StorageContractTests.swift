import JSON
import Storage
import Testing
import TestSupport

/// What the storage interface promises, checked through `any Storage` on the store `testStore` opens:
/// in memory in the first run of the README's test command, on a fresh PostgreSQL schema in the second.
/// A store that passes here serves every domain the same way.
@Suite struct StorageContractTests {
    struct Tables {
        let notes: any StorageTable<Note>
        let ordered: any StorageTable<Note>
    }

    func open() throws -> (any Storage, Tables) {
        try testStore { store in
            Tables(notes: store.table("contract.notes", of: Note.self, orderedBy: nil, entity: Entity("contract.note")),
                   ordered: store.table("contract.ordered", of: Note.self, orderedBy: { $0.text + "|" }, entity: nil))
        }
    }

    @Test func scansFollowKeyOrderAndMatchASortedModel() throws {
        let (store, t) = try open()
        var model: [String: String] = [:]
        var rng = SeededGenerator(seed: 7)
        for i in 0..<300 {
            let key = "k" + String(Int.random(in: 0..<80, using: &rng))
            var tx = Transaction()
            if Int.random(in: 0..<4, using: &rng) == 0 {
                tx.delete(t.notes, user: "u1", key: key)
                model[key] = nil
            } else {
                tx.put(t.notes, user: "u1", key: key, Note("v\(i)"))
                model[key] = "v\(i)"
            }
            try store.commit(tx)
        }
        let sorted = model.keys.sorted()
        #expect(try t.notes.scan(user: "u1", from: nil, to: nil, after: nil, reverse: false, limit: .max).map(\.key) == sorted)
        #expect(try t.notes.scan(user: "u1", from: nil, to: nil, after: nil, reverse: true, limit: .max).map(\.key) == sorted.reversed())
        let inRange = sorted.filter { $0 >= "k10" && $0 <= "k5" }
        #expect(try t.notes.scan(user: "u1", from: "k10", to: "k5", after: nil, reverse: false, limit: .max).map(\.key) == inRange)
        let some = Array(sorted.prefix(5)) + ["missing"]
        #expect(try t.notes.get(user: "u1", keys: some).keys.sorted() == Array(sorted.prefix(5)))
        for k in sorted.prefix(10) { #expect(try t.notes.get(user: "u1", key: k)?.text == model[k]) }
        #expect(try t.notes.scan(user: "u2", from: nil, to: nil, after: nil, reverse: false, limit: .max).isEmpty, "another user sees nothing")
    }

    @Test func aUnitOfWorkIsAppliedWholeOrNotAtAll() throws {
        let (store, t) = try open()
        var tx = Transaction()
        tx.put(t.notes, user: "u1", key: "a", Note("1"))
        tx.claim(UniqueKey("contract.email", "ann@example.com"), for: "u1")
        try store.commit(tx)
        // A second unit that claims a key someone else holds is refused whole: its put is not applied.
        var clash = Transaction()
        clash.put(t.notes, user: "u2", key: "b", Note("2"))
        clash.claim(UniqueKey("contract.email", "ann@example.com"), for: "u2")
        #expect(throws: StorageError.self) { try store.commit(clash) }
        store.endRequest()
        #expect(try t.notes.get(user: "u2", key: "b") == nil)
        #expect(try store.holder(of: UniqueKey("contract.email", "ann@example.com")) == "u1")
        // Released and claimed again in one unit: handed over.
        var handOver = Transaction()
        handOver.release(UniqueKey("contract.email", "ann@example.com"), of: "u1")
        handOver.claim(UniqueKey("contract.email", "ann@example.com"), for: "u2")
        try store.commit(handOver)
        #expect(try store.holder(of: UniqueKey("contract.email", "ann@example.com")) == "u2")
    }

    @Test func theSecondOrderIsHeadThenKeyAndRangesReadInOneCall() throws {
        let (store, t) = try open()
        var tx = Transaction()
        for i in 0..<200 { tx.put(t.ordered, user: "u1", key: "k\(1000 + i)", Note("d\(i % 10)")) }
        try store.commit(tx)
        let d3 = try t.ordered.scanOrdered(user: "u1", from: "d3|", to: "d3|~", after: nil, reverse: false, limit: .max)
        #expect(d3.count == 20 && d3.allSatisfy { $0.row.text == "d3" })
        #expect(d3.map(\.key) == d3.map(\.key).sorted(), "within a head, by key")
        let both = try t.ordered.scanOrdered(user: "u1", ranges: [OrderRange(from: "d3|", to: "d3|~"), OrderRange(from: "d7|", to: "d7|~")])
        #expect(both.count == 40 && Set(both.map(\.row.text)) == ["d3", "d7"])
    }

    @Test func theFeedHoldsEachRecordsLatestChangeInIncreasingPositions() throws {
        let (store, t) = try open()
        for (i, key) in ["a", "b", "a", "c"].enumerated() {
            var tx = Transaction()
            tx.put(t.notes, user: "u1", key: key, Note("v\(i)"))
            try store.commit(tx)
        }
        var gone = Transaction()
        gone.delete(t.notes, user: "u1", key: "b")
        try store.commit(gone)
        store.endRequest()
        let page = try store.feed(user: "u1", after: nil, limit: 100, entities: nil)
        #expect(page.entries.map(\.id) == ["a", "c", "b"], "a once, at its latest change; b's delete last")
        #expect(page.entries.map(\.op) == [.upsert, .upsert, .delete])
        let positions = page.entries.map(\.position)
        #expect(positions == positions.sorted() && Set(positions).count == positions.count)
        #expect(try store.lastFeedPosition(of: "u1") >= positions.last ?? 0)
        let after = try store.feed(user: "u1", after: positions[0], limit: 100, entities: nil)
        #expect(after.entries.map(\.id) == ["c", "b"])
        #expect(try store.feed(user: "u2", after: nil, limit: 100, entities: nil).entries.isEmpty)
    }

    @Test func deletingAUserRemovesTheirRowsAndReleasesTheirKeysOnly() throws {
        let (store, t) = try open()
        var tx = Transaction()
        for user in ["u1", "u2"] {
            tx.put(t.notes, user: user, key: "a", Note(user))
            tx.claim(UniqueKey("contract.email", user + "@example.com"), for: user)
        }
        try store.commit(tx)
        var delete = Transaction()
        delete.deleteUser("u1")
        try store.commit(delete)
        store.endRequest()
        #expect(try t.notes.get(user: "u1", key: "a") == nil)
        #expect(try t.notes.get(user: "u2", key: "a")?.text == "u2")
        #expect(try store.holder(of: UniqueKey("contract.email", "u1@example.com")) == nil)
        #expect(try store.holder(of: UniqueKey("contract.email", "u2@example.com")) == "u2")
    }
}

/// Reproducible randomness for a contract run.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
