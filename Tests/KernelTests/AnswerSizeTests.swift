import Foundation
import JSON
import JSONParsing
import JSONRPC
import Testing
import TestSupport
@testable import Kernel

/// Issue "Security and robustness defects", item 10: no answer is longer than the line limit. A year of
/// `screentime.history {includeRaw: true}` once answered 96 MB and a socket connection was cut with every
/// call in flight on it.
@Suite struct AnswerSizeTests {
    static let limit = 1 << 20
    static let raw: JSON = ["pad": .string(String(repeating: "r", count: 200_000))]

    /// A kernel answering lines of at most 1 MiB, with ten days of 200 KB `raw` for the test user.
    func kernelWithTenDays() throws -> (Kernel, InProcessClient) {
        let kernel = try makeKernel { $0.maxLineBytes = Self.limit }
        let client = InProcessClient(kernel)
        let auth = JSON.string(LimitsTests.userToken)
        #expect(client.call("screentime.updateConnection", ["auth": auth, "enabled": true])["result"] != nil)
        for d in 1...10 {
            let date = JSON.string(String(format: "2025-03-%02d", d))
            #expect(client.call("screentime.upload", ["auth": auth, "date": date, "verifiedMinutes": 5, "raw": Self.raw])["result"] != nil)
        }
        return (kernel, client)
    }

    @Test func historyWithRawAsksForFewerDaysPastTheLimit() throws {
        let (_, client) = try kernelWithTenDays()
        let auth = JSON.string(LimitsTests.userToken)
        let all = client.call("screentime.history", ["auth": auth, "from": "2025-03-01", "to": "2025-03-31", "includeRaw": true])
        #expect(all["error"]?["code"] == -32602)
        #expect(all["error"]?["data"]?["reason"] == "answer_too_large")
        #expect(all["error"]?["data"]?["field"] == "params.to")
        let some = client.call("screentime.history", ["auth": auth, "from": "2025-03-01", "to": "2025-03-03", "includeRaw": true])
        #expect(some["result"]?["days"]?.arrayValue?.count == 3)
        let lean = client.call("screentime.history", ["auth": auth, "from": "2025-03-01", "to": "2025-03-31"])
        #expect(lean["result"]?["days"]?.arrayValue?.count == 10, "without raw the whole range fits")
    }

    @Test func theFeedWithDataPagesByBytes() throws {
        let (_, client) = try kernelWithTenDays()
        let auth = JSON.string(LimitsTests.userToken)
        var since: JSON? = nil
        var days: [String] = []
        var pages = 0
        repeat {
            var params: JSON = ["auth": auth, "limit": 1000, "includeData": true, "entities": ["screentime.day"]]
            if let since, case .object(var o) = params {
                o["since"] = since
                params = .object(o)
            }
            let page = client.call("sync.changes", params)
            let result = try #require(page["result"], "\(page)")
            #expect(result.bytes.count < Self.limit)
            days += result["changes"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
            since = result["cursor"]
            pages += 1
            if result["hasMore"] != .bool(true) { break }
        } while pages < 20
        #expect(pages > 1, "one page would have been about 2 MB")
        #expect(days == (1...10).map { String(format: "2025-03-%02d", $0) }, "every day once, in order")
    }

    @Test func anyReadAnswerPastTheLimitIsRefusedNotCut() throws {
        // The smallest answer limit there is (256 KiB: the OpenRPC document alone passed 64 KiB), and about
        // 300 KB of rows for test.dump to answer.
        let kernel = try makeKernel { $0.maxLineBytes = 30_000; $0.enableTestMethods = true }
        let client = InProcessClient(kernel)
        let value = JSON.string(String(repeating: "d", count: 25_000))
        for key in "abcdefghijkl" { #expect(client.call("test.write", ["key": .string(String(key)), "value": value])["result"] != nil) }
        let dump = client.call("test.dump", [:])
        #expect(dump["error"]?["code"] == -32602)
        #expect(dump["error"]?["data"]?["reason"] == "answer_too_large")
        #expect(client.call("kernel.info", [:])["result"] != nil, "a short line limit still answers ordinary reads")
        #expect(client.call("rpc.discover", [:])["result"] != nil)
    }
}

/// Security round 2, item 2: one line of 20,000 `rpc.discover` calls once got a 1.22 GB answer line.
/// A batch holds at most `Dispatcher.maxBatchLength` requests, and its answer stays within the line limit.
extension AnswerSizeTests {
    func batch(_ count: Int, _ method: String) -> [UInt8] {
        JSON.array((0..<count).map { i in ["jsonrpc": "2.0", "id": .int(Int64(i)), "method": .string(method)] }).bytes + [0x0A]
    }

    @Test func aBatchPastItsLengthIsRefusedWhole() throws {
        let kernel = try makeKernel { $0.maxLineBytes = Self.limit }
        var connection = kernel.connection()
        connection.receive(batch(20_000, "kernel.info"))
        _ = connection.endBatch()
        let answer = try JSON.parse(Array(connection.output.dropLast()))
        #expect(answer["error"]?["code"] == -32600 && answer["error"]?["data"]?["reason"] == "batch_too_large", "\(answer.serialized.prefix(300))")
        #expect(connection.output.count < 1000)
    }

    @Test func aBatchAnswerStaysWithinTheLineLimit() throws {
        let kernel = try makeKernel { $0.maxLineBytes = Self.limit }
        var connection = kernel.connection()
        // rpc.discover answers about 100 KB: 1,000 of them would be a 100 MB line.
        connection.receive(batch(Dispatcher.maxBatchLength, "rpc.discover"))
        _ = connection.endBatch()
        #expect(connection.output.count <= Self.limit + 1, "\(connection.output.count) bytes")
        let answers = try #require(try JSON.parse(Array(connection.output.dropLast())).arrayValue)
        #expect(answers.count == Dispatcher.maxBatchLength, "every element is answered")
        #expect(answers.first?["result"] != nil)
        #expect(answers.last?["error"]?["data"]?["reason"] == "answer_too_large")
        #expect(answers.map { $0["id"] } == (0..<Dispatcher.maxBatchLength).map { JSON.int(Int64($0)) })
        // Held behind a slow request, the batch goes out through its slots: the same bound.
        var slow = kernel.connection()
        let signUp: JSON = ["jsonrpc": "2.0", "id": "up", "method": "auth.signUp", "params": ["email": "batch@example.com", "password": "correct horse battery"]]
        slow.receive(JSON.array([signUp] + (0..<999).map { i in ["jsonrpc": "2.0", "id": .int(Int64(i)), "method": "rpc.discover"] }).bytes + [0x0A])
        _ = slow.endBatch()
        #expect(slow.output.count <= Self.limit + 1, "\(slow.output.count) bytes")
        let held = try #require(try JSON.parse(Array(slow.output.dropLast())).arrayValue)
        #expect(held.count == 1000 && held.first?["result"]?["accessToken"] != nil, "the write's answer stays")
        #expect(held.last?["error"]?["data"]?["reason"] == "answer_too_large")
    }
}
