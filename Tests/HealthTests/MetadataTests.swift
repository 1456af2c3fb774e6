import Chrono
import Foundation
import JSON
import JSONRPC
import Testing
import TestSupport
@testable import Health

/// #56 item 1: HealthKit metadata on items: kept, bounded, and the keys that change what the kernel does.
@Suite struct MetadataTests {
    @Test func metadataIsKeptInKeyOrderAndPartOfAnItemsContent() throws {
        let h = try Harness()
        let a = try sample(1, 100, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", metadata: ["b": 1, "a": "x", "HKWasTapToRecord": true])
        try h.ingest("UTC", samples: [a])
        let row = try #require(try h.service.sample(h.user, uuid(1)))
        #expect(row.placement.metadata?.json == ["HKWasTapToRecord": true, "a": "x", "b": 1])
        // The same metadata in another order is the same content; other metadata is new content.
        let reordered = try sample(1, 100, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", metadata: ["a": "x", "HKWasTapToRecord": true, "b": 1])
        #expect(try h.ingest("UTC", samples: [reordered]).unchanged == 1)
        let changed = try sample(1, 100, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", metadata: ["a": "y"])
        #expect(try h.ingest("UTC", samples: [changed]).samples == 1)
        // Read back from the store's binary form too (what a restart reads).
        var bytes: [UInt8] = []
        try #require(try h.service.sample(h.user, uuid(1))).writeStored(to: &bytes)
        let decoded = try bytes.withUnsafeBytes { raw in var r = BinaryReader(raw); return try SampleRow(binaryStored: &r) }
        #expect(decoded.placement.metadata?.json == ["a": "y"])
    }

    @Test func badMetadataIsRefusedOnItsPath() throws {
        func refused(_ metadata: JSON) -> String? {
            do { _ = try sample(1, 1, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", metadata: metadata); return nil } catch {
                return (error as? FieldError)?.field ?? "\(error)"
            }
        }
        #expect(refused(["nested": ["a": 1]]) == "params.samples[0].metadata.nested")
        #expect(refused(["list": [1]]) == "params.samples[0].metadata.list")
        #expect(refused(["long": .string(String(repeating: "x", count: 1025))]) == "params.samples[0].metadata.long")
        #expect(refused(.object(JSONObject((0..<65).map { ("k\($0)", JSON.int(1)) }))) == "params.samples[0].metadata")
        #expect(refused(["HKTimeZone": "Mars/Olympus_Mons"]) == "params.samples[0].metadata.HKTimeZone")
        #expect(refused(["HKSyncIdentifier": "a"]) == "params.samples[0].metadata.HKSyncVersion")
        #expect(refused("not an object") == "params.samples[0].metadata")
    }

    /// A flight: samples recorded in Paris and in New York on one ingest with the phone's zone set to
    /// New York: each counts toward the local day of the zone it carries, as the Health app shows it.
    @Test func hkTimeZoneDecidesTheLocalDay() throws {
        let h = try Harness()
        // 23:30 UTC on 1 March is 00:30 on 2 March in Paris, 18:30 on 1 March in New York.
        let paris = try sample(1, 100, "2026-03-01T23:30:00Z", "2026-03-01T23:40:00Z", metadata: ["HKTimeZone": "Europe/Paris"])
        let plain = try sample(2, 10, "2026-03-01T23:30:00Z", "2026-03-01T23:40:00Z", source: "Other")
        try h.ingest("America/New_York", samples: [paris, plain])
        #expect(try h.sum("2026-03-02") == 100)
        #expect(try h.sum("2026-03-01") == 10)
        #expect(try h.service.sample(h.user, uuid(1))?.placement.zone == "Europe/Paris")
        // Its sleep counts toward the morning it ends on in its own zone.
        let night = try sleepSample(3, "asleepCore", "2026-03-01T22:00:00Z", "2026-03-02T05:00:00Z", metadata: ["HKTimeZone": "Asia/Tokyo"])
        try h.ingest("America/New_York", sleep: [night])
        #expect(try h.service.sleep(h.user, uuid(3))?.placement.day == "2026-03-02")
    }

    /// `HKSyncIdentifier` with a higher `HKSyncVersion` replaces the older version under another UUID;
    /// an older or equal version is left out; deleting the newest clears the way for any version.
    @Test func aNewerSyncVersionReplacesTheOlderAndAnOlderOneIsLeftOut() throws {
        let h = try Harness()
        func version(_ n: Int, _ v: Int64, _ value: Double, source: String = "Sync App") throws -> SampleInput {
            try sample(n, value, "2026-03-02T10:00:00Z", "2026-03-02T10:10:00Z", source: source, bundle: "com.example.sync",
                       metadata: ["HKSyncIdentifier": "walk-1", "HKSyncVersion": .int(v)])
        }
        try h.ingest("UTC", samples: [try version(1, 1, 100)])
        var report = try h.ingest("UTC", samples: [try version(2, 2, 150)])
        #expect(report.samples == 1 && report.superseded == 0)
        #expect(try h.service.sample(h.user, uuid(1)) == nil, "version 1 was replaced")
        #expect(try h.sum("2026-03-02") == 150)
        report = try h.ingest("UTC", samples: [try version(3, 1, 999), try version(4, 2, 999)])
        #expect(report.samples == 0 && report.superseded == 2, "older and equal versions are left out")
        #expect(try h.sum("2026-03-02") == 150)
        // Another source's object of the same identifier is another object.
        try h.ingest("UTC", samples: [try sample(5, 7, "2026-03-02T11:00:00Z", "2026-03-02T11:10:00Z", bundle: "com.example.other",
                                                 metadata: ["HKSyncIdentifier": "walk-1", "HKSyncVersion": 1])])
        #expect(try h.service.sample(h.user, uuid(5)) != nil)
        // Both versions in one request: the newer wins whatever the order.
        try h.ingest("UTC", samples: [try version(7, 9, 300), try version(6, 8, 200)])
        #expect(try h.service.sample(h.user, uuid(7)) != nil && h.service.sample(h.user, uuid(6)) == nil && h.service.sample(h.user, uuid(2)) == nil)
        // Deleting the newest leaves no version: an old one may come back.
        _ = try h.service.delete(h.user, uuids: [uuid(7)])
        #expect(try h.ingest("UTC", samples: [try version(8, 1, 50)]).samples == 1)
    }
}
