import Foundation
import JSON
import Testing
import Threads
import TestSupport
@testable import Kernel

/// PostgreSQL going away under a kernel: requests that cannot commit answer -32050 and change nothing,
/// and the same kernel serves again once the server is back.
@Suite(.serialized) struct PostgresFailureTests {
    @Test func aServerStoppedAndStartedUnderLoadLosesNothingAnswered() throws {
        let server = TestPostgres.Private()
        defer { server.stop() }
        let kernel = try makeKernel { config in
            config.memoryOnly = false
            config.storeURL = server.url
            config.storeSchema = "healthkernel"
            config.enableTestMethods = true
        }
        defer { kernel.shutdown() }
        let client = InProcessClient(kernel)
        let answered = Locked<[String]>([]), refused = Locked<[String]>([]), other = Locked<[JSON]>([])
        let running = SharedFlag()
        running.set(true)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var i = 0
            while running.isSet {
                let key = "k\(i)"
                let answer = client.call("test.write", ["key": .string(key), "value": .string("v\(i)")])
                if answer["result"] != nil {
                    answered.append(key)
                } else if answer["error"]?["code"] == -32050 {
                    refused.append(key)
                } else {
                    other.append(answer)
                }
                i += 1
            }
            done.signal()
        }
        usleep(300_000)
        server.halt()
        usleep(500_000)
        server.resume()
        // The kernel serves again by itself: wait for writes answered after the restart.
        let before = answered.value.count
        let deadline = Date().addingTimeInterval(30)
        while answered.value.count < before + 50 && Date() < deadline { usleep(50_000) }
        running.set(false)
        done.wait()

        #expect(other.value.isEmpty, "only results and -32050: \(other.value.prefix(3))")
        #expect(!refused.value.isEmpty, "writes while the server was down answer -32050")
        #expect(answered.value.count >= before + 50, "the same kernel serves after the restart")
        let dump = client.call("test.dump", [:])
        let rows = dump["result"]?["rows"]?.arrayValue ?? []
        let stored = Set(rows.compactMap { $0["key"]?.stringValue })
        let lost = answered.value.filter { !stored.contains($0) }
        #expect(lost.isEmpty, "every answered write is stored: \(lost.prefix(5))")
        // Nothing half-applied: each key has both of its copies.
        #expect(rows.allSatisfy { $0["a"] == $0["b"] }, "no write half-applied")
    }
}
