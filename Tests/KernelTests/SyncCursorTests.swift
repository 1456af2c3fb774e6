import Chrono
import Foundation
import JSON
import JSONParsing
import Testing
@testable import Kernel

/// Feed cursors are bound to their user and to the feed they came from.
@Suite struct SyncCursorTests {
    static let alice = ScreenTimeBinaryTests.userToken

    func call(_ kernel: Kernel, _ method: String, _ params: JSON) throws -> JSON {
        let line = JSON.object(JSONObject([("jsonrpc", "2.0"), ("id", 1), ("method", .string(method)), ("params", params)])).serialized
        return try JSON.parse(kernel.run(input: Array((line + "\n").utf8)))
    }

    @Test func foreignAndFutureCursorsAreRefused() throws {
        let kernel = try makeKernel()
        for date in ["2025-03-01", "2025-03-02"] {
            #expect(try call(kernel, "screentime.claim", ["auth": .string(Self.alice), "date": .string(date), "minutes": 5])["result"] != nil)
        }
        let cursor = try #require(try call(kernel, "sync.changes", ["auth": .string(Self.alice)])["result"]?["cursor"]?.stringValue)
        // Another user's token with Alice's cursor: not a cursor of that user's feed.
        let bob = kernel.auth.mint(sub: "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb", role: "authenticated", ttl: 3600, now: SystemClock().now())
        let foreign = try call(kernel, "sync.changes", ["auth": .string(bob), "since": .string(cursor)])
        #expect(foreign["error"]?["data"] == ["reason": "invalid_params", "field": "params.since"])
        // The same cursor on a kernel whose feed has not reached it (same secret, fresh memory): ahead.
        let fresh = try makeKernel()
        let ahead = try call(fresh, "sync.changes", ["auth": .string(Self.alice), "since": .string(cursor)])
        #expect(ahead["error"]?["data"] == ["reason": "out_of_range", "field": "params.since"])
        // And on the feed it came from, it reads on from where it was.
        #expect(try call(kernel, "sync.changes", ["auth": .string(Self.alice), "since": .string(cursor)])["result"]?["changes"] == [])
    }
}
