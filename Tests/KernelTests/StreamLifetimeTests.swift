import Foundation
import JSON
import JSONRPC
import Testing
import TestSupport
import Threads
@testable import Kernel

/// Jobs the kernel hands off, kept until the test runs them.
final class HeldJobs: Executor, @unchecked Sendable {
    var jobs: [@Sendable () -> Void] = []
    func submit(_ job: @escaping @Sendable () -> Void) { jobs.append(job) }
    func runAll() {
        let taken = jobs
        jobs = []
        for job in taken { job() }
    }
}

/// A stream and its requests are freed when its host goes, whatever they were doing.
@Suite struct StreamLifetimeTests {
    /// Found by the simulation (every seed, once it checked that a stopped kernel is freed): a stream
    /// closed while a slow request of it was in flight (a phone that hung up during a month's upload)
    /// was never freed, nor the request (the month's samples and its plan), since a request's context
    /// refers to its stream and the stream to its requests.
    @Test func aStreamClosedDuringSlowWorkIsFreedWithItsRequest() throws {
        let held = HeldJobs()
        let kernel = try makeKernel(executor: held) { $0.limits.requestsPerSecond = 0 }
        defer { kernel.shutdown() }
        weak var stream: RequestStream?
        do {
            var connection = kernel.connection()
            stream = connection.stream
            let sample: JSON = ["uuid": "11111111-1111-4111-8111-111111111111", "type": "HKQuantityTypeIdentifierStepCount", "value": 100,
                                "unit": "count", "start": "2025-03-01T10:00:00Z", "end": "2025-03-01T10:01:00Z"]
            let line: JSON = ["jsonrpc": "2.0", "id": 1, "method": "health.ingest",
                              "params": ["auth": .string(LimitsTests.userToken), "timezone": "UTC", "samples": [sample]]]
            connection.receive(Array(line.serialized.utf8) + [0x0A])
            _ = connection.endBatch(waitAbove: nil)
            #expect(held.jobs.count == 1, "the ingest is planned on a worker")
            connection.close()
        }
        held.runAll()
        #expect(stream == nil, "the closed stream is freed")
    }
}
