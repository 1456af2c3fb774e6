import Foundation
import JSON
import JSONRPC
import Testing
import TestSupport
@testable import Kernel

/// Issue "Every user at once": one user's heavy work never holds another's.
@Suite(.oneStoreOnly) struct EveryUserTests {
    static let auth = JSON.string(LimitsTests.userToken)

    /// A month-like ingest of `count` minute samples from `day` with random UUIDs.
    static func ingest(_ id: Int, count: Int, day: String = "2025-03-01") -> [UInt8] {
        let start = Date(timeIntervalSince1970: ISO8601DateFormatter().date(from: day + "T00:00:00Z")!.timeIntervalSince1970)
        let formatter = ISO8601DateFormatter()
        let samples: [JSON] = (0..<count).map { i in
            let at = JSON.string(formatter.string(from: start.addingTimeInterval(Double(i * 60))))
            return ["uuid": .string(UUID().uuidString), "type": "HKQuantityTypeIdentifierHeartRate", "value": .int(Int64(60 + i % 40)),
                    "unit": "count/min", "start": at, "end": at]
        }
        let request: JSON = ["jsonrpc": "2.0", "id": .int(Int64(id)), "method": "health.ingest",
                             "params": ["auth": auth, "timezone": "UTC", "samples": .array(samples)]]
        return request.bytes + [0x0A]
    }

    static func retries(_ kernel: Kernel) -> Int64? {
        InProcessClient(kernel).call("kernel.info", ["auth": .string(testServiceToken)])["result"]?["requests"]?["retries"]?.intValue
    }

    /// Item 2: a plan whose user's HealthKit rows changed meanwhile (a health write on another stream) is
    /// planned again on a worker, not on the serving thread, and the answer merges both; a write to
    /// another domain's table of the same user (a reward) leaves the plan current (on the data dir,
    /// whose versions are per table).
    @Test func aStalePlanIsPlannedAgainOnAWorkerAndOtherDomainsLeaveItCurrent() throws {
        let kernel = try makeKernel { $0.limits.requestsPerSecond = 0 }
        let before = try #require(Self.retries(kernel))
        var big = kernel.connection()
        big.receive(Self.ingest(1, count: 5000))
        _ = big.endBatch(waitAbove: nil)  // planned on a worker from here
        let other = InProcessClient(kernel)
        // Another stream of the same user writes HealthKit rows before the plan is applied.
        let small = try JSON.parse(Array(Self.ingest(2, count: 10, day: "2025-04-01").dropLast()))
        #expect(other.call("health.ingest", try #require(small["params"]))["result"]?["accepted"]?["samples"] == 10)
        _ = big.endBatch(waitAbove: 0)
        let answer = try JSON.parse(Array(big.output.dropLast()))
        #expect(answer["result"]?["accepted"]?["samples"] == 5000, "\(answer)")
        #expect(Self.retries(kernel) == before + 1, "planned again once")
        let days = other.call("health.summary", ["auth": Self.auth, "from": "2025-03-01", "to": "2025-04-01"])["result"]?["days"]?.arrayValue
        #expect(days?.count == 5, "four days of the big ingest and the small one's day")

        // A reward of the same user meanwhile: no re-plan in memory (PostgreSQL's versions are per user).
        big.output.removeAll()
        big.receive(Self.ingest(3, count: 5000, day: "2025-05-01"))
        _ = big.endBatch(waitAbove: nil)
        #expect(other.call("rewards.earn", ["auth": Self.auth, "xp": 10, "reason": "r", "key": "k1"])["result"] != nil)
        _ = big.endBatch(waitAbove: 0)
        #expect(try JSON.parse(Array(big.output.dropLast()))["result"]?["accepted"]?["samples"] == 5000)
        if testStoreKind == "memory" { #expect(Self.retries(kernel) == before + 1, "a reward left the plan current") }
    }

    /// Item 2 on the data dir: a month-sized commit is applied in slices between other requests. While
    /// it is, its answer is held, another user's request is answered without finishing it, and a request
    /// of the same user from another stream finishes it first and sees all of it.
    @Test func aBigCommitIsAppliedInSlicesAndItsAnswerWaitsForIt() throws {
        let kernel = try makeKernel { $0.limits.requestsPerSecond = 0 }
        let store = try #require(kernel.store)
        let other = InProcessClient(kernel)
        let signedUp = other.call("auth.signUp", ["email": "light@example.com", "password": "correct horse battery staple"])
        let light = try #require(signedUp["result"]?["accessToken"], "\(signedUp)")
        var big = kernel.connection()
        // Waits for the plan on its worker and its commit, which leaves the rows to the backlog.
        func planAndCommit(_ request: [UInt8]) {
            big.output.removeAll()
            big.receive(request)
            for _ in 0..<60_000 where !store.hasBacklog {
                _ = big.endBatch(waitAbove: nil)
                usleep(1000)
            }
        }
        planAndCommit(Self.ingest(1, count: 5000))
        #expect(store.hasBacklog)
        #expect(big.output.isEmpty, "no answer before the rows are applied")
        // Another user's write is answered while the unit is still being applied.
        let earned = other.call("rewards.earn", ["auth": light, "xp": 10, "reason": "r", "key": "k1"])
        #expect(earned["result"] != nil, "\(earned)")
        #expect(store.hasBacklog)
        var slices = 0
        while big.applyBacklog() { slices += 1 }
        #expect(slices >= 2, "applied in several slices")
        _ = big.endBatch(waitAbove: nil)
        let answer = try JSON.parse(Array(big.output.dropLast()))
        #expect(answer["result"]?["accepted"]?["samples"] == 5000, "\(answer)")

        // The same user read from another stream meanwhile: the rest is applied first, and all of it is seen.
        planAndCommit(Self.ingest(2, count: 5000, day: "2025-05-01"))
        #expect(store.hasBacklog)
        let days = other.call("health.summary", ["auth": Self.auth, "from": "2025-03-01", "to": "2025-05-31"])["result"]?["days"]?.arrayValue
        #expect(days?.count == 8, "both ingests' days")
        #expect(!store.hasBacklog)
        _ = big.endBatch(waitAbove: 0)
        #expect(try JSON.parse(Array(big.output.dropLast()))["result"]?["accepted"]?["samples"] == 5000)
    }

    /// On both stores: a month-sized ingest and a read of the same user pipelined on one stream; the
    /// read waits for the ingest to be applied (in slices on the data dir, detached on PostgreSQL) and
    /// sees all of it.
    @Test(arguments: StoreKind.allCases)
    func aReadBehindABigIngestSeesAllOfIt(_ store: StoreKind) throws {
        let kernel = try makeKernel(on: store) { $0.limits.requestsPerSecond = 0 }
        var conn = kernel.connection()
        let read: JSON = ["jsonrpc": "2.0", "id": 2, "method": "health.summary",
                          "params": ["auth": Self.auth, "from": "2025-03-01", "to": "2025-03-31"]]
        conn.receive(Self.ingest(1, count: 5000) + read.bytes + [0x0A])
        _ = conn.endBatch(waitAbove: 0)
        let lines = conn.output.split(separator: 0x0A).map { try? JSON.parse(Array($0)) }
        #expect(lines.count == 2)
        #expect(lines.first??["result"]?["accepted"]?["samples"] == 5000, "\(String(describing: lines.first))")
        #expect(lines.last??["result"]?["days"]?.arrayValue?.count == 4, "\(String(describing: lines.last))")
    }
}
