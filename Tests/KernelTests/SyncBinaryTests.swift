import Auth
import Chrono
import Foundation
import JSON
import Testing
import TestSupport

/// The change feed and host events through the real binary, across a kill -9 and a restart.
@Suite(.oneStoreOnly) struct SyncBinaryTests {
    static let user = ScreenTimeBinaryTests.userToken

    func line(_ id: Int, _ method: String, _ params: JSON) -> String {
        JSON.object(JSONObject([("jsonrpc", "2.0"), ("id", .int(Int64(id))), ("method", .string(method)), ("params", params)])).serialized
    }

    /// Sends `lines` in one write; returns the responses by id and the notifications in the order read.
    func exchange(_ k: LiveKernel, _ lines: [String], notifications expected: Int) -> ([Int64: JSON], [JSON]) {
        k.send(lines)
        var responses: [Int64: JSON] = [:], notices: [JSON] = []
        while responses.count < lines.count || notices.count < expected {
            guard let text = k.readRawLine(timeoutSeconds: 10), let value = try? JSON.parse(text) else { break }
            if let id = value["id"]?.intValue { responses[id] = value } else { notices.append(value) }
        }
        return (responses, notices)
    }

    func claims(_ dates: [String], from id: Int) -> [String] {
        dates.enumerated().map { i, date in
            line(id + i, "screentime.claim", ["auth": .string(Self.user), "date": .string(date), "minutes": .int(Int64(10 + i))])
        }
    }

    /// #51 item 15: a subscription ended at its service token's expiry with no word. Now it says
    /// `events.ending` within five minutes of the end and `events.ended` at it (an idle stream too, woken
    /// by the kernel's alarm), and `events.renew` with a fresh token moves the end on the same stream.
    @Test func aSubscriptionSaysItIsEndingAndEndedAndRenewsOnItsStream() throws {
        let dir = temporaryDirectory("events-end")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let k = try LiveKernel(["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "error"])
        defer {
            k.closeInput()
            _ = k.finish()
        }
        // Taken until 60 s past its exp (the clock-skew allowance): an exp 58 s ago leaves it 2 s.
        let short = try TokenMinter(secret: Array(testSecret.utf8), ttl: -58).mint(sub: nil, role: "service_role", now: SystemClock().now())
        var (r, notices) = exchange(k, [line(1, "events.subscribe", ["auth": .string(short)])], notifications: 1)
        let endsAt = try #require(r[1]?["result"]?["endsAt"]?.stringValue)
        #expect(notices.first?["method"] == "events.ending" && notices.first?["params"]?["endsAt"] == .string(endsAt), "\(notices)")
        // Nothing is written to the stream meanwhile: the alarm wakes it at the end.
        let ended = try #require(k.readRawLine(timeoutSeconds: 15).flatMap { try? JSON.parse($0) })
        #expect(ended["method"] == "events.ended" && ended["params"]?["reason"] == "token_expired", "\(ended)")
        // Gone: a change is not announced, and renewing needs a new subscription.
        (r, notices) = exchange(k, claims(["2025-04-01"], from: 2) + [line(3, "events.renew", ["auth": .string(testServiceToken)])], notifications: 0)
        #expect(notices.isEmpty && r[3]?["error"]?["data"]?["reason"] == "not_subscribed", "\(notices) \(String(describing: r[3]))")

        // Renewed before its end, a subscription goes on past the first token's expiry.
        let brief = try TokenMinter(secret: Array(testSecret.utf8), ttl: -58).mint(sub: nil, role: "service_role", now: SystemClock().now())
        (r, _) = exchange(k, [line(4, "events.subscribe", ["auth": .string(brief)]), line(5, "events.renew", ["auth": .string(testServiceToken)])],
                          notifications: 1)
        #expect(r[5]?["result"]?["endsAt"] == "2100-01-01T00:01:00.000Z")
        #expect(k.readRawLine(timeoutSeconds: 4) == nil, "no events.ended after the first token's expiry")
        (r, notices) = exchange(k, claims(["2025-04-02"], from: 6), notifications: 1)
        #expect(notices.first?["method"] == "events.changed", "\(notices)")
    }

    @Test func hostGetsEachChangeOnceInOrderAndTheFeedResumesAcrossARestart() throws {
        let dir = temporaryDirectory("sync")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let args = ["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "error"]
        let subscribe = line(1, "events.subscribe", ["auth": .string(testServiceToken)])

        var k = try LiveKernel(args)
        var (r, _) = exchange(k, [subscribe], notifications: 0)
        #expect(r[1]?["result"]?["subscribed"] == true)
        let first = ["2025-03-01", "2025-03-02", "2025-03-03"]
        var notices: [JSON]
        (r, notices) = exchange(k, claims(first, from: 10) + [line(20, "rewards.earn", ["auth": .string(Self.user), "xp": 5, "reason": "r", "key": "k"])],
                                notifications: 4)
        #expect(r.count == 4 && r.values.allSatisfy { $0["result"] != nil })
        #expect(notices.map { $0["params"]?["id"] } == ["2025-03-01", "2025-03-02", "2025-03-03", "balance"])
        #expect(notices.allSatisfy { $0["method"] == "events.changed" && $0["params"]?["userId"] == "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa" })
        let seqs = notices.compactMap { $0["params"]?["seq"]?.intValue }
        #expect(seqs == seqs.sorted() && Set(seqs).count == 4, "notifications out of order or repeated: \(seqs)")
        (r, _) = exchange(k, [line(30, "sync.changes", ["auth": .string(Self.user)])], notifications: 0)
        let feed = r[30]?["result"]?["changes"]?.arrayValue ?? []
        #expect(feed.map { $0["id"] } == ["2025-03-01", "2025-03-02", "2025-03-03", "balance"])
        #expect(feed.compactMap { $0["seq"]?.intValue } == seqs, "the feed and the notifications disagree")
        let cursor = try #require(r[30]?["result"]?["cursor"]?.stringValue)
        k.kill9()
        _ = k.finish()

        // After a crash: new changes only, each once, after everything before; the stored cursor resumes.
        k = try LiveKernel(args)
        (r, _) = exchange(k, [subscribe], notifications: 0)
        #expect(r[1]?["result"]?["seq"]?.intValue ?? 0 >= seqs.last ?? 0)
        (r, notices) = exchange(k, claims(["2025-03-04", "2025-03-01"], from: 40), notifications: 2)
        #expect(notices.map { $0["params"]?["id"] } == ["2025-03-04", "2025-03-01"])
        let later = notices.compactMap { $0["params"]?["seq"]?.intValue }
        #expect(later.allSatisfy { $0 > seqs.last ?? 0 } && later == later.sorted())
        (r, _) = exchange(k, [line(50, "sync.changes", ["auth": .string(Self.user), "since": .string(cursor)])], notifications: 0)
        #expect(r[50]?["result"]?["changes"]?.arrayValue?.map { $0["id"] } == ["2025-03-04", "2025-03-01"])
        let next = try #require(r[50]?["result"]?["cursor"]?.stringValue)
        (r, _) = exchange(k, [line(51, "sync.changes", ["auth": .string(Self.user), "since": .string(next)])], notifications: 0)
        #expect(r[51]?["result"]?["changes"] == [])
        // Deleting the user removes the feed with the user; no event is written for it.
        (r, notices) = exchange(k, [line(60, "auth.deleteUser", ["auth": .string(Self.user)])], notifications: 0)
        #expect(r[60]?["result"]?["deleted"] == true && notices.isEmpty)
        (r, _) = exchange(k, [line(61, "sync.changes", ["auth": .string(Self.user)])], notifications: 0)
        #expect(r[61]?["result"]?["changes"] == [])
        // A cursor of the deleted feed is still refused only when it is ahead of the kernel or forged.
        (r, _) = exchange(k, [line(62, "sync.changes", ["auth": .string(Self.user), "since": .string(cursor + "x")])], notifications: 0)
        #expect(r[62]?["error"]?["data"]?["field"] == "params.since")
        k.closeInput()
        #expect(k.finish() == 0)
    }
}
