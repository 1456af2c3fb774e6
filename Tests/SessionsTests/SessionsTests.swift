import Chrono
import JSON
import JSONRPC
import Store
import Storage
import Testing
import TestSupport
@testable import Sessions


final class Harness {
    let store: any Storage
    let service: SessionsService
    init() throws {
        let tables: SessionTables
        (store, tables) = try testStore { SessionTables($0) }
        service = SessionsService(store: store, tables: tables, cursorSecrets: [Array("cursor test secret".utf8)])
    }
    func record(_ start: String, _ seconds: Int64, now: Timestamp = at("2025-12-01T00:00:00Z")) throws -> String {
        try service.record(testUser, start: at(start), duration: seconds, end: nil, clientSessionId: nil, now: now).id
    }
}

@Suite struct SessionRulesTests {
    @Test func elapsedExcludesPauses() {
        #expect(SessionRules.elapsedMs(accumulatedMs: 0, runningSinceMs: 1000, nowMs: 61_000) == 60_000)
        #expect(SessionRules.elapsedMs(accumulatedMs: 30_000, runningSinceMs: nil, nowMs: 999_999) == 30_000)
        #expect(SessionRules.recordedDuration(elapsedMs: 0) == 1)
        #expect(SessionRules.recordedDuration(elapsedMs: 90_400) == 90)
        #expect(SessionRules.recordedDuration(elapsedMs: 200_000_000) == 86_400)
    }

    @Test func listOrderIsTimeOrderThenIdIncludingTimesBefore1970() {
        let times: [Int64] = [-86_400_000, -1, 0, 1, 999, 1_000, 1_740_000_000_000, Int64.max / 2]
        let keys = times.map { SessionRules.listOrder(startTime: $0, sessionId: "b") }
        #expect(keys == keys.sorted())
        #expect(SessionRules.listOrder(startTime: 5, sessionId: "a") < SessionRules.listOrder(startTime: 5, sessionId: "b"))
        // The bare bound of a time sorts before every session at that time, after every earlier one.
        #expect(SessionRules.listOrder(startTime: 5) < SessionRules.listOrder(startTime: 5, sessionId: "0"))
        #expect(SessionRules.listOrder(startTime: 4, sessionId: "f") < SessionRules.listOrder(startTime: 5))
    }

    @Test func streaks() {
        let days: Set<CalendarDate> = [day("2025-03-01"), day("2025-03-02"), day("2025-03-03"), day("2025-03-05"), day("2025-03-06")]
        #expect(SessionRules.streaks(days: days, today: day("2025-03-06")) == (2, 3))
        #expect(SessionRules.streaks(days: days, today: day("2025-03-07")) == (2, 3))  // yesterday still counts
        #expect(SessionRules.streaks(days: days, today: day("2025-03-08")) == (0, 3))
        #expect(SessionRules.streaks(days: [], today: day("2025-03-08")) == (0, 0))
    }
}

@Suite struct SessionsServiceTests {
    @Test func streaksUseLocalDaysAcrossDaylightSaving() throws {
        let h = try Harness()
        // Los Angeles switched to daylight time on 2025-03-09. 23:30 local each evening, before and after.
        _ = try h.record("2025-03-08T07:30:00Z", 600)  // 2025-03-07 23:30 PST
        _ = try h.record("2025-03-09T07:30:00Z", 600)  // 2025-03-08 23:30 PST
        _ = try h.record("2025-03-10T06:30:00Z", 600)  // 2025-03-09 23:30 PDT
        _ = try h.record("2025-03-11T06:30:00Z", 600)  // 2025-03-10 23:30 PDT
        let la = try #require(Zone("America/Los_Angeles"))
        let stats = try h.service.stats(testUser, zone: la, now: at("2025-03-11T18:00:00Z"))  // 2025-03-11 11:00 PDT
        #expect(stats.currentStreakDays == 4)
        #expect(stats.longestStreakDays == 4)
        #expect(stats.totalSessions == 4 && stats.totalSeconds == 2400)
        #expect(stats.last7DaysSeconds == 2400)
        // In UTC the same sessions fall on 03-08, 03-09, 03-10, 03-11: still 4, today included.
        #expect(try h.service.stats(testUser, zone: .utc, now: at("2025-03-11T18:00:00Z")).currentStreakDays == 4)
        // A week later the current streak is gone, the longest remains.
        let later = try h.service.stats(testUser, zone: la, now: at("2025-03-20T18:00:00Z"))
        #expect(later.currentStreakDays == 0 && later.longestStreakDays == 4 && later.last7DaysSeconds == 0)
        #expect(later.last30DaysSeconds == 2400)
    }

    @Test func pagesStayStableWhileSessionsAreAdded() throws {
        let h = try Harness()
        var ids: [String] = []
        for i in 0..<10 { ids.append(try h.record("2025-03-\(10 + i)T08:00:00Z", 60)) }
        let first = try h.service.list(testUser, from: nil, to: nil, limit: 4, after: nil)
        let cursor = try #require(first.nextCursor)
        // New sessions arrive, newer and older than the page boundary.
        _ = try h.record("2025-03-25T08:00:00Z", 60)
        _ = try h.record("2025-03-01T08:00:00Z", 60)
        var seen = first.sessions.map(\.id)
        var position = h.service.decodeCursor(cursor, user: testUser)
        while let p = position {
            let page = try h.service.list(testUser, from: nil, to: nil, limit: 4, after: p)
            seen += page.sessions.map(\.id)
            position = page.nextCursor.flatMap { h.service.decodeCursor($0, user: testUser) }
        }
        // Every original session exactly once, newest first; the newer insert is not repeated.
        let originals = seen.filter(ids.contains)
        #expect(originals == ids.reversed())
        #expect(Set(seen).count == seen.count)
    }

    @Test func tamperedCursorsAreRefused() throws {
        let h = try Harness()
        for i in 0..<3 { _ = try h.record("2025-03-1\(i)T08:00:00Z", 60) }
        let cursor = try #require(h.service.list(testUser, from: nil, to: nil, limit: 1, after: nil).nextCursor)
        #expect(h.service.decodeCursor(cursor, user: testUser) != nil)
        var bytes = Array(cursor.utf8)
        bytes[2] = bytes[2] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(h.service.decodeCursor(String(decoding: bytes, as: UTF8.self), user: testUser) == nil)
        #expect(h.service.decodeCursor("", user: testUser) == nil)
        #expect(h.service.decodeCursor("!!!", user: testUser) == nil)
        let other = SessionsService(store: h.store, tables: h.service.tables, cursorSecrets: [Array("another secret".utf8)])
        #expect(other.decodeCursor(cursor, user: testUser) == nil)
        // Issue "Security and robustness defects", item 13: a cursor is bound to the user it was made for.
        #expect(h.service.decodeCursor(cursor, user: "bbbbbbbb-0000-4000-8000-000000000002") == nil)
    }

    @Test func timerElapsedExcludesPausedTime() throws {
        let h = try Harness()
        let t0 = at("2025-03-01T08:00:00Z")
        _ = try h.service.start(testUser, clientSessionId: nil, now: t0)
        _ = try h.service.pause(testUser, now: t0.adding(seconds: 100))
        #expect(try h.service.active(testUser, now: t0.adding(seconds: 1000))?.elapsedSeconds == 100)
        _ = try h.service.resume(testUser, now: t0.adding(seconds: 1000))
        #expect(try h.service.active(testUser, now: t0.adding(seconds: 1050))?.elapsedSeconds == 150)
        let session = try h.service.stop(testUser, now: t0.adding(seconds: 1200))
        #expect(session.durationSeconds == 300)
        #expect(session.startTime == t0)
        #expect(try h.service.active(testUser, now: t0) == nil)
    }
}
