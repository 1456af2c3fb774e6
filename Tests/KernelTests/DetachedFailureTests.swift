import Chrono
import Foundation
import JSON
import Logging
import Postgres
import PostgresModel
import Testing
import TestSupport
import Threads
@testable import Kernel

/// Jobs the kernel hands off, run one at a time in the order the test picks.
final class PickedJobs: Executor, @unchecked Sendable {
    var jobs: [@Sendable () -> Void] = []
    func submit(_ job: @escaping @Sendable () -> Void) { jobs.append(job) }
    func run(_ index: Int) { jobs.remove(at: index)() }
    func runAll() { while !jobs.isEmpty { run(0) } }
}

/// A detached commit's failure reaches the request that made it, whatever else waited on the commit.
@Suite(.oneStoreOnly) struct DetachedFailureTests {
    /// Found by the simulation on its model of PostgreSQL (seeds 135, 173, 202, 206 of `--store
    /// postgres-model`, once writes of a few samples could commit detached): a request that committed
    /// nothing (an ingest sent again) was held, like its stream's detached write before it, until that
    /// commit was applied, and the commit's failure, told once, went to whichever was released first.
    /// The write, never made, was answered as made, and its samples were gone.
    @Test func aDetachedCommitsFailureIsAnsweredToItsOwnRequest() throws {
        let jobs = PickedJobs()
        let server = ModelServer()
        var config = KernelConfig()
        config.storeURL = "postgres://model"
        config.storeSchema = "detached_failure"
        config.auth.jwtSecret = testSecret
        config.limits.requestsPerSecond = 0
        config.bigUnitEntries = 2
        let kernel = try Kernel(config: config, logger: Logger(label: "test"), executor: jobs, database: server)
        defer { kernel.shutdown() }
        let (a, b) = ("00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b")
        func ingest(_ id: Int, _ user: String, _ uuids: [String]) -> [UInt8] {
            let samples: [JSON] = uuids.enumerated().map { i, uuid in
                ["uuid": .string(uuid), "type": "HKQuantityTypeIdentifierStepCount", "value": .int(Int64(10 + i)), "unit": "count",
                 "start": .string("2025-03-01T10:0\(i):00Z"), "end": .string("2025-03-01T10:0\(i):30Z")]
            }
            let token = kernel.auth.mint(sub: user, role: "authenticated", ttl: 3600, now: kernel.clock.now())
            let line: JSON = ["jsonrpc": "2.0", "id": .int(Int64(id)), "method": "health.ingest",
                              "params": ["auth": .string(token), "timezone": "UTC", "samples": .array(samples)]]
            return Array(line.serialized.utf8) + [0x0A]
        }
        let uuidsA = (0..<3).map { _ in UUID().uuidString }, uuidsB = (0..<3).map { _ in UUID().uuidString }
        var connection = kernel.connection()
        func answers() throws -> [Int64: JSON] {
            defer { connection.output.removeAll() }
            var out: [Int64: JSON] = [:]
            for line in connection.output.split(separator: 10) {
                let answer = try JSON.parse(Array(line))
                if let id = answer["id"]?.intValue { out[id] = answer }
            }
            return out
        }
        // B's samples are stored: B sending them again commits nothing.
        connection.receive(ingest(1, b, uuidsB))
        for _ in 0..<10 where connection.output.isEmpty {
            _ = connection.endBatch(waitAbove: nil)
            jobs.runAll()
        }
        #expect(try answers()[1]?["result"] != nil)
        // B's repeat first, then A's write; A's plan finishes first, so one batch applies A's (detached:
        // three samples and a day, past the big unit of 2) and then B's, which commits nothing.
        connection.receive(ingest(2, b, uuidsB) + ingest(3, a, uuidsA))
        _ = connection.endBatch(waitAbove: nil)
        #expect(jobs.jobs.count == 2, "both ingests are planned on workers")
        jobs.run(1)
        jobs.run(0)
        _ = connection.endBatch(waitAbove: nil)
        #expect(jobs.jobs.count >= 1, "A's commit runs detached")
        // Another writer moves A's version before the detached commit runs: it is refused as stale.
        let admin = try server.connect(setup: [Statement("SET search_path TO detached_failure")], log: { _ in })
        let moved = try admin.run([Statement("""
            INSERT INTO users (usr, feed_seq, version) VALUES ($1, $2, 1)
            ON CONFLICT (usr) DO UPDATE SET feed_seq = users.feed_seq + $2, version = users.version + 1 RETURNING feed_seq
            """, [a, "0"])])
        #expect(moved[0].error == nil)
        jobs.runAll()
        for _ in 0..<10 {
            _ = connection.endBatch(waitAbove: nil)
            _ = connection.applyBacklog()
            jobs.runAll()
        }
        let got = try answers()
        #expect(got[2]?["result"] != nil, "B's repeat is answered: \(got[2].map { $0.serialized } ?? "nothing")")
        #expect(got[3]?["error"]?["code"] == -32050, "A's write was not made, and says so: \(got[3].map { $0.serialized } ?? "nothing")")
        #expect(server.committedRows(schema: "detached_failure")["health.samples"]?[a] == nil, "none of A's samples is stored")
    }
}
