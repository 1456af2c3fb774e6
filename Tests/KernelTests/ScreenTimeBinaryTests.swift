import Foundation
import JSON
import JSONParsing
import Testing
import TestSupport

/// Screen time through the real binary: state across restarts, size limits.
@Suite(.oneStoreOnly) struct ScreenTimeBinaryTests {
    /// A user token signed with the test secret (user aaaaaaaa-…), valid until 2100.
    static let userToken = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJodHRwczovL2V4YW1wbGUuc3VwYWJhc2UuY28vYXV0aC92MSIsInN1YiI6ImFhYWFhYWFhLWFhYWEtNGFhYS04YWFhLWFhYWFhYWFhYWFhYSIsImF1ZCI6ImF1dGhlbnRpY2F0ZWQiLCJyb2xlIjoiYXV0aGVudGljYXRlZCIsImlhdCI6MTc2Mzc2OTYwMCwiZXhwIjo0MTAyNDQ0ODAwfQ.8ZA__W41avEdg3xBvAMUQx8I0VhsjhcPi2Fdts5TDTk"

    func call(_ dir: String, _ method: String, _ params: JSON) throws -> (Int32, JSON?, String) {
        var object = params.objectValue ?? JSONObject()
        object["auth"] = .string(Self.userToken)
        let r = try runBinary(["call", method, JSON.object(object).serialized, "--data-dir", dir, "--jwt-secret", testSecret])
        return (r.status, try? JSON.parse(r.stdoutText), r.stderrText)
    }

    @Test func claimThenRestartThenUpload() throws {
        let dir = temporaryDirectory("screentime")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(try call(dir, "screentime.updateConnection", ["enabled": true, "timezone": "Europe/Berlin"]).0 == 0)
        #expect(try call(dir, "screentime.claim", ["date": "2025-03-01", "minutes": 60]).1?["status"] == "unverified")
        // Each `call` is a separate kernel process: the claim survived a restart.
        let upload = try call(dir, "screentime.upload", ["date": "2025-03-01", "verifiedMinutes": 80, "raw": ["a": [1, 2.5, "x"]]])
        #expect(upload.1 == ["date": "2025-03-01", "status": "mismatch", "deltaMinutes": 20, "penaltyPoints": 15])
        let k = try LiveKernel(["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "error"])
        let dayRecord = k.call("screentime.day", ["auth": .string(Self.userToken), "date": "2025-03-01"])?["result"]
        #expect(dayRecord?["raw"] == ["a": [1, 2.5, "x"]])
        #expect(dayRecord?["claimedMinutes"] == 60)
        k.kill9()  // no clean shutdown: the log alone must carry it
        _ = k.finish()
        let connection = try call(dir, "screentime.getConnection", [:]).1
        #expect(connection?["timezone"] == "Europe/Berlin")
        #expect(connection?["lastSyncAt"]?.stringValue != nil)
        #expect(try call(dir, "screentime.penalties", [:]).1?["totalPoints"] == 15)
    }

    @Test func sizeLimits() throws {
        let k = try LiveKernel(["serve", "--memory-only", "--jwt-secret", testSecret, "--log-level", "error"])
        func call(_ method: String, _ params: JSON) -> JSON? {
            var p = params.objectValue ?? JSONObject()
            p["auth"] = .string(Self.userToken)
            return k.call(method, .object(p))
        }
        _ = call("screentime.updateConnection", ["enabled": true])
        let big = String(repeating: "x", count: 256 * 1024)
        let raw = call("screentime.upload", ["date": "2025-03-01", "verifiedMinutes": 1, "raw": ["pad": .string(big)]])
        #expect(raw?["error"]?["data"] == ["reason": "out_of_range", "field": "params.raw"])
        let fits = call("screentime.upload", ["date": "2025-03-01", "verifiedMinutes": 1, "raw": ["pad": .string(String(big.dropFirst(100)))]])
        #expect(fits?["result"] != nil)
        let selection = call("screentime.updateConnection", ["selection": ["pad": .string(String(repeating: "y", count: 65 * 1024))]])
        #expect(selection?["error"]?["data"] == ["reason": "out_of_range", "field": "params.selection"])
        #expect(call("screentime.getConnection", [:])?["result"]?["selection"] == .null)
        k.closeInput()
        #expect(k.finish() == 0)
    }
}

/// The session timer through the real binary: it survives a kill and a restart with the right elapsed time.
@Suite(.oneStoreOnly) struct SessionTimerBinaryTests {
    @Test func timerSurvivesARestart() throws {
        let dir = temporaryDirectory("timer")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let auth: JSON = ["auth": .string(ScreenTimeBinaryTests.userToken)]
        func kernel(offset: Int) throws -> LiveKernel {
            try LiveKernel(["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "error",
                            "--clock-offset-seconds", String(offset)])
        }
        let first = try kernel(offset: 0)
        let started = first.call("sessions.start", auth)?["result"]
        #expect(started?["state"] == "running")
        first.kill9()
        _ = first.finish()
        // An hour later (by the test clock), after a crash: the timer is still there and has run an hour.
        let second = try kernel(offset: 3600)
        let active = second.call("sessions.active", auth)?["result"]
        #expect(active?["sessionId"] == started?["sessionId"])
        let elapsed = active?["elapsedSeconds"]?.intValue ?? -1
        #expect(elapsed >= 3600 && elapsed < 3660)
        #expect(second.call("sessions.pause", auth)?["result"]?["state"] == "paused")
        second.closeInput()
        #expect(second.finish() == 0)
        // Paused time does not count: two hours later it still shows about an hour.
        let third = try kernel(offset: 10_800)
        #expect((third.call("sessions.active", auth)?["result"]?["elapsedSeconds"]?.intValue ?? 0) < 3660)
        let session = third.call("sessions.stop", auth)?["result"]
        #expect((session?["durationSeconds"]?.intValue ?? 0) >= 3600)
        #expect(third.call("sessions.active", auth)?["result"] == .null)
        third.closeInput()
        #expect(third.finish() == 0)
    }
}
