import Foundation
import JSON
import JSONParsing
import Testing
import TestSupport

/// `subscriptions.*` against the real binary: its configuration file, durability across a kill -9, and
/// Apple's own signed notifications verified with the bundled Apple root.
@Suite(.oneStoreOnly) struct SubscriptionsBinaryTests {
    static let user = ScreenTimeBinaryTests.userToken
    static let userId = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
    /// User bbbbbbbb-…, signed with the test secret.
    static let otherUser = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJoZWFsdGhrZXJuZWwtdGVzdHMiLCJzdWIiOiJiYmJiYmJiYi1iYmJiLTRiYmItOGJiYi1iYmJiYmJiYmJiYmIiLCJhdWQiOiJhdXRoZW50aWNhdGVkIiwicm9sZSI6ImF1dGhlbnRpY2F0ZWQiLCJpYXQiOjE3NjM3Njk2MDAsImV4cCI6NDEwMjQ0NDgwMH0.DH51WLEyrDfAwWQwYGlqN01ZMoDnR9FT9rfv6zblf9Q"

    @Test func purchasesAndNotificationsSurviveACrash() throws {
        let dir = temporaryDirectory("subscriptions")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let args = ["serve", "--data-dir", dir, "--jwt-secret", testSecret, "--log-level", "error", "--config", try AppStoreSetup.configFile()]
        let now = AppStoreSetup.now, day = AppStoreSetup.day
        let receipt = AppStoreSetup.receipt(original: "800001", purchase: now - day)
        let grace = AppStoreSetup.notification(uuid: "9e5a8a57-0000-4000-8000-000000000001", type: "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD",
                                               original: "800001", n: 1, purchase: now - day, signed: now, grace: now + 16 * day)
        var k = try LiveKernel(args)
        let verified = k.call("subscriptions.verify", ["auth": .string(Self.user), "provider": "apple", "productId": "premium.yearly",
                                                       "receipt": .string(receipt)])
        #expect(verified?["result"]?["status"] == "active")
        #expect(verified?["result"]?["originalTransactionId"] == "800001")
        let notified = k.call("subscriptions.notify", ["auth": .string(testServiceToken), "signedPayload": .string(grace)])
        #expect(notified?["result"]?["status"] == "grace_period")
        #expect(notified?["result"]?["userId"] == .string(Self.userId))
        k.kill9()
        _ = k.finish()

        // Acknowledged, so kept: the membership, the owner and the notification id.
        k = try LiveKernel(args)
        #expect(k.call("subscriptions.status", ["auth": .string(Self.user)])?["result"]?["status"] == "grace_period")
        let again = k.call("subscriptions.notify", ["auth": .string(testServiceToken), "signedPayload": .string(grace)])
        #expect(again?["result"]?["duplicate"] == true)
        let other = k.call("subscriptions.verify", ["auth": .string(Self.otherUser), "provider": "apple",
                                                    "productId": "premium.yearly", "receipt": .string(receipt)])
        #expect(other?["error"]?["data"]?["reason"] == "transaction_owned_by_other_user")
        let refresh = k.call("subscriptions.refresh", ["auth": .string(testServiceToken), "limit": 10])
        #expect(refresh?["result"]?["mode"] == "clock" && refresh?["result"]?["remaining"] == 0)
        k.closeInput()
        #expect(k.finish() == 0)
    }

    @Test func configurationMistakesStopStartUp() throws {
        let dir = temporaryDirectory("appstore-config")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func start(_ appStore: JSON) throws -> ProcessResult {
            let path = dir + "/config.json"
            try (["appStore": appStore] as JSON).serialized.write(toFile: path, atomically: true, encoding: .utf8)
            return try runBinary(["serve", "--memory-only", "--config", path])
        }
        // The App Store Server API's key file must be readable (ServerAPIBinaryTests has the rest).
        var r = try start(["bundleId": "com.example", "serverApi": ["issuerId": "x", "keyId": "y", "privateKey": "k.p8"]])
        #expect(r.status == 2 && r.stderrText.contains("appStore.serverApi.privateKey"))
        r = try start(["rootCertificates": ["missing.pem"]])
        #expect(r.status != 0 && r.stderrText.contains("appStore.rootCertificates[0]"))
        try "not a certificate".write(toFile: dir + "/bad.pem", atomically: true, encoding: .utf8)
        r = try start(["rootCertificates": ["bad.pem"]])
        #expect(r.status != 0 && r.stderrText.contains("appStore.rootCertificates[0]"))
        r = try start(["environments": ["Xcode"]])
        #expect(r.status != 0 && r.stderrText.contains("appStore.environments"))
        r = try start(["bundleId": "com.example", "environments": ["Sandbox"], "appAppleId": 1234])
        #expect(r.status == 0, "\(r.stderrText)")
    }

    /// Real notifications Apple signed (shared/testdata/appstore), verified with the root the binary ships.
    @Test func applesOwnNotificationsVerifyWithTheBundledRoot() throws {
        guard let vectors = AppStoreVectorFiles.realSignedJWS() else {
            Issue.record("the App Store test vectors (shared/testdata/appstore) are not on this machine")
            return
        }
        func entry(_ id: String) -> JSON? { vectors["entries"]?.arrayValue?.first { $0["id"] == .string(id) } }
        let refund = try #require(entry("session-refund-sandbox-2025")?["jws"]?.stringValue)
        let expired = try #require(entry("session-expired-voluntary-sandbox-2025")?["jws"]?.stringValue)
        let renew2022 = try #require(entry("gopay-did-renew-sandbox-2022")?["jws"]?.stringValue)
        let dir = temporaryDirectory("appstore-real")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func kernel(_ appStore: JSON) throws -> LiveKernel {
            let path = dir + "/config.json"
            try (["appStore": appStore] as JSON).serialized.write(toFile: path, atomically: true, encoding: .utf8)
            return try LiveKernel(["serve", "--memory-only", "--log-level", "error", "--jwt-secret", testSecret, "--config", path])
        }
        func notify(_ k: LiveKernel, _ jws: String) -> JSON? {
            k.call("subscriptions.notify", ["auth": .string(testServiceToken), "signedPayload": .string(jws)])
        }
        var k = try kernel(["bundleId": "com.loki-project.loki-messenger", "environments": ["Sandbox"]])
        let r = notify(k, refund)?["result"]
        #expect(r?["notificationType"] == "REFUND" && r?["originalTransactionId"] == "2000001024993299" && r?["userId"] == .null)
        #expect(notify(k, expired)?["result"]?["notificationType"] == "EXPIRED")
        // No top-level signedDate: judged now, when its 2021 leaf has long expired.
        #expect(notify(k, renew2022)?["error"]?["data"]?["reason"] == "untrusted_chain")
        k.closeInput()
        #expect(k.finish() == 0)
        // The same notification for a Production-only kernel, and for another app.
        k = try kernel(["bundleId": "com.loki-project.loki-messenger", "environments": ["Production"], "appAppleId": 1470168868])
        #expect(notify(k, refund)?["error"]?["data"]?["reason"] == "environment_mismatch")
        k.closeInput()
        #expect(k.finish() == 0)
        k = try kernel(["bundleId": "com.example.app"])
        #expect(notify(k, refund)?["error"]?["data"]?["reason"] == "bundle_mismatch")
        k.closeInput()
        #expect(k.finish() == 0)
    }
}

/// The shared App Store vectors, read where the tests find them (never copied into the repository).
enum AppStoreVectorFiles {
    static func realSignedJWS() -> JSON? {
        var candidates: [String] = []
        if let explicit = ProcessInfo.processInfo.environment["HEALTHKERNEL_TESTDATA"] { candidates.append(explicit) }
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates += [repo.deletingLastPathComponent().appendingPathComponent("shared/testdata").path, "/work/shared/testdata"]
        for folder in candidates {
            if let data = FileManager.default.contents(atPath: folder + "/appstore/real-signed-jws.json") { return try? JSON.parse(Array(data)) }
        }
        return nil
    }
}
