import Foundation
import JSON
import JSONParsing
import Testing
import TestSupport

/// jansson's values live in a per-thread arena while a text is parsed (JanssonArena): threads parsing
/// at once, big texts, failed parses and texts parsed again must all give the values they always did.
@Suite(.oneStoreOnly) struct ArenaTests {
    /// A text of `n` objects shaped like HealthKit samples, and the values it must parse to.
    static func samples(_ n: Int, seed: Int) -> (text: [UInt8], value: JSON) {
        var items: [JSON] = []
        for i in 0..<n {
            items.append(["uuid": .string("\(seed)-\(i)-\(String(repeating: "x", count: i % 40))"), "value": .int(Int64(i * seed)),
                          "start": "2026-01-01T00:00:00Z", "source": ["name": "Apple Watch", "bundleId": .string("b\(i % 7)")],
                          "tags": .array([.int(1), .double(2.5), .bool(true), .null])])
        }
        let value: JSON = ["samples": .array(items), "seed": .int(Int64(seed))]
        return (Array(value.serialized.utf8), value)
    }

    @Test func threadsParsingAtOnceGetTheirOwnValues() async {
        await withTaskGroup(of: Bool.self) { group in
            for seed in 1...8 {
                group.addTask {
                    // Sizes from one chunk to many: 10 objects, then 20,000 (megabytes of tree).
                    for n in [10, 2_000, 20_000, 10] {
                        let (text, value) = Self.samples(n, seed: seed)
                        guard (try? JSON.parse(text)) == value else { return false }
                    }
                    return true
                }
            }
            for await ok in group { #expect(ok) }
        }
    }

    @Test func aFailedParseLeavesTheNextOneWhole() throws {
        let (text, value) = Self.samples(5_000, seed: 3)
        var broken = text
        broken.removeLast(text.count / 3)
        #expect(throws: JSONParseError.self) { try JSON.parse(broken) }
        #expect(throws: JSONParseError.self) { try JSON.parse(Array(#"{"a":1,"a":2}"#.utf8)) }
        #expect(try JSON.parse(text) == value)
        // A number jansson cannot hold makes the parser try again: the retry parses in the arena too.
        #expect(try JSON.parse(Array(#"{"big":1e400,"n":[1,2]}"#.utf8))["n"] == [1, 2])
    }
}
