import Auth
import Chrono
import Foundation
import JSON
import JSONParsing
import Logging
import Testing
import TestSupport
import Threads
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

/// Security round 2, item 8: a subscription ends with its service token, and the stream that
/// subscribed can always unsubscribe, expired token or none.
@Suite(.oneStoreOnly) struct SubscriptionLifetimeTests {
    final class MovableClock: Clock, @unchecked Sendable {
        let offset = Locked<Int64>(0)
        func now() -> Timestamp { Timestamp(milliseconds: SystemClock().now().milliseconds + offset.withLock { $0 }) }
        func monotonicMicros() -> UInt64 { SystemClock().monotonicMicros() }
    }

    @Test func aSubscriptionEndsAtItsTokensExpiryAndCanAlwaysBeEnded() throws {
        let clock = MovableClock()
        var config = KernelConfig()
        config.memoryOnly = true
        config.auth.jwtSecret = testSecret
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let kernel = try Kernel(config: config, clock: clock, logger: logger)
        let minter = try TokenMinter(secret: Array(testSecret.utf8), ttl: 600)
        let service = JSON.string(minter.mint(sub: nil, role: "service_role", now: clock.now()))
        let host = InProcessClient(kernel), phone = InProcessClient(kernel)
        #expect(host.call("events.subscribe", ["auth": service])["result"]?["subscribed"] == true)
        let user = JSON.string(LimitsTests.userToken)
        func heard() -> Int {
            host.connection.receive(Array(#"{"jsonrpc":"2.0","id":"ping","method":"kernel.setOrdering","params":{"mode":"read"}}"#.utf8) + [0x0A])
            _ = host.connection.endBatch()
            defer { host.connection.output.removeAll() }
            return String(decoding: host.connection.output, as: UTF8.self).components(separatedBy: "events.changed").count - 1
        }
        #expect(phone.call("rewards.earn", ["auth": user, "xp": 10, "reason": "walk", "key": "a"])["result"] != nil)
        #expect(heard() == 1, "heard while the token lasts")
        // Past the token's exp (and its 60 s of leeway): nothing more.
        clock.offset.withLock { $0 = 700_000 }
        #expect(phone.call("rewards.earn", ["auth": user, "xp": 10, "reason": "walk", "key": "b"])["result"] != nil)
        #expect(heard() == 0, "the subscription outlived its token")
        // The expired token cannot subscribe again, but unsubscribing needs no token at all.
        #expect(host.call("events.subscribe", ["auth": service])["error"]?["code"] == -32001)
        #expect(host.call("events.unsubscribe", ["auth": service])["result"]?["subscribed"] == false)
        #expect(host.call("events.unsubscribe", [:])["result"]?["subscribed"] == false)
    }
}
