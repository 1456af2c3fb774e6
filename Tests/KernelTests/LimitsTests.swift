import Chrono
import Foundation
import JSON
import JSONParsing
import JSONRPC
import Testing
import TestSupport
@testable import Kernel

/// Issue "Security and robustness defects", item 11: per-user limits (PROTOCOL.md section 10,
/// `limits`), checked before anything is stored, -32029 with `rate_limited` or `quota_exceeded`.
@Suite struct LimitsTests {
    /// User aaaaaaaa-…, signed with the test secret (the transcripts' token).
    static let userToken = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJodHRwczovL2V4YW1wbGUuc3VwYWJhc2UuY28vYXV0aC92MSIsInN1YiI6ImFhYWFhYWFhLWFhYWEtNGFhYS04YWFhLWFhYWFhYWFhYWFhYSIsImF1ZCI6ImF1dGhlbnRpY2F0ZWQiLCJyb2xlIjoiYXV0aGVudGljYXRlZCIsImlhdCI6MTc2Mzc2OTYwMCwiZXhwIjo0MTAyNDQ0ODAwfQ.8ZA__W41avEdg3xBvAMUQx8I0VhsjhcPi2Fdts5TDTk"

    @Test func theRateLimiterRefillsAtItsRate() {
        let limiter = RateLimiter(perSecond: 2, burst: 3)
        let t0 = Timestamp(milliseconds: 1_000_000)
        #expect((0..<3).map { _ in limiter.admit("u", now: t0) } == [nil, nil, nil])
        #expect(limiter.admit("u", now: t0) == 500)
        #expect(limiter.admit("other", now: t0) == nil, "one user's bucket is their own")
        #expect(limiter.admit("u", now: t0.adding(seconds: 0).advanced(ms: 499)) == 1)
        #expect(limiter.admit("u", now: t0.advanced(ms: 500)) == nil)
        #expect(limiter.admit("u", now: t0.advanced(ms: 500)) != nil)
        #expect((0..<3).map { _ in limiter.admit("u", now: t0.adding(seconds: 60)) } == [nil, nil, nil], "refilled to the burst, no more")
        #expect(limiter.admit("u", now: t0.adding(seconds: 60)) != nil)
    }

    @Test func requestsPastTheRateAreRefusedForThatUserOnly() throws {
        let kernel = try makeKernel { $0.limits.requestsPerSecond = 1; $0.limits.burst = 2 }
        let client = InProcessClient(kernel)
        let user: JSON = ["auth": .string(Self.userToken)]
        #expect(client.call("rewards.balance", user)["result"] != nil)
        #expect(client.call("rewards.balance", user)["result"] != nil)
        let refused = client.call("rewards.earn", ["auth": .string(Self.userToken), "xp": 10, "reason": "r", "key": "k"])
        #expect(refused["error"]?["code"] == -32029)
        #expect(refused["error"]?["data"]?["reason"] == "rate_limited")
        let wait = try #require(refused["error"]?["data"]?["retryAfterMs"]?.intValue)
        #expect(wait > 0 && wait <= 1000)
        #expect(client.call("rewards.balance", user)["error"]?["data"]?["reason"] == "rate_limited")
        // Nothing of the refused write was stored, and a service token is never limited.
        for _ in 0..<20 { #expect(client.call("kernel.info", ["auth": .string(testServiceToken)])["result"] != nil) }
        #expect(client.call("sync.changes", user)["error"] != nil)
        let other = client.call("auth.signUp", ["email": "b@example.com", "password": "password-b"])
        let tokenB = try #require(other["result"]?["accessToken"]?.stringValue)
        #expect(client.call("rewards.balance", ["auth": .string(tokenB)])["result"] != nil, "another user is served")
    }

    static func samples(_ uuids: ClosedRange<Int>) -> JSON {
        .array(uuids.map { i in
            ["uuid": .string(String(format: "0a000000-0000-4000-8000-%012d", i)), "type": "HKQuantityTypeIdentifierStepCount",
             "value": 10, "unit": "count", "start": "2025-03-01T10:00:00Z", "end": "2025-03-01T10:01:00Z"]
        })
    }

    @Test func healthItemsPastTheQuotaAreRefusedAndNothingIsStored() throws {
        let kernel = try makeKernel { $0.limits.healthItemsPerUser = 3; $0.limits.requestsPerSecond = 0 }
        let client = InProcessClient(kernel)
        let auth = JSON.string(Self.userToken)
        #expect(client.call("health.ingest", ["auth": auth, "samples": Self.samples(1...2)])["result"]?["accepted"]?["samples"] == 2)
        let refused = client.call("health.ingest", ["auth": auth, "samples": Self.samples(2...4)])
        #expect(refused["error"]?["code"] == -32029)
        #expect(refused["error"]?["data"]?["reason"] == "quota_exceeded")
        let summary = client.call("health.summary", ["auth": auth, "from": "2025-03-01", "to": "2025-03-01"])
        #expect(summary["result"]?["days"]?.arrayValue?.first?["metrics"]?["HKQuantityTypeIdentifierStepCount"]?["sum"] == .double(20), "nothing of it was stored")
        // Re-sending what is stored adds nothing; a delete makes room.
        #expect(client.call("health.ingest", ["auth": auth, "samples": Self.samples(1...3)])["result"] != nil)
        #expect(client.call("health.ingest", ["auth": auth, "samples": Self.samples(4...4)])["error"]?["data"]?["reason"] == "quota_exceeded")
        #expect(client.call("health.delete", ["auth": auth, "uuids": [.string(String(format: "0a000000-0000-4000-8000-%012d", 1))]])["result"] != nil)
        #expect(client.call("health.ingest", ["auth": auth, "samples": Self.samples(4...4)])["result"] != nil)
        #expect(client.call("health.ingest", ["auth": auth, "samples": Self.samples(5...5), "dryRun": true])["error"]?["data"]?["reason"] == "quota_exceeded")
    }

    /// #38 item 6: 20 ingest-and-delete cycles under a 60,000-item quota left a million tombstones.
    /// Past `limits.tombstonesPerUser` the oldest go; a cursor from before them is told to read again.
    @Test(arguments: StoreKind.allCases)
    func tombstonesPastTheLimitAreDroppedAndOlderCursorsReadAgain(_ store: StoreKind) throws {
        let kernel = try makeKernel(on: store) { $0.limits.tombstonesPerUser = 8; $0.limits.requestsPerSecond = 0 }
        let client = InProcessClient(kernel)
        let auth = JSON.string(Self.userToken)
        let uuid = { (i: Int) in JSON.string(String(format: "0a000000-0000-4000-8000-%012d", i)) }
        #expect(client.call("health.ingest", ["auth": auth, "samples": Self.samples(1...40)])["result"] != nil)
        let session = try #require(client.call("sessions.record", ["auth": auth, "startTime": "2025-03-01T10:00:00Z",
                                                                    "durationSeconds": 60])["result"]?["sessionId"])
        let before = try #require(client.call("sync.changes", ["auth": auth, "limit": 1000])["result"]?["cursor"])
        for i in stride(from: 1, through: 37, by: 4) {
            #expect(client.call("health.delete", ["auth": auth, "uuids": .array((i...i + 3).map(uuid))])["result"] != nil)
        }
        let stale = client.call("sync.changes", ["auth": auth, "since": before])
        #expect(stale["error"]?["code"] == -32602)
        #expect(stale["error"]?["data"]?["reason"] == "cursor_expired")
        #expect(stale["error"]?["data"]?["field"] == "params.since")
        // Another entity's feed lost nothing: the same cursor still reads it.
        #expect(client.call("sync.changes", ["auth": auth, "since": before, "entities": ["sessions.session"]])["result"]?["changes"] == [])
        // From the start: every record as it stands, and at most the limit (plus a quarter per PostgreSQL
        // kernel between drops) of deletes.
        let all = try #require(client.call("sync.changes", ["auth": auth, "limit": 1000])["result"])
        let changes = try #require(all["changes"]?.arrayValue)
        let deletes = changes.filter { $0["op"] == "delete" }.count
        #expect(deletes >= 6 && deletes <= 10, "\(deletes) deletes kept")
        #expect(changes.filter { $0["op"] == "upsert" }.count > 0)
        #expect(changes.allSatisfy { $0["id"] != "" })
        // A cursor from after the drop goes on working: the next delete comes through it.
        #expect(client.call("sessions.delete", ["auth": auth, "sessionId": session])["result"] != nil)
        let after = try #require(all["cursor"])
        let next = try #require(client.call("sync.changes", ["auth": auth, "since": after])["result"]?["changes"]?.arrayValue)
        #expect(next.map { $0["id"] } == [session])
    }

    /// #38 item 6: sessions and the rewards ledger grew as fast as the rate limit let them.
    @Test(arguments: StoreKind.allCases)
    func sessionsAndTheRewardsLedgerHaveQuotas(_ store: StoreKind) throws {
        let kernel = try makeKernel(on: store) {
            $0.limits.sessionsPerUser = 2; $0.limits.rewardsLedgerPerUser = 3; $0.limits.requestsPerSecond = 0
        }
        let client = InProcessClient(kernel)
        let auth = JSON.string(Self.userToken)
        let record = { (hour: Int) in
            client.call("sessions.record", ["auth": auth, "startTime": .string("2025-03-01T\(10 + hour):00:00Z"), "durationSeconds": 60])
        }
        let first = try #require(record(0)["result"]?["sessionId"])
        #expect(record(1)["result"] != nil)
        #expect(record(2)["error"]?["data"]?["reason"] == "quota_exceeded")
        #expect(client.call("sessions.start", ["auth": auth])["error"]?["data"]?["reason"] == "quota_exceeded")
        #expect(client.call("sessions.list", ["auth": auth])["result"]?["sessions"]?.arrayValue?.count == 2, "nothing of it was stored")
        // A delete makes room; a timer then runs and its stop is never refused.
        #expect(client.call("sessions.delete", ["auth": auth, "sessionId": first])["result"] != nil)
        #expect(client.call("sessions.start", ["auth": auth])["result"] != nil)
        #expect(client.call("sessions.stop", ["auth": auth])["result"] != nil)
        #expect(record(3)["error"]?["data"]?["reason"] == "quota_exceeded")

        let earn = { (key: String) in client.call("rewards.earn", ["auth": auth, "xp": 100, "reason": "r", "key": .string(key)]) }
        #expect(earn("a")["result"] != nil)
        #expect(earn("b")["result"] != nil)
        #expect(earn("a")["result"] != nil, "a credit already made is answered again, not counted")
        #expect(client.call("rewards.redeem", ["auth": auth, "xp": 100])["result"] != nil)
        #expect(client.call("rewards.spend", ["auth": auth, "minutes": 5])["result"] != nil)
        let refused = earn("c")
        #expect(refused["error"]?["code"] == -32029 && refused["error"]?["data"]?["reason"] == "quota_exceeded")
        #expect(client.call("rewards.spend", ["auth": auth, "minutes": 1])["error"]?["data"]?["reason"] == "quota_exceeded")
        #expect(client.call("rewards.balance", ["auth": auth])["result"]?["xp"] == 100, "the refused credit changed nothing")
    }

    @Test func rawBytesPastTheQuotaAreRefusedAndNothingIsStored() throws {
        let kernel = try makeKernel { $0.limits.rawBytesPerUser = 1000; $0.limits.requestsPerSecond = 0 }
        let client = InProcessClient(kernel)
        let auth = JSON.string(Self.userToken)
        #expect(client.call("screentime.updateConnection", ["auth": auth, "enabled": true])["result"] != nil)
        let raw: JSON = ["pad": .string(String(repeating: "x", count: 600))]
        #expect(client.call("screentime.upload", ["auth": auth, "date": "2025-03-01", "verifiedMinutes": 5, "raw": raw])["result"] != nil)
        let refused = client.call("screentime.upload", ["auth": auth, "date": "2025-03-02", "verifiedMinutes": 5, "raw": raw])
        #expect(refused["error"]?["code"] == -32029)
        #expect(refused["error"]?["data"]?["reason"] == "quota_exceeded")
        #expect(client.call("screentime.day", ["auth": auth, "date": "2025-03-02"])["error"]?["code"] == -32004, "nothing was stored")
        // Replacing a day's raw counts the difference; an upload without raw is always fine.
        #expect(client.call("screentime.upload", ["auth": auth, "date": "2025-03-01", "verifiedMinutes": 5, "raw": ["small": 1]])["result"] != nil)
        #expect(client.call("screentime.upload", ["auth": auth, "date": "2025-03-02", "verifiedMinutes": 5, "raw": raw])["result"] != nil)
        #expect(client.call("screentime.upload", ["auth": auth, "date": "2025-03-03", "verifiedMinutes": 5])["result"] != nil)
    }
}

private extension Timestamp {
    func advanced(ms: Int64) -> Timestamp { Timestamp(milliseconds: milliseconds + ms) }
}
