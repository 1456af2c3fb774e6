import Foundation
import JSON
import Testing
import TestSupport

/// A data dir written by release 0.1.0 recovers unchanged: every later release answers the same.
@Suite struct FixtureTests {
    static let fixture = Paths.root.appendingPathComponent("Tests/Fixtures/datadir-0.1.0").path

    /// A copy of the fixture (recovery cuts and removes files; the fixture itself never changes).
    func copy() throws -> String {
        let dir = temporaryDirectory("fixture")
        try FileManager.default.removeItem(atPath: dir)
        try FileManager.default.copyItem(atPath: Self.fixture, toPath: dir)
        return dir
    }

    @Test func release010DataDirRecoversWithTheSameAnswers() throws {
        let dir = try copy()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let args = ["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "error"]
        var d = Driver(k: try LiveKernel(args), token: ScreenTimeBinaryTests.userToken)
        let connection = d.call("screentime.getConnection")["result"]
        #expect(connection?["enabled"] == true && connection?["timezone"] == "Europe/Berlin")
        #expect(connection?["selection"] == ["apps": ["a", "b"]])
        #expect(connection?["lastSyncAt"]?.stringValue != nil)
        // Its synced records enter the change feed, in the order they were written.
        let feed = d.call("sync.changes", ["limit": 1000])["result"]?["changes"]?.arrayValue ?? []
        let days = feed.filter { $0["entity"] == "screentime.day" }
        #expect(days.map { $0["id"] } == ["2025-03-01", "2025-03-02"])
        #expect(Set(feed.compactMap { $0["entity"]?.stringValue }) == ["screentime.connection", "screentime.day", "screentime.penalty",
                                                                        "screentime.event", "rewards.balance", "sessions.session", "sessions.timer"])
        let first = d.call("screentime.day", ["date": "2025-03-01"])["result"]
        #expect(first?["claimedMinutes"] == 60 && first?["verifiedMinutes"] == 80 && first?["status"] == "mismatch")
        #expect(first?["penaltyPoints"] == 15 && first?["deltaMinutes"] == 20)
        #expect(first?["raw"] == ["apps": [["id": "x", "min": 80]], "v": 2.5])
        let second = d.call("screentime.day", ["date": "2025-03-02"])["result"]  // from the log after the snapshot
        #expect(second?["claimedMinutes"] == 30 && second?["verifiedMinutes"] == 31 && second?["status"] == "match")
        #expect(d.call("screentime.penalties")["result"]?["totalPoints"] == 15)
        #expect(d.call("screentime.events")["result"]?["events"]?.arrayValue?.first?["type"] == "intervalDidStart")
        #expect(d.call("rewards.balance")["result"] == ["xp": 57, "minutes": 5])
        #expect(d.call("rewards.earn", ["xp": 7, "reason": "again", "key": "k2"])["result"] == ["xp": 57, "minutes": 5])
        let sessions = d.call("sessions.list")["result"]?["sessions"]?.arrayValue ?? []
        #expect(sessions.map { $0["startTime"] } == ["2025-03-02T07:00:00.000Z", "2025-03-01T07:00:00.000Z"])
        let again = d.call("sessions.record", ["startTime": "2025-03-01T07:00:00Z", "durationSeconds": 600, "clientSessionId": "c1"])
        #expect(again["result"]?["sessionId"] != nil && again["result"]?["sessionId"] == sessions.last?["sessionId"])
        #expect(d.call("sessions.active")["result"]?["state"] == "running")
        let signIn = d.call("auth.signIn", ["email": "fixture@example.com", "password": "fixture password 1"])
        #expect(signIn["result"]?["user"]?["email"] == "fixture@example.com")
        #expect(d.call("auth.signUp", ["email": "fixture@example.com", "password": "another password"])["error"]?["data"]?["reason"] == "email_taken")
        // And it goes on from there: a write, a crash, a restart.
        #expect(d.call("rewards.earn", ["xp": 3, "reason": "new", "key": "k3"])["result"] == ["xp": 60, "minutes": 5])
        d.k.kill9()
        _ = d.k.finish()
        var next = Driver(k: try LiveKernel(args), token: ScreenTimeBinaryTests.userToken)
        #expect(next.call("rewards.balance")["result"] == ["xp": 60, "minutes": 5])
        next.k.closeInput()
        #expect(next.k.finish() == 0)
        // The clean stop wrote a snapshot in today's layout (lookups as unique keys); it serves the same.
        var last = Driver(k: try LiveKernel(args), token: ScreenTimeBinaryTests.userToken)
        #expect(last.call("auth.signIn", ["email": "fixture@example.com", "password": "fixture password 1"])["result"] != nil)
        // The feed entries of the older records kept their positions and times across the restarts.
        let lastFeed = last.call("sync.changes", ["limit": 1000])["result"]?["changes"]?.arrayValue ?? []
        #expect(lastFeed.filter { $0["entity"] == "screentime.day" } == days)
        #expect(last.call("auth.signUp", ["email": "fixture@example.com", "password": "another password"])["error"]?["data"]?["reason"] == "email_taken")
        last.k.closeInput()
        #expect(last.k.finish() == 0)
        #expect(try runBinary(["store", "verify", "--data-dir", dir]).status == 0)
    }
}
