import Chrono
import JSON

/// Signed App Store data checked for this app: the signature to a trusted root, then the bundle id,
/// app id and environment. Depends on the configuration only, so worker threads use it too (the App
/// Store Server API's answers are verified where they arrive, off the serving thread).
struct AppleData: Sendable {
    let config: AppStoreConfig
    let verifier: SignedDataVerifier

    init(config: AppStoreConfig) {
        self.config = config
        verifier = config.verifier
    }

    /// The payload of signed data, verified at its own `signedDate` (Apple's offline rule), else at `now`.
    func verified(_ jws: String, now: Timestamp) throws(SubscriptionsError) -> JSONObject {
        do {
            return try verifier.verify(jws) { payload in
                PayloadReader(payload, "").optionalDate("signedDate").map(Timestamp.init(milliseconds:)) ?? now
            }
        } catch {
            throw .failed(error)
        }
    }

    /// Checks that signed data is for the configured app, in an allowed environment.
    func checkApp(bundleId: String?, environment: String?, appAppleId: Int64?) throws(SubscriptionsError) {
        guard let expected = config.bundleId else {
            throw .verification(reason: "bundle_mismatch", message: "No appStore.bundleId is configured, so no App Store data is accepted")
        }
        guard bundleId == expected else { throw .verification(reason: "bundle_mismatch", message: "The signed data is for another app") }
        guard let environment, config.environments.contains(environment) else {
            throw .verification(reason: "environment_mismatch",
                                message: "The signed data is from the \(environment ?? "unknown") environment, which is not allowed")
        }
        if environment == "Production", let id = config.appAppleId, appAppleId != id {
            throw .verification(reason: "bundle_mismatch", message: "The signed data is for another app (appAppleId)")
        }
    }

    /// The transaction a verified payload holds, if it is of this app.
    func appTransaction(_ payload: JSONObject) throws(SubscriptionsError) -> AppleTransaction {
        let tx: AppleTransaction
        switch AppleTransaction.read(payload) {
        case .success(let t): tx = t
        case .failure(let e): throw .malformed(e.message)
        }
        // A transaction carries no appAppleId; the notification around it does.
        try checkApp(bundleId: tx.bundleId, environment: tx.environment, appAppleId: config.appAppleId)
        return tx
    }

    /// A verified notification with its verified transaction and renewal info, for this app.
    func notification(_ signedPayload: String, now: Timestamp) throws(SubscriptionsError) -> ReceivedNotification {
        let payload = try verified(signedPayload, now: now)
        let p = PayloadReader(payload, "notification")
        guard let uuid = p.optionalString("notificationUUID"), !uuid.isEmpty else { throw .malformed("the notification has no notificationUUID") }
        guard let type = p.optionalString("notificationType"), !type.isEmpty else { throw .malformed("the notification has no notificationType") }
        // Whose notification it is: `data`, else `summary`, else `externalPurchaseToken`, else `appData`.
        let data = payload["data"]?.objectValue
        if let identity = data ?? payload["summary"]?.objectValue ?? payload["appData"]?.objectValue {
            let i = PayloadReader(identity, "notification data")
            try checkApp(bundleId: i.optionalString("bundleId"), environment: i.optionalString("environment"),
                         appAppleId: i.optionalDate("appAppleId"))
        } else if let token = payload["externalPurchaseToken"]?.objectValue {
            let i = PayloadReader(token, "external purchase token")
            let environment = (i.optionalString("externalPurchaseId") ?? "").hasPrefix("SANDBOX") ? "Sandbox" : "Production"
            try checkApp(bundleId: i.optionalString("bundleId"), environment: environment, appAppleId: i.optionalDate("appAppleId"))
        } else if type != "TEST" {
            throw .malformed("the notification names no app (no data, summary, externalPurchaseToken or appData)")
        }
        var received = ReceivedNotification(
            facts: AppleNotification(notificationUUID: uuid, type: type, subtype: p.optionalString("subtype"),
                                     signedDate: p.optionalDate("signedDate"), status: data.flatMap { PayloadReader($0, "").optionalDate("status") },
                                     transaction: nil, transactionJWS: nil, renewal: nil,
                                     consumptionRequestReason: data?["consumptionRequestReason"]?.stringValue),
            transactionPayload: nil, renewalPayload: nil)
        if let jws = data?["signedTransactionInfo"]?.stringValue {
            let payload = try verified(jws, now: now)
            received.facts.transaction = try appTransaction(payload)
            received.facts.transactionJWS = jws
            received.transactionPayload = payload
        }
        if let jws = data?["signedRenewalInfo"]?.stringValue {
            (received.facts.renewal, received.renewalPayload) = try renewal(jws, now: now)
        }
        // RESCIND_CONSENT carries the app download instead of a purchase, signed like the rest.
        if let jws = payload["appData"]?.objectValue?["signedAppTransactionInfo"]?.stringValue {
            let app = PayloadReader(try verified(jws, now: now), "app transaction")
            try checkApp(bundleId: app.optionalString("bundleId"), environment: app.optionalString("receiptType") ?? app.optionalString("environment"),
                         appAppleId: app.optionalDate("appAppleId"))
            received.facts.appTransactionId = app.optionalId("appTransactionId")
        }
        return received
    }

    /// Verified renewal info, from an allowed environment, and its payload.
    func renewal(_ jws: String, now: Timestamp) throws(SubscriptionsError) -> (AppleRenewal, JSONObject) {
        let payload = try verified(jws, now: now)
        switch AppleRenewal.read(payload) {
        case .success(let r):
            if let environment = r.environment, !config.environments.contains(environment) {
                throw .verification(reason: "environment_mismatch", message: "The renewal info is from an environment that is not allowed")
            }
            return (r, payload)
        case .failure(let e): throw .malformed(e.message)
        }
    }

    /// An entry of Get All Subscription Statuses with both its signed items verified; the signed
    /// transaction, not the entry around it, must say it is purchase `originalTransactionId`.
    func status(_ entry: ServerAPI.LastTransaction, of originalTransactionId: String, now: Timestamp) throws(SubscriptionsError) -> AppleStatus {
        let tx = try appTransaction(try verified(entry.signedTransactionInfo, now: now))
        guard tx.originalTransactionId == originalTransactionId else { throw .malformed("the signed transaction is of another purchase") }
        var renewal: AppleRenewal?
        if let jws = entry.signedRenewalInfo {
            renewal = try self.renewal(jws, now: now).0
            guard renewal?.originalTransactionId == originalTransactionId else { throw .malformed("the renewal info is of another purchase") }
        }
        return AppleStatus(status: Int64(entry.status), transaction: tx, transactionJWS: entry.signedTransactionInfo, renewal: renewal)
    }
}
