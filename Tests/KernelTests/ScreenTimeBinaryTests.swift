import Foundation
import JSON
import Testing

/// Screen time through the real binary: state across restarts, size limits.
@Suite struct ScreenTimeBinaryTests {
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
