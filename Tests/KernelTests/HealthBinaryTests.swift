import Foundation
import JSON
import JSONParsing
import Testing
import TestSupport

/// HealthKit sync through the real binary: a first sync's month of minute-level heart rate in one
/// request, its progress on stderr, what survives a restart, and the cap on items per request.
@Suite(.oneStoreOnly) struct HealthBinaryTests {
    static let token = ScreenTimeBinaryTests.userToken

    static func request(_ id: Int, _ method: String, _ params: JSON) -> String {
        var p = params.objectValue ?? JSONObject()
        p["auth"] = .string(token)
        let request: JSON = ["jsonrpc": "2.0", "id": .int(Int64(id)), "method": .string(method), "params": .object(p)]
        return request.serialized
    }

    /// A month of heart rate, one sample a minute from 2026-03-01T00:00Z: 55, 56, ... 94, 55, ...
    static func month() -> [JSON] {
        let start = 1_772_323_200  // 2026-03-01T00:00:00Z
        let formatter = ISO8601DateFormatter()
        return (0..<(31 * 1440)).map { i in
            let t = formatter.string(from: Date(timeIntervalSince1970: TimeInterval(start + i * 60)))
            return ["uuid": .string(String(format: "%08x-0000-4000-8000-%012x", i >> 16, i)), "type": "HKQuantityTypeIdentifierHeartRate",
                    "value": .int(Int64(55 + i % 40)), "unit": "count/min", "start": .string(t), "end": .string(t),
                    "source": ["name": "Apple Watch", "bundleId": "com.apple.health.0A1B2C3D"], "device": ["model": "Watch", "name": "Apple Watch"]]
        }
    }

    @Test func aMonthOfMinuteHeartRateInOneRequestSurvivesARestart() throws {
        let dir = temporaryDirectory("health-month")
        let ingest = Self.request(1, "health.ingest", ["timezone": "UTC", "samples": .array(Self.month())])
        #expect(ingest.utf8.count < 16 << 20, "the request fits the default line limit")
        let day: JSON = ["from": "2026-03-15", "to": "2026-03-15"]
        let first = try runBinary(["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--fsync", "never", "--log-level", "info"],
                                  input: stream([ingest, Self.request(2, "health.summary", day)]))
        let answers = try first.responses()
        #expect(answers.first?["result"]?["accepted"]?["samples"] == 44_640)
        // Each day holds 36 whole runs of 55...94: average 74.5.
        let expected: JSON = ["unit": "count/min", "avg": 74.5, "min": 55.0, "max": 94.0, "count": 1440]
        #expect(answers.last?["result"]?["days"]?.arrayValue?.first?["metrics"]?["HKQuantityTypeIdentifierHeartRate"] == expected)
        #expect(first.stderrText.contains("health.ingest: 44640 items, placing them"))
        #expect(first.stderrText.contains("days recomputed, planned in"))

        let second = try runBinary(["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "error"],
                                   input: stream([Self.request(3, "health.summary", day)]))
        #expect(try second.responses().first?["result"] == answers.last?["result"])
    }

    @Test func moreThanAHundredThousandItemsAreRefusedBeforeReadingThem() throws {
        let items = "[" + Array(repeating: "{}", count: 100_001).joined(separator: ",") + "]"
        let line = Self.request(1, "health.ingest", [:]).replacingOccurrences(of: #""params":{"#, with: #""params":{"samples":\#(items),"#)
        let result = try runBinary(["serve", "--memory-only", "--jwt-secret", testSecret, "--log-level", "error"],
                                   input: stream([line, Self.request(2, "health.summary", ["from": "2026-01-01", "to": "2026-12-31"])]))
        let answers = try result.responses()
        #expect(answers.first?["error"]?["code"] == -32602)
        #expect(answers.first?["error"]?["data"]?["field"] == "params.samples")
        #expect(answers.last?["result"]?["days"] == [])
    }

    /// Ten days of minute heart rate from `day` (2026-03-01 plus `day` days), with random version 4
    /// UUIDs as HealthKit makes them.
    static func randomDays(from day: Int) -> [JSON] {
        let start = 1_772_323_200 + day * 86_400
        let formatter = ISO8601DateFormatter()
        return (0..<(10 * 1440)).map { i in
            let t = formatter.string(from: Date(timeIntervalSince1970: TimeInterval(start + i * 60)))
            return ["uuid": .string(UUID().uuidString), "type": "HKQuantityTypeIdentifierHeartRate", "value": .int(Int64(55 + i % 40)),
                    "unit": "count/min", "start": .string(t), "end": .string(t), "source": ["name": "Jane Appleseed's Apple Watch"]]
        }
    }

    /// Random UUIDs through the real binary: three ingests, a snapshot after the second, a delete, kill
    /// -9; the restarted kernel gives the same summaries and the same feed, position for position.
    @Test func randomUUIDsSurviveASnapshotAndAKill() throws {
        let dir = temporaryDirectory("health-random")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let args = ["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "error"]
        let service = try runBinary(["token", "--role", "service_role", "--jwt-secret", testSecret, "--memory-only"])
            .stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        var d = Driver(k: try LiveKernel(args), token: Self.token)
        var sent: [JSON] = []
        for part in 0..<3 {
            let samples = Self.randomDays(from: part * 10)
            sent += samples
            #expect(d.call("health.ingest", ["timezone": "Europe/Berlin", "samples": .array(samples)])["result"]?["accepted"]?["samples"] == 14_400)
            if part == 1 { #expect(d.call("kernel.snapshot", ["auth": .string(service)])["result"] != nil) }
        }
        let doomed = stride(from: 0, to: sent.count, by: 431).map { sent[$0]["uuid"]! }
        #expect(d.call("health.delete", ["uuids": .array(doomed)])["result"]?["deleted"] == .int(Int64(doomed.count)))
        func state(_ d: inout Driver) -> (JSON?, [JSON]) {
            let summary = d.call("health.summary", ["from": "2026-02-28", "to": "2026-04-01"])["result"]
            var feed: [JSON] = [], since: JSON?
            while true {
                var params = JSONObject([("limit", 1000), ("entities", ["health.sample", "health.day"])])
                if let since { params["since"] = since }
                let page = d.call("sync.changes", .object(params))["result"]
                feed += page?["changes"]?.arrayValue ?? []
                since = page?["cursor"]
                if page?["hasMore"] != true { return (summary, feed) }
            }
        }
        let before = state(&d)
        #expect(before.0?["days"]?.arrayValue?.count == 31)
        #expect(before.1.filter { $0["entity"] == "health.sample" && $0["op"] == "delete" }.count == doomed.count)
        #expect(before.1.count == sent.count + 31)
        d.k.kill9()
        _ = d.k.finish()
        var again = Driver(k: try LiveKernel(args), token: Self.token)
        let after = state(&again)
        #expect(after.0 == before.0)
        #expect(after.1 == before.1, "the feed, position for position")
        again.k.closeInput()
        #expect(again.k.finish() == 0)
    }

    /// State of Mind and a medication dose event through the real binary: accepted, in the feed with
    /// their data, and in `store export` after a restart.
    @Test func stateOfMindAndMedicationDosesReachTheFeedAndTheExport() throws {
        let dir = temporaryDirectory("health-records")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let mood: JSON = ["uuid": "5f0b3c1e-8d2a-4c7b-9e4f-1a2b3c4d5e6f", "start": "2026-03-02T08:00:00Z", "end": "2026-03-02T08:00:00Z",
                          "kind": "dailyMood", "valence": -0.35, "valenceClassification": "slightlyUnpleasant", "labels": ["drained", "stressed"],
                          "associations": ["work"], "source": ["name": "Health", "bundleId": "com.apple.Health"]]
        let dose: JSON = ["uuid": "9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f", "start": "2026-03-02T09:05:00Z", "end": "2026-03-02T09:05:00Z",
                          "logStatus": "taken", "scheduleType": "schedule", "doseQuantity": 2, "unit": "count", "scheduledDate": "2026-03-02T09:00:00Z",
                          "medication": ["displayText": "Amoxicillin 500 MG Oral Capsule",
                                         "codings": [["system": "http://www.nlm.nih.gov/research/umls/rxnorm", "code": "308191"]]]]
        let args = ["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "error"]
        let first = try runBinary(args, input: stream([
            Self.request(1, "health.ingest", ["timezone": "UTC", "stateOfMind": [mood], "medicationDoses": [dose]]),
            Self.request(2, "sync.changes", ["includeData": true, "entities": ["health.stateOfMind", "health.medicationDose"]]),
        ]))
        let answers = try first.responses()
        #expect(answers.first?["result"]?["accepted"] == ["samples": 0, "workouts": 0, "sleep": 0, "stateOfMind": 1, "medicationDoses": 1])
        let changes = answers.last?["result"]?["changes"]?.arrayValue ?? []
        #expect(changes.map { $0["entity"] } == ["health.stateOfMind", "health.medicationDose"])
        #expect(changes.first?["data"]?["labels"] == ["drained", "stressed"] && changes.first?["data"]?["valence"] == -0.35)
        #expect(changes.last?["data"]?["medication"]?["codings"]?.arrayValue?.first?["code"] == "308191")
        #expect(changes.last?["data"]?["logStatus"] == "taken" && changes.last?["data"]?["date"] == "2026-03-02")

        let export = try runBinary(["store", "export", "--data-dir", dir, "--log-level", "error"])
        #expect(export.status == 0)
        let lines = export.stdoutText.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.contains("health.stateOfMind") && $0.contains("\"drained\"") })
        #expect(lines.contains { $0.contains("health.medicationDoses") && $0.contains("308191") })
    }
}
