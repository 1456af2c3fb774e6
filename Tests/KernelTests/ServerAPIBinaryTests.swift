import Chrono
import Foundation
import JSON
import JSONParsing
import Testing
import TestSupport

/// The App Store Server API through the real binary: its configuration, refresh in api mode, recovery of
/// notifications, `kernel.info`, and a refresh of 1,000 memberships while other requests are served.
@Suite(.serialized, .oneStoreOnly) struct ServerAPIBinaryTests {
    static let user = ScreenTimeBinaryTests.userToken
    let apple: FakeAppStoreServer

    init() throws {
        apple = try FakeAppStoreServer(bundleId: AppStoreSetup.bundleId)
    }

    func kernel(_ config: String) throws -> LiveKernel {
        try LiveKernel(["serve", "--memory-only", "--log-level", "error", "--jwt-secret", testSecret, "--config", config])
    }

    func verify(_ k: LiveKernel, _ original: String, id: Int = 1) -> JSON? {
        k.call("subscriptions.verify", ["auth": .string(Self.user), "provider": "apple", "productId": "premium.yearly",
                                        "receipt": .string(AppStoreSetup.receipt(original: original))], id: id)
    }

    @Test func refreshAsksAppleAndRecoveryAppliesHistory() throws {
        let now = AppStoreSetup.now, day = AppStoreSetup.day
        let k = try kernel(try AppStoreSetup.configFile(api: apple))
        #expect(verify(k, "900001")?["result"]?["status"] == "active")
        // Apple says the purchase was refunded an hour ago; no notification came.
        apple.answer { [ca = AppStoreSetup.ca] _ in .json(ca.statuses(5, original: "900001", n: 1, purchase: now - day, signed: now, revoked: now - 3_600_000)) }
        let refresh = k.call("subscriptions.refresh", ["auth": .string(testServiceToken)])?["result"]
        #expect(refresh == ["checked": 1, "expired": 1, "renewed": 0, "unchanged": 0, "failed": 0, "remaining": 0, "mode": "api", "consumption": ["sent": 0, "failed": 0]])
        #expect(k.call("subscriptions.status", ["auth": .string(Self.user)])?["result"]?["error"] == "revoked")

        // A renewal notification that never arrived, in the history.
        let lost = AppStoreSetup.notification(uuid: "6a1f5a57-0000-4000-8000-000000000001", type: "DID_RENEW", original: "900002", n: 2,
                                              purchase: now - 1000, signed: now)
        #expect(verify(k, "900002", id: 2)?["result"]?["status"] == "active")
        apple.answer { r in
            r.environment == "Production" ? .json(["notificationHistory": [["signedPayload": .string(lost)]], "hasMore": false])
                : .json(["notificationHistory": [], "hasMore": false])
        }
        let start = JSON.string(Timestamp(milliseconds: now - 7 * day).description)
        var page = k.call("subscriptions.recoverNotifications", ["auth": .string(testServiceToken), "startDate": start])?["result"]
        #expect(page == ["fetched": 1, "applied": 1, "duplicates": 0, "failed": 0, "paginationToken": "S:"])
        page = k.call("subscriptions.recoverNotifications", ["auth": .string(testServiceToken), "startDate": start,
                                                             "paginationToken": "S:"])?["result"]
        #expect(page?["paginationToken"] == .null && page?["fetched"] == 0)
        #expect(k.call("subscriptions.status", ["auth": .string(Self.user)])?["result"]?["transactionId"] == "900002-2")

        // Refused params, and what kernel.info says (never the key).
        let old = JSON.string(Timestamp(milliseconds: now - 200 * day).description)
        let refused = k.call("subscriptions.recoverNotifications", ["auth": .string(testServiceToken), "startDate": old])?["error"]
        #expect(refused?["code"] == -32602 && refused?["data"]?["field"] == "params.startDate")
        let badToken = k.call("subscriptions.recoverNotifications", ["auth": .string(testServiceToken), "startDate": start, "paginationToken": "abc"])
        #expect(badToken?["error"]?["data"]?["field"] == "params.paginationToken")
        let info = k.call("kernel.info")?["result"]?["appStore"]?["serverApi"]
        #expect(info?["configured"] == true && info?["lastSuccessAt"]?.stringValue != nil && info?["lastFailureAt"] == .null)
        #expect(!(k.call("kernel.info")?.serialized.contains("PRIVATE KEY") ?? true))

        // Apple refuses the key: the answer says why, kernel.info keeps it.
        apple.answer { _ in .error(401, code: 401, "Unauthenticated") }
        let rejected = k.call("subscriptions.recoverNotifications", ["auth": .string(testServiceToken), "startDate": start])?["error"]
        #expect(rejected?["code"] == -32003 && rejected?["data"]?["reason"] == "app_store_key_rejected")
        #expect(k.call("kernel.info")?["result"]?["appStore"]?["serverApi"]?["lastFailure"]?.stringValue?.contains("refused the key") == true)
        k.closeInput()
        #expect(k.finish() == 0)
    }

    @Test func withoutAKeyRefreshRunsOnTheClockAndRecoveryIsRefused() throws {
        let k = try kernel(try AppStoreSetup.configFile())
        #expect(k.call("subscriptions.refresh", ["auth": .string(testServiceToken)])?["result"]?["mode"] == "clock")
        let start = JSON.string(Timestamp(milliseconds: AppStoreSetup.now - AppStoreSetup.day).description)
        let r = k.call("subscriptions.recoverNotifications", ["auth": .string(testServiceToken), "startDate": start])?["error"]
        #expect(r?["code"] == -32003 && r?["data"]?["reason"] == "app_store_api_not_configured")
        #expect(k.call("kernel.info")?["result"]?["appStore"]?["serverApi"]?["configured"] == false)
        k.closeInput()
        #expect(k.finish() == 0)
    }

    @Test func aKeyThatDoesNotParseStopsStartUpNamingWhereItCameFrom() throws {
        let dir = temporaryDirectory("appstore-key")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func start(_ serverApi: JSON, bundleId: Bool = true, environment: [String: String] = [:]) throws -> ProcessResult {
            let path = dir + "/config.json"
            var appStore = JSONObject([("serverApi", serverApi)])
            if bundleId { appStore["bundleId"] = "com.example" }
            try (["appStore": .object(appStore)] as JSON).serialized.write(toFile: path, atomically: true, encoding: .utf8)
            return try runBinary(["serve", "--memory-only", "--config", path], environment: environment)
        }
        let good = apple.keyPEM
        try good.write(toFile: dir + "/good.p8", atomically: true, encoding: .utf8)
        try "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n".write(toFile: dir + "/bad.p8", atomically: true, encoding: .utf8)
        let ids: [(String, JSON)] = [("issuerId", "57246542-96fe-1a63-e053-0824d011072a"), ("keyId", "ABC123")]
        func api(_ extra: [(String, JSON)]) -> JSON { .object(JSONObject(ids + extra)) }

        var r = try start(api([("privateKey", "bad.p8")]))
        #expect(r.status == 2 && r.stderrText.contains("appStore.serverApi.privateKey"), "\(r.stderrText)")
        #expect(!r.stderrText.contains("bm90IGEga2V5"))
        r = try start(api([("privateKey", "missing.p8")]))
        #expect(r.status == 2 && r.stderrText.contains("appStore.serverApi.privateKey"))
        r = try start(api([]))
        #expect(r.status == 2 && r.stderrText.contains("appStore.serverApi.privateKey") && r.stderrText.contains("HEALTHKERNEL_APPSTORE_KEY"))
        r = try start(api([]), environment: ["HEALTHKERNEL_APPSTORE_KEY": "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----"])
        #expect(r.status == 2 && r.stderrText.contains("HEALTHKERNEL_APPSTORE_KEY") && !r.stderrText.contains("bm90IGEga2V5"))
        r = try start(api([("privateKey", "good.p8"), ("baseUrl", "http://api.example.com")]))
        #expect(r.status == 2 && r.stderrText.contains("appStore.serverApi.baseUrl"))
        r = try start(api([("privateKey", "good.p8")]), bundleId: false)
        #expect(r.status == 2 && r.stderrText.contains("appStore.serverApi") && r.stderrText.contains("bundleId"))
        r = try start(api([("privateKey", "good.p8"), ("keyID", "typo")]))
        #expect(r.status == 2 && r.stderrText.contains("appStore.serverApi.keyID"))
        r = try start(api([("privateKey", "good.p8")]))
        #expect(r.status == 0, "\(r.stderrText)")
        // The variable wins over the file and may name a file.
        r = try start(api([("privateKey", "bad.p8")]), environment: ["HEALTHKERNEL_APPSTORE_KEY": dir + "/good.p8"])
        #expect(r.status == 0, "\(r.stderrText)")
        r = try start(api([]), environment: ["HEALTHKERNEL_APPSTORE_KEY": good])
        #expect(r.status == 0, "\(r.stderrText)")
        #expect(!r.stderrText.contains("PRIVATE KEY"))
    }

    /// 1,000 memberships refreshed against a server that takes 50 ms a call, 8 calls in flight, while
    /// another host's requests keep coming: the refresh's time and those requests' latency are printed
    /// (run with HEALTHKERNEL_BIN set to a release build for the figures in the README).
    @Test func aThousandMembershipsWithEightCallsInFlight() throws {
        let now = AppStoreSetup.now, day = AppStoreSetup.day, count = 1000
        apple.answer { [ca = AppStoreSetup.ca] r in
            let original = String(r.path.split(separator: "/").last ?? "")
            return .init(body: ca.statuses(1, original: original, n: 2, purchase: now - 1000, signed: now), delay: 0.05)
        }
        let k = try kernel(try AppStoreSetup.configFile(api: apple, maxConcurrentCalls: 8))
        let lines = (0..<count).map { i in
            JSON.object(JSONObject([("jsonrpc", "2.0"), ("id", .int(Int64(i))), ("method", "subscriptions.verify"), ("params", [
                "auth": .string(Self.user), "provider": "apple", "productId": "premium.yearly",
                "receipt": .string(AppStoreSetup.receipt(original: String(1_000_000 + i), purchase: now - 364 * day))])])).serialized
        }
        // In batches, so that neither pipe fills while the other side waits.
        for batch in stride(from: 0, to: count, by: 50) {
            k.send(Array(lines[batch..<min(count, batch + 50)]))
            for _ in batch..<min(count, batch + 50) { #expect(k.readLine()?["result"]?["status"] == "active") }
        }
        #expect(k.call("kernel.setOrdering", ["mode": "completion"])?["result"]?["mode"] == "completion")

        let started = Date()
        k.send([#"{"jsonrpc":"2.0","id":"refresh","method":"subscriptions.refresh","params":{"auth":"\#(testServiceToken)","limit":500}}"#])
        var latencies: [Double] = []
        var reports: [JSON] = []
        while reports.count < 2 {
            // A status read every 5 ms, timed from send to answer.
            let sent = Date()
            k.send([#"{"jsonrpc":"2.0","id":"ping","method":"subscriptions.status","params":{"auth":"\#(Self.user)"}}"#])
            while let line = k.readLine() {
                if line["id"] == "ping" {
                    latencies.append(Date().timeIntervalSince(sent))
                    break
                }
                reports.append(line["result"] ?? .null)
                if reports.count == 1 {
                    k.send([#"{"jsonrpc":"2.0","id":"refresh","method":"subscriptions.refresh","params":{"auth":"\#(testServiceToken)","limit":500}}"#])
                }
            }
            usleep(5000)
        }
        let elapsed = Date().timeIntervalSince(started)
        #expect(reports.allSatisfy { $0["renewed"] == 500 && $0["failed"] == 0 && $0["mode"] == "api" }, "\(reports)")
        #expect(reports.last?["remaining"] == 0)
        #expect(apple.received.count == count)
        #expect(apple.mostInFlight <= 8 && apple.mostInFlight > 1)
        latencies.sort()
        let p50 = latencies[latencies.count / 2] * 1000, p99 = latencies[min(latencies.count - 1, latencies.count * 99 / 100)] * 1000
        print(String(format: "refresh of %d memberships, 8 calls in flight, 50 ms per call: %.2f s (serial floor %.0f s, 8-way floor %.2f s); "
                     + "%d status reads meanwhile: p50 %.2f ms, p99 %.2f ms; most calls in flight %d",
                     count, elapsed, Double(count) * 0.05, Double(count) * 0.05 / 8, latencies.count, p50, p99, apple.mostInFlight))
        k.closeInput()
        #expect(k.finish() == 0)
    }
}
