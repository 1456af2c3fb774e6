import Testing
import TestSupport
@testable import Store
import JSON

/// The chunked partition against a plain model (a dictionary, sorted on demand): random inserts,
/// replacements and deletes with random and ordered keys, then every read compared, including scans in
/// both directions with bounds, `after` and limits, across chunk splits and merges.
@Suite(.oneStoreOnly) struct PartitionTests {
    /// A small deterministic generator, so a failure repeats.
    struct Generator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return state >> 11
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
        mutating func hexKey() -> String { String(next(), radix: 16) }
    }

    func check(_ p: SortedChunks<String, Int>, _ model: [String: (Int, Stamp)], _ g: inout Generator, stamped: Bool) {
        let keys = model.keys.sorted()
        #expect(p.count == keys.count)
        var walked: [String] = []
        p.forEach { key, row, stamp in
            walked.append(key)
            if model[key]?.0 != row { Issue.record("row of \(key)") }
            if stamped && stamp != model[key]?.1 { Issue.record("stamp of \(key)") }
        }
        #expect(walked == keys)
        #expect(p.chunks.allSatisfy { !$0.keys.isEmpty && $0.keys.count <= SortedChunks<String, Int>.chunkMax })
        #expect(p.lasts == p.chunks.map { $0.keys.last! })
        for _ in 0..<40 {
            let probe = g.below(3) == 0 && !keys.isEmpty ? keys[g.below(keys.count)] : g.hexKey()
            #expect(p[probe] == model[probe]?.0)
            let from: String? = g.below(3) == 0 ? nil : (keys.isEmpty || g.below(2) == 0 ? g.hexKey() : keys[g.below(keys.count)])
            let to: String? = g.below(3) == 0 ? nil : (keys.isEmpty || g.below(2) == 0 ? g.hexKey() : keys[g.below(keys.count)])
            let after: String? = g.below(2) == 0 ? nil : (keys.isEmpty || g.below(2) == 0 ? g.hexKey() : keys[g.below(keys.count)])
            let reverse = g.below(2) == 0
            let limit = [0, 1, 7, 600, Int.max][g.below(5)]
            var want = keys.filter { k in (from.map { k >= $0 } ?? true) && (to.map { k <= $0 } ?? true) }
            if let after { want = want.filter { reverse ? $0 < after : $0 > after } }
            if reverse { want.reverse() }
            want = Array(want.prefix(limit))
            let got = p.entries(from: from, to: to, after: after, reverse: reverse, limit: limit)
            #expect(got.map(\.key) == want, "from \(from ?? "-") to \(to ?? "-") after \(after ?? "-") reverse \(reverse) limit \(limit)")
            #expect(got.allSatisfy { model[$0.key]?.0 == $0.row })
            let through = g.hexKey()
            #expect(p.countThrough(through) == keys.filter { $0 <= through }.count)
        }
    }

    @Test(arguments: [false, true])
    func matchesAPlainModel(stamped: Bool) {
        var g = Generator(state: stamped ? 7 : 42)
        var p = SortedChunks<String, Int>()
        var model: [String: (Int, Stamp)] = [:]
        for round in 0..<6 {
            // Inserts: random keys (HealthKit UUIDs) and runs of ordered ones (dates, counters).
            for i in 0..<3000 {
                let key = round % 2 == 0 ? g.hexKey() : "z\(round)-" + String(100_000 + i)
                let stamp = Stamp(position: g.next(), at: Int64(i))
                let old = stamped ? p.setStamped(key, i, stamp)?.0 : p.set(key, i)
                #expect(old == model[key]?.0)
                model[key] = (i, stamp)
            }
            // Replacements and deletes of existing keys, and deletes of absent ones.
            let existing = Array(model.keys)
            for _ in 0..<2500 {
                let key = existing[g.below(existing.count)]
                if g.below(3) == 0 {
                    let stamp = Stamp(position: g.next(), at: -1)
                    if model[key] != nil {
                        let old = stamped ? p.setStamped(key, -7, stamp)?.0 : p.set(key, -7)
                        #expect(old == model[key]?.0)
                        model[key] = (-7, stamp)
                    }
                } else {
                    let removed = p.remove(key)
                    #expect(removed?.row == model[key]?.0)
                    if stamped, let removed { #expect(removed.stamp == model[key]?.1) }
                    model[key] = nil
                }
            }
            #expect(p.remove("absent-" + g.hexKey()) == nil)
            check(p, model, &g, stamped: stamped)
        }
        // Everything removed: no chunk is left behind.
        for key in model.keys { _ = p.remove(key) }
        #expect(p.isEmpty && p.chunks.isEmpty && p.lasts.isEmpty)
    }

    /// Inserting a million random keys costs O(log n) each: this would take minutes with the sorted
    /// arrays it replaces (every insert moved half of them). No timing is asserted; the suite's own time
    /// limit is the check.
    @Test func aMillionRandomKeys() {
        var g = Generator(state: 1)
        var p = SortedChunks<String, Int>()
        for i in 0..<1_000_000 { p.set(g.hexKey() + g.hexKey(), i) }
        #expect(p.count == 1_000_000)
        #expect(p.chunks.count >= 1_000_000 / SortedChunks<String, Int>.chunkMax)
    }
}

/// Packed row keys round-trip and order exactly as their strings do, whatever the mix of spellings.
@Suite(.oneStoreOnly) struct RowKeyTests {
    @Test func roundTripAndStringOrder() {
        var g = PartitionTests.Generator(state: 99)
        func hex(_ n: Int) -> String { (0..<n).map { _ in String(g.below(16), radix: 16) }.joined() }
        var keys: [String] = ["", "profile", "2026-11-25", "~", "-", "0", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
                              "00000000-0000-0000-0000-000000000000", "g0000000-0000-0000-0000-000000000000"]
        for _ in 0..<400 {
            let uuid = [hex(8), hex(4), hex(4), hex(4), hex(12)].joined(separator: "-")
            switch g.below(5) {
            case 0: keys.append(uuid.uppercased())
            case 1: keys.append(uuid.lowercased())
            case 2: keys.append(String(uuid.enumerated().map { $0.offset % 2 == 0 ? Character($0.element.uppercased()) : $0.element }))
            case 3: keys.append(String(uuid.prefix(g.below(36))))
            default: keys.append(uuid.uppercased().replacingOccurrences(of: "-", with: "_"))
            }
        }
        for key in keys {
            let packed = RowKey(key)
            #expect(packed.string == key)
            var bytes: [UInt8] = []
            packed.write(to: &bytes)
            var expected: [UInt8] = []
            Binary.writeString(key, to: &expected)
            #expect(bytes == expected)
        }
        #expect(RowKey("0A1B2C3D-0000-4000-8000-00000000000F") == .upper(0x0A1B_2C3D_0000_4000, 0x8000_0000_0000_000F))
        #expect({ if case .lower = RowKey("0a1b2c3d-0000-4000-8000-00000000000f") { true } else { false } }())
        for _ in 0..<20_000 {
            let a = keys[g.below(keys.count)], b = keys[g.below(keys.count)]
            #expect((RowKey(a) < RowKey(b)) == (a < b), "\(a) < \(b)")
            #expect((RowKey(a) == RowKey(b)) == (a == b))
        }
    }
}

/// Second-order keys (head, then the packed row key) compare exactly as their strings, bounds included.
@Suite(.oneStoreOnly) struct OrderKeyTests {
    @Test func orderAsStrings() {
        var g = PartitionTests.Generator(state: 5)
        func hex(_ n: Int) -> String { (0..<n).map { _ in String(g.below(16), radix: 16) }.joined().uppercased() }
        var keys: [OrderKey] = []
        for _ in 0..<300 {
            let uuid = [hex(8), hex(4), hex(4), hex(4), hex(12)].joined(separator: "-")
            let head = ["07", "12", ""][g.below(3)] + String(10_000 + g.below(30)) + hex(g.below(3) == 0 ? 7 : 8)
            switch g.below(4) {
            case 0: keys.append(OrderKey(bound: String(head.prefix(g.below(head.count + 1))) + (g.below(2) == 0 ? "~" : "")))
            case 1: keys.append(OrderKey(head: "2026-01-0\(g.below(9))|", row: RowKey("other-\(g.below(5))")))
            default: keys.append(OrderKey(head: head, row: RowKey(uuid)))
            }
        }
        for _ in 0..<30_000 {
            let a = keys[g.below(keys.count)], b = keys[g.below(keys.count)]
            #expect((a < b) == (a.string < b.string), "\(a.string) < \(b.string)")
            #expect((a == b) == (a.string == b.string))
        }
        let key = OrderKey(head: "0710001ABCDEFGH", row: RowKey("0A1B2C3D-0000-4000-8000-00000000000F"))
        #expect(OrderKey(bound: key.string) == key)
    }
}
