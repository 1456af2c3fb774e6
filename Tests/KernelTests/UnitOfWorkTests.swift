import Chrono
import Foundation
import JSON
import JSONRPC
import Storage
import Testing
import TestSupport
@testable import Kernel

/// Issue "One unit of work per request": what one request of a batch wrote is seen by the next request
/// of the same user in that batch, on both stores. Each test sends its requests in one write, so they
/// share a batch (on PostgreSQL one transaction, committed by the batch's flush): the schedule is forced
/// by the framing, not left to timing.
@Suite struct UnitOfWorkTests {
    static let auth = JSON.string(LimitsTests.userToken)

    /// A request line.
    static func line(_ id: Int, _ method: String, _ params: JSON) -> [UInt8] {
        var params = params.objectValue ?? JSONObject()
        params["auth"] = auth
        let request: JSON = ["jsonrpc": "2.0", "id": .int(Int64(id)), "method": .string(method), "params": .object(params)]
        return request.bytes + [0x0A]
    }

    /// `health.ingest` params of step samples of 2025-03-`day` (UTC), one per value, at minute `i`.
    static func steps(_ uuids: [String], _ values: [Int], day: Int = 1, device: String? = nil, replacing: Bool = false) -> JSON {
        var samples: [JSON] = []
        for (i, (uuid, value)) in zip(uuids, values).enumerated() {
            let at = JSON.string(String(format: "2025-03-%02dT10:%02d:00Z", day, i))
            samples.append(["uuid": .string(uuid), "type": "HKQuantityTypeIdentifierStepCount", "value": .int(Int64(value)),
                            "unit": "count", "start": at, "end": at])
        }
        var params = JSONObject()
        params["timezone"] = "UTC"
        params["samples"] = .array(samples)
        if let device { params["deviceId"] = .string(device) }
        if replacing { params["replaceDays"] = [.string(String(format: "2025-03-%02d", day))] }
        return .object(params)
    }

    static func uuids(_ n: Int) -> [String] { (0..<n).map { _ in UUID().uuidString } }

    /// Sends `lines` in one write and returns every answer by id.
    static func together(_ kernel: Kernel, _ lines: [[UInt8]]) throws -> [Int64: JSON] {
        var connection = kernel.connection()
        connection.receive(lines.flatMap { $0 })
        _ = connection.endBatch(waitAbove: 0)
        var answers: [Int64: JSON] = [:]
        for line in connection.output.split(separator: 10) {
            let answer = try JSON.parse(Array(line))
            if let id = answer["id"]?.intValue { answers[id] = answer }
        }
        return answers
    }

    /// The day's step total as `health.summary` answers it (0 when the day has none).
    static func stepTotal(_ kernel: Kernel, day: Int = 1) -> Double? {
        let date = JSON.string(String(format: "2025-03-%02d", day))
        let days = InProcessClient(kernel).call("health.summary", ["auth": auth, "from": date, "to": date])["result"]?["days"]?.arrayValue
        guard let days else { return nil }
        return days.first?["metrics"]?["HKQuantityTypeIdentifierStepCount"]?["sum"]?.numberValue ?? 0
    }

    /// Item 6: authentication only reads. A user known only from another issuer's token (this suite's)
    /// gets no account from reads, which commit nothing (no flush; on PostgreSQL no COMMIT), nor from a
    /// write refused for its params; their first write that commits makes it in that same commit (one
    /// commit: a crash keeps both or neither). Before, the first request of any kind created it on the
    /// way, in a commit of its own, so a read wrote.
    @Test func readsOfATokenOnlyUserMakeNoAccountTheirFirstWriteDoesInItsOwnCommit() throws {
        let kernel = try makeKernel { $0.limits.requestsPerSecond = 0 }
        defer { kernel.shutdown() }
        let client = InProcessClient(kernel)
        func users() -> JSON? { client.call("kernel.info", [:])["result"]?["counts"]?["users"] }
        func commits() -> UInt64 { kernel.dispatcher.journal?.lastCommitID ?? 0 }
        let before = commits()
        #expect(client.call("health.summary", ["auth": Self.auth, "from": "2025-03-01", "to": "2025-03-01"])["result"] != nil)
        #expect(client.call("sync.changes", ["auth": Self.auth])["result"] != nil)
        #expect(client.call("rewards.earn", ["auth": Self.auth, "xp": -1, "reason": "r", "key": "k"])["error"]?["code"] == -32602)
        #expect(commits() == before, "the reads and the refused write committed nothing")
        #expect(users() == 0, "and made no account")
        let earned = client.call("rewards.earn", ["auth": Self.auth, "xp": 10, "reason": "r", "key": "k"])
        #expect(earned["result"] != nil, "\(earned)")
        #expect(commits() == before + 1, "the account and the write are one commit")
        #expect(users() == 1, "the first write made it")
        #expect(client.call("auth.user", ["auth": Self.auth])["result"]?["identities"] == ["external"])
    }

    /// The same when the first write is a big unit planned on a worker (a first sync's month): the
    /// account joins its prepared commit, which is not planned again on the serving thread (many.py's
    /// light host waited 74-85 ms at p99 behind ten such plans, against 34 ms without the account).
    @Test func aTokenOnlyUsersFirstWriteOfAMonthCarriesTheAccountInItsPreparedCommit() throws {
        let kernel = try makeKernel { $0.limits.requestsPerSecond = 0 }
        defer { kernel.shutdown() }
        let n = Transaction.bigUnit + 100
        let values = [Int](repeating: 1, count: n)
        var samples = Self.steps(Self.uuids(n), values).objectValue ?? JSONObject()
        // Minute by minute over a few days, so that the minutes never repeat.
        let start = Timestamp(rfc3339: "2025-03-01T00:00:00Z")!.milliseconds
        samples["samples"] = .array((samples["samples"]?.arrayValue ?? []).enumerated().map { i, sample in
            var o = sample.objectValue ?? JSONObject()
            let at = JSON.string(Timestamp(milliseconds: start + Int64(i) * 60_000).description)
            o["start"] = at
            o["end"] = at
            return .object(o)
        })
        let commits = kernel.dispatcher.journal?.lastCommitID ?? 0
        let answers = try Self.together(kernel, [Self.line(1, "health.ingest", .object(samples))])
        #expect(answers[1]?["result"]?["accepted"]?["samples"] == .int(Int64(n)), "\(answers[1] ?? .null)")
        #expect(kernel.dispatcher.journal?.lastCommitID == commits + 1, "one commit")
        #expect(InProcessClient(kernel).call("kernel.info", [:])["result"]?["counts"]?["users"] == 1, "with the account")
    }

    /// Defect 1: two ingests of one user in one write (a phone syncing in chunks). On PostgreSQL the
    /// second was planned on pooled connections that could not see the first (uncommitted in the batch)
    /// and validated against a version that counted it: its day summary overwrote the first's.
    @Test func twoIngestsOfOneUserInOneWriteBothCountInTheDay() throws {
        let kernel = try makeKernel { $0.limits.requestsPerSecond = 0 }
        defer { kernel.shutdown() }
        var lines: [[UInt8]] = []
        for day in 1...3 {
            lines.append(Self.line(day * 10, "health.ingest", Self.steps(Self.uuids(3), [100, 100, 100], day: day)))
            lines.append(Self.line(day * 10 + 1, "health.ingest", Self.steps(Self.uuids(2), [50, 50], day: day)))
        }
        let answers = try Self.together(kernel, lines)
        for day in 1...3 {
            #expect(answers[Int64(day * 10)]?["result"]?["accepted"]?["samples"] == 3, "\(answers[Int64(day * 10)] ?? .null)")
            #expect(answers[Int64(day * 10 + 1)]?["result"]?["accepted"]?["samples"] == 2)
            #expect(Self.stepTotal(kernel, day: day) == 400, "day \(day): both ingests count")
        }
    }

    /// Defect 1, after a delete: `health.delete` then `health.ingest` of the same day in one write leaves
    /// the ingest's samples only (the stale plan put the deleted samples' total back).
    @Test func aDeleteThenAnIngestInOneWriteLeavesOnlyTheIngest() throws {
        let kernel = try makeKernel { $0.limits.requestsPerSecond = 0 }
        defer { kernel.shutdown() }
        let first = Self.uuids(3)
        _ = try Self.together(kernel, [Self.line(1, "health.ingest", Self.steps(first, [100, 100, 100]))])
        #expect(Self.stepTotal(kernel) == 300)
        let answers = try Self.together(kernel, [
            Self.line(2, "health.delete", ["uuids": .array(first.map { .string($0) })]),
            Self.line(3, "health.ingest", Self.steps(Self.uuids(1), [30])),
        ])
        #expect(answers[2]?["result"]?["deleted"] == 3, "\(answers[2] ?? .null)")
        #expect(answers[3]?["result"]?["accepted"]?["samples"] == 1)
        #expect(Self.stepTotal(kernel) == 30, "the deleted samples are gone from the day")
    }

    /// Defect 1, `replaceDays`: the second ingest of one write replaces the device's day, which holds
    /// what the first sent; the plan that could not see it left those samples behind.
    @Test func replaceDaysRemovesWhatAnEarlierIngestOfTheSameWriteSent() throws {
        let kernel = try makeKernel { $0.limits.requestsPerSecond = 0 }
        defer { kernel.shutdown() }
        let answers = try Self.together(kernel, [
            Self.line(1, "health.ingest", Self.steps(Self.uuids(2), [100, 100], device: "watch")),
            Self.line(2, "health.ingest", Self.steps(Self.uuids(1), [40], device: "watch", replacing: true)),
        ])
        #expect(answers[1]?["result"]?["accepted"]?["samples"] == 2, "\(answers[1] ?? .null)")
        #expect(answers[2]?["result"]?["replaced"] == 2, "\(answers[2] ?? .null)")
        #expect(Self.stepTotal(kernel) == 40, "the day holds only what replaced it")
    }
}
