import Chrono
import JSON
import JSONRPC
import Store
import Storage
import Testing
import TestSupport
@testable import ScreenTime

@Suite struct RulesTests {
    func v(_ c: Int64?, _ u: Int64?, tol: Int64 = 5, ppm: Int64 = 1) -> Verdict {
        Rules.verdict(claimed: c, verified: u, toleranceMinutes: tol, pointsPerMinute: ppm)
    }

    @Test func statuses() {
        #expect(v(nil, nil) == Verdict(status: .unclaimed, deltaMinutes: nil, penaltyPoints: 0))
        #expect(v(nil, 90) == Verdict(status: .unclaimed, deltaMinutes: nil, penaltyPoints: 0))
        #expect(v(60, nil) == Verdict(status: .unverified, deltaMinutes: nil, penaltyPoints: 0))
        #expect(v(60, 65) == Verdict(status: .match, deltaMinutes: 5, penaltyPoints: 0))
        #expect(v(60, 55) == Verdict(status: .match, deltaMinutes: -5, penaltyPoints: 0))
        #expect(v(60, 66) == Verdict(status: .mismatch, deltaMinutes: 6, penaltyPoints: 1))
        #expect(v(60, 54) == Verdict(status: .mismatch, deltaMinutes: -6, penaltyPoints: 0))
        #expect(v(0, 1440, tol: 10, ppm: 3) == Verdict(status: .mismatch, deltaMinutes: 1440, penaltyPoints: 1430 * 3))
        #expect(v(0, 0, tol: 0) == Verdict(status: .match, deltaMinutes: 0, penaltyPoints: 0))
    }

    @Test func zonesAndLocalDays() throws {
        #expect(Zone("Mars/Olympus") == nil)
        #expect(Zone("../../etc/passwd") == nil)
        #expect(Zone("") == nil)
        #expect(Zone("utc") == nil)
        let la = try #require(Zone("America/Los_Angeles"))
        // 2025-03-02T07:30Z is 23:30 on March 1 in Los Angeles (PST, UTC-8).
        let t = try #require(Timestamp(rfc3339: "2025-03-02T07:30:00Z"))
        #expect(la.localDate(at: t).description == "2025-03-01")
        #expect(Zone.utc.localDate(at: t).description == "2025-03-02")
        // Daylight saving: in July Los Angeles is UTC-7.
        let summer = try #require(Timestamp(rfc3339: "2025-07-02T06:30:00Z"))
        #expect(la.offsetSeconds(at: summer) == -7 * 3600)
        #expect(la.localDate(at: summer).description == "2025-07-01")
        #expect(try #require(Zone("Pacific/Kiritimati")).localDate(at: t).description == "2025-03-02")
    }
}

/// A screen time service over a memory-only store.
final class Harness {
    let store: any Storage
    let service: ScreenTimeService
    init(_ configure: (inout ScreenTimeConfig) -> Void = { _ in }) throws {
        var config = ScreenTimeConfig()
        configure(&config)
        let tables: ScreenTimeTables
        (store, tables) = try testStore { ScreenTimeTables($0) }
        service = ScreenTimeService(config: config, store: store, tables: tables)
    }
}


@Suite struct ServiceTests {
    @Test func futureDatesFollowTheConnectionTimeZone() throws {
        let h = try Harness()
        let now = at("2025-03-02T03:00:00Z")  // 19:00 on March 1 in Los Angeles
        _ = try h.service.updateConnection(testUser, enabled: true, timezone: Zone("America/Los_Angeles"), selection: nil)
        #expect(throws: ScreenTimeError.futureDate(today: day("2025-03-01"))) {
            _ = try h.service.upload(testUser, date: day("2025-03-02"), verifiedMinutes: 10, raw: .null, now: now)
        }
        _ = try h.service.upload(testUser, date: day("2025-03-01"), verifiedMinutes: 10, raw: .null, now: now)
        _ = try h.service.updateConnection(testUser, enabled: nil, timezone: Zone("UTC"), selection: nil)
        _ = try h.service.upload(testUser, date: day("2025-03-02"), verifiedMinutes: 10, raw: .null, now: now)
    }

    @Test func aThousandIdenticalUploadsLeaveOneRecordAndOnePenalty() throws {
        let h = try Harness()
        let now = at("2025-03-10T12:00:00Z")
        _ = try h.service.updateConnection(testUser, enabled: true, timezone: nil, selection: nil)
        _ = try h.service.claim(testUser, date: day("2025-03-01"), minutes: 60, now: now)
        for i in 0..<1000 {
            _ = try h.service.upload(testUser, date: day("2025-03-01"), verifiedMinutes: 100, raw: BinaryJSON(["n": 1]),
                                     now: now.adding(seconds: Int64(i)))
        }
        #expect(try h.service.tables.days.rows(of: testUser).count == 1)
        let penalties = try h.service.penalties(testUser, from: nil, to: nil)
        #expect(penalties.map(\.row.points) == [35])
        // The penalty was applied once: later identical uploads kept its time.
        #expect(penalties.first?.row.appliedAt == now.milliseconds)
    }

    @Test func configuredToleranceAndRate() throws {
        let h = try Harness { $0.toleranceMinutes = 10; $0.pointsPerMinute = 2 }
        let now = at("2025-03-10T12:00:00Z")
        _ = try h.service.updateConnection(testUser, enabled: true, timezone: nil, selection: nil)
        _ = try h.service.claim(testUser, date: day("2025-03-01"), minutes: 60, now: now)
        let verdict = try h.service.upload(testUser, date: day("2025-03-01"), verifiedMinutes: 80, raw: .null, now: now)
        #expect(verdict.verdict.penaltyPoints == 20)
    }

    @Test func eventsKeepTheNewestThousand() throws {
        let h = try Harness()
        let now = at("2025-03-10T12:00:00Z")
        for i in 0..<1005 {
            try h.service.logEvent(testUser, type: "intervalDidStart", activity: "a\(i)", event: nil, at: now, now: now)
        }
        #expect(try h.service.tables.events.rows(of: testUser).count == 1000)
        let newest = try h.service.events(testUser, limit: 1000)
        #expect(newest.count == 1000)
        #expect(newest.first?.activity == "a1004")
        #expect(newest.last?.activity == "a5")
    }
}

@Suite struct StoredFormTests {
    /// A row's direct binary codec must write the bytes the generic path writes, and read back equal.
    static func check<Row: StoredRow>(_ row: Row) throws {
        var direct: [UInt8] = []
        row.writeStored(to: &direct)
        var viaTree: [UInt8] = []
        row.stored.writeBinary(to: &viaTree)
        #expect(direct == viaTree)
        let back = try direct.withUnsafeBytes { raw in
            var r = BinaryReader(raw)
            let decoded = try Row(binaryStored: &r)
            #expect(r.isAtEnd)
            return decoded
        }
        #expect(back == row)
        #expect(try Row(stored: row.stored) == row)
    }

    @Test func directCodecsMatchTheStoredForm() throws {
        var day = DayRow()
        try Self.check(day)
        day.claimedMinutes = 30
        day.verifiedMinutes = 1440
        day.claimedAt = 1_700_000_000_000
        day.uploadedAt = -5
        day.raw = BinaryJSON(["device": "iPhone", "apps": [["b": "com.x", "m": 5]], "ü": 1.5, "n": nil])
        try Self.check(day)
        var connection = ConnectionRow()
        try Self.check(connection)
        connection.enabled = true
        connection.timezone = "Europe/Berlin"
        connection.lastSyncAt = 42
        connection.selection = BinaryJSON(["apps": ["a", "b"], "web": []])
        try Self.check(connection)
    }

    @Test func aRowWithoutItsRequiredFieldIsCorruptNotACrash() {
        var bytes: [UInt8] = []
        (["enabled": true] as JSON).writeBinary(to: &bytes)
        #expect(throws: StorageError.self) {
            try bytes.withUnsafeBytes { raw in
                var r = BinaryReader(raw)
                _ = try ConnectionRow(binaryStored: &r)
            }
        }
    }
}
