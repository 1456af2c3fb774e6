import Foundation
import JSON
import Kernel
import Subscriptions
import TestSupport

/// The App Store setup kernel tests share: one test CA that the kernel trusts instead of Apple's root,
/// the bundle id receipts are made for, and receipts and notifications signed now.
enum AppStoreSetup {
    static let ca = AppStoreTestCA()
    static let bundleId = AppStorePayloads.bundleId
    static let day: Int64 = 86_400_000

    /// An in-process kernel's configuration: this CA's root, this bundle.
    static func configure(_ config: inout KernelConfig) {
        var appStore = AppStoreConfig()
        appStore.bundleId = bundleId
        appStore.rootsPEM = [ca.rootPEM]
        config.domains[AppStoreConfig.self] = appStore
    }

    /// A config file for the binary (its root certificate file beside it): its path. With `api`, the
    /// App Store Server API is that fake server, with its key in a `.p8` file beside the config.
    static func configFile(api: FakeAppStoreServer? = nil, maxConcurrentCalls: Int64 = 8) throws -> String {
        let dir = temporaryDirectory("appstore")
        try ca.rootPEM.write(toFile: dir + "/test-root.pem", atomically: true, encoding: .utf8)
        var appStore: JSON = ["bundleId": .string(bundleId), "environments": ["Production", "Sandbox"], "rootCertificates": ["test-root.pem"]]
        if let api {
            try api.keyPEM.write(toFile: dir + "/SubscriptionKey_TEST.p8", atomically: true, encoding: .utf8)
            appStore = .object(appStore.objectValue!.merging("serverApi", [
                "issuerId": .string(api.issuerId), "keyId": .string(api.keyId), "privateKey": "SubscriptionKey_TEST.p8",
                "baseUrl": .string(api.baseURL), "timeoutSeconds": 2, "maxConcurrentCalls": .int(maxConcurrentCalls)]))
        }
        let config: JSON = ["appStore": appStore]
        try config.serialized.write(toFile: dir + "/healthkernel.json", atomically: true, encoding: .utf8)
        return dir + "/healthkernel.json"
    }

    static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// A yearly subscription bought yesterday, signed yesterday (transaction `n` of purchase `original`).
    static func receipt(original: String, n: Int = 1, product: String = "premium.yearly", purchase: Int64? = nil, signed: Int64? = nil,
                        token: String? = nil, environment: String = "Sandbox") -> String {
        let bought = purchase ?? now - day
        return ca.sign(AppStorePayloads.transaction(id: "\(original)-\(n)", original: original, product: product, purchase: bought,
                                                    expires: bought + 365 * day, signed: signed ?? bought, environment: environment,
                                                    appAccountToken: token))
    }

    /// A notification about purchase `original` carrying transaction `n`.
    static func notification(uuid: String, type: String, subtype: String? = nil, original: String, n: Int, purchase: Int64,
                             signed: Int64, grace: Int64? = nil) -> String {
        let renewal = ca.sign(AppStorePayloads.renewal(original: original, product: "premium.yearly", grace: grace, signed: signed))
        return ca.sign(AppStorePayloads.notification(uuid: uuid, type: type, subtype: subtype, signed: signed,
                                                     transaction: receipt(original: original, n: n, purchase: purchase, signed: signed),
                                                     renewal: renewal))
    }

    /// The variables the subscriptions transcript uses.
    static func transcriptVariables() -> [String: String] {
        let t = now
        let other = AppStoreTestCA(name: "not the trusted root")
        return [
            "RECEIPT": receipt(original: "700001", purchase: t - day, signed: t - day),
            "RECEIPT_OTHER_APP": ca.sign(AppStorePayloads.transaction(id: "9", original: "9", purchase: t, expires: t + 365 * day, signed: t,
                                                                      bundleId: "com.example.other")),
            "RECEIPT_XCODE": ca.sign(AppStorePayloads.transaction(id: "8", original: "8", purchase: t, expires: t + 365 * day, signed: t,
                                                                  environment: "Xcode")),
            "RECEIPT_UNTRUSTED": other.sign(AppStorePayloads.transaction(id: "7", original: "7", purchase: t, expires: t + 365 * day, signed: t)),
            "RECEIPT_FOR_B": receipt(original: "700002", token: "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"),
            "NOTIFY_GRACE": notification(uuid: "3f1c7c1e-0000-4000-8000-000000000001", type: "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD",
                                         original: "700001", n: 1, purchase: t - 400 * day, signed: t, grace: t + 16 * day),
            "NOTIFY_RENEW": notification(uuid: "3f1c7c1e-0000-4000-8000-000000000002", type: "DID_RENEW", original: "700001", n: 2,
                                         purchase: t - 35 * day, signed: t + 1),
            "NOTIFY_STALE": notification(uuid: "3f1c7c1e-0000-4000-8000-000000000003", type: "EXPIRED", subtype: "VOLUNTARY",
                                         original: "700001", n: 1, purchase: t - day, signed: t - day / 2),
            "NOTIFY_UNOWNED": notification(uuid: "3f1c7c1e-0000-4000-8000-000000000004", type: "SUBSCRIBED", subtype: "INITIAL_BUY",
                                           original: "700003", n: 1, purchase: t - day, signed: t - day),
            "NOTIFY_TEST": ca.sign(["notificationType": "TEST", "notificationUUID": "3f1c7c1e-0000-4000-8000-000000000005",
                                    "signedDate": .int(t), "data": ["bundleId": .string(bundleId), "environment": "Sandbox"]]),
            "BIG_RECEIPT": String(repeating: "A", count: 1 << 20),
        ]
    }
}

extension JSONObject {
    /// This object with member `key` set to `value`.
    func merging(_ key: String, _ value: JSON) -> JSONObject {
        var o = self
        o[key] = value
        return o
    }
}
