import Foundation
import JSON
import JSONParsing
import Testing
import TestSupport

/// A data dir written by release 0.1.0 recovers unchanged: every later release answers the same.
@Suite(.oneStoreOnly) struct FixtureTests {
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

    /// A data dir of HealthKit data with random UUIDs, written by the build before rows were held
    /// compactly (packed keys, interned provenance, fixed-width order keys): it recovers with the same
    /// answers that build gave (`Tests/Fixtures/make-datadir-health.sh` recorded them), across the
    /// snapshot and the log after it, and goes on from there.
    @Test func healthDataDirRecoversWithTheSameAnswers() throws {
        let source = Paths.root.appendingPathComponent("Tests/Fixtures/datadir-health").path
        let dir = temporaryDirectory("fixture-health")
        try FileManager.default.removeItem(atPath: dir)
        try FileManager.default.copyItem(atPath: source, toPath: dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let answersFile = try Data(contentsOf: Paths.root.appendingPathComponent("Tests/Fixtures/datadir-health.answers.json"))
        let answers = try answersFile.withUnsafeBytes { try JSON.parse($0) }
        let minted = try runBinary(["token", "--user", "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb", "--ttl", "600", "--jwt-secret", testSecret, "--memory-only"])
        let token = minted.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let args = ["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "error"]
        /// Numbers as doubles (jq wrote 2853.0 as 2853), and without the opaque cursor.
        func same(_ answer: JSON, _ recorded: JSON?, cursor: String? = nil) -> Bool {
            func numbers(_ j: JSON) -> JSON {
                switch j {
                case .int(let i): return .double(Double(i))
                case .array(let a): return .array(a.map(numbers))
                case .object(let o): return .object(JSONObject(o.members.map { ($0.key, numbers($0.value)) }))
                default: return j
                }
            }
            guard var result = answer["result"]?.objectValue, let recorded else { return false }
            if let cursor { result[cursor] = nil }
            return numbers(.object(result)) == numbers(recorded)
        }
        func check(_ d: inout Driver) {
            #expect(same(d.call("health.summary", ["from": "2025-02-28", "to": "2025-03-03"]), answers["summary"]?["result"]))
            #expect(same(d.call("health.weekly", ["from": "2025-02-24", "to": "2025-03-09"]), answers["weekly"]?["result"]))
            let workouts = d.call("health.workouts", ["from": "2025-03-01", "to": "2025-03-02", "limit": 2])
            #expect(same(workouts, answers["workouts"]?["result"], cursor: "nextCursor"))
            let changes = d.call("sync.changes", ["limit": 1000, "entities": ["health.workout", "health.sleep", "health.day"]])
            #expect(same(changes, answers["changes"]?["result"], cursor: "cursor"))
            let samples = d.call("sync.changes", ["limit": 1000, "entities": ["health.sample"]])
            #expect(same(samples, answers["sampleChanges"]?["result"], cursor: "cursor"))
            #expect((answers["sampleChanges"]?["result"]?["changes"]?.arrayValue?.count ?? 0) > 100)
            // The next page of workouts follows on from this build's cursor.
            if let cursor = workouts["result"]?["nextCursor"] {
                let next = d.call("health.workouts", ["from": "2025-03-01", "to": "2025-03-02", "limit": 2, "cursor": cursor])
                #expect(next["result"]?["workouts"]?.arrayValue?.count == 1)
            }
        }
        var d = Driver(k: try LiveKernel(args), token: token)
        check(&d)
        // It goes on: a snapshot in today's layout, a kill -9, the same answers again.
        let service = try runBinary(["token", "--role", "service_role", "--jwt-secret", testSecret, "--memory-only"])
        #expect(d.call("kernel.snapshot", ["auth": .string(service.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))])["result"] != nil)
        d.k.kill9()
        _ = d.k.finish()
        var again = Driver(k: try LiveKernel(args), token: token)
        check(&again)
        again.k.closeInput()
        #expect(again.k.finish() == 0)
        #expect(try runBinary(["store", "verify", "--data-dir", dir]).status == 0)
    }
}
