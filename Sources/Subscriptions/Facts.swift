import JSON

/// What a verified StoreKit 2 transaction (`JWSTransactionDecodedPayload`) says, as far as a membership
/// cares. Apple's dates are milliseconds since 1970 (Xcode writes fractions; they are truncated).
public struct AppleTransaction: Equatable, Sendable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var bundleId: String
    public var environment: String
    /// `Auto-Renewable Subscription`, `Non-Renewing Subscription`, `Non-Consumable` or `Consumable`.
    public var type: String?
    public var purchaseDate: Int64
    public var expiresDate: Int64?
    public var revocationDate: Int64?
    public var signedDate: Int64
    public var appAccountToken: String?
    /// `MONTHLY` for a monthly subscription billed under a 12-month commitment (App Store Server API 1.21).
    public var billingPlanType: String? = nil
    /// The commitment this transaction's period belongs to (`commitmentInfo`).
    public var commitment: Commitment? = nil
    /// The customer's app download (iOS 18.4 on): what a `RESCIND_CONSENT` notification names.
    public var appTransactionId: String? = nil

    /// The facts of `payload`, or the first field it lacks.
    public static func read(_ payload: JSONObject) -> Result<AppleTransaction, PayloadError> {
        do throws(PayloadError) {
            let p = PayloadReader(payload, "transaction")
            return .success(AppleTransaction(
                transactionId: try p.id("transactionId"), originalTransactionId: try p.id("originalTransactionId"),
                productId: try p.string("productId"), bundleId: try p.string("bundleId"), environment: try p.string("environment"),
                type: p.optionalString("type"), purchaseDate: try p.date("purchaseDate"), expiresDate: p.optionalDate("expiresDate"),
                revocationDate: p.optionalDate("revocationDate"), signedDate: try p.date("signedDate"),
                appAccountToken: p.optionalString("appAccountToken"), billingPlanType: p.optionalString("billingPlanType"),
                commitment: payload["commitmentInfo"]?.objectValue.map { c in
                    let r = PayloadReader(c, "commitment info")
                    return Commitment(period: r.optionalDate("billingPeriodNumber"), periods: r.optionalDate("totalBillingPeriods"),
                                      endsAt: r.optionalDate("commitmentExpiresDate"), price: r.optionalDate("commitmentPrice"))
                }, appTransactionId: p.optionalId("appTransactionId")))
        } catch {
            return .failure(error)
        }
    }
}

/// What verified renewal info (`JWSRenewalInfoDecodedPayload`) says.
public struct AppleRenewal: Equatable, Sendable {
    public var originalTransactionId: String
    public var environment: String?
    /// 1: the subscription renews automatically; 0: it ends with the period.
    public var autoRenewStatus: Int64?
    public var gracePeriodExpiresDate: Int64?
    public var signedDate: Int64
    /// What the next commitment will be (`commitmentInfo` and `renewalBillingPlanType` of renewal info).
    public var renewal: CommitmentRenewal? = nil

    public static func read(_ payload: JSONObject) -> Result<AppleRenewal, PayloadError> {
        do throws(PayloadError) {
            let p = PayloadReader(payload, "renewal info")
            return .success(AppleRenewal(
                originalTransactionId: try p.id("originalTransactionId"), environment: p.optionalString("environment"),
                autoRenewStatus: p.optionalDate("autoRenewStatus"), gracePeriodExpiresDate: p.optionalDate("gracePeriodExpiresDate"),
                signedDate: try p.date("signedDate"),
                renewal: payload["commitmentInfo"]?.objectValue.map { c in
                    let r = PayloadReader(c, "renewal commitment info")
                    return CommitmentRenewal(renews: r.optionalDate("commitmentAutoRenewStatus").map { $0 == 1 },
                                             date: r.optionalDate("commitmentRenewalDate"), productId: r.optionalString("commitmentAutoRenewProductId"),
                                             billingPlanType: r.optionalString("commitmentRenewalBillingPlanType") ?? p.optionalString("renewalBillingPlanType"),
                                             price: r.optionalDate("commitmentRenewalPrice"))
                }))
        } catch {
            return .failure(error)
        }
    }
}

/// A subscription billed monthly under a 12-month commitment: which billing period of how many the
/// transaction is, when the commitment ends, and its whole price (in milliunits of the storefront's
/// currency, as Apple gives prices).
public struct Commitment: Equatable, Sendable {
    public var period: Int64?
    public var periods: Int64?
    public var endsAt: Int64?
    public var price: Int64?
}

/// What renewal info says of the next commitment: whether it renews, when, to which product, billed how,
/// at what price.
public struct CommitmentRenewal: Equatable, Sendable {
    public var renews: Bool?
    public var date: Int64?
    public var productId: String?
    public var billingPlanType: String?
    public var price: Int64?
}

/// A verified payload that lacks a field the kernel needs.
public struct PayloadError: Error, Equatable, Sendable {
    public let message: String
}

/// Reads fields of a decoded Apple payload.
struct PayloadReader {
    let object: JSONObject
    let what: String

    init(_ object: JSONObject, _ what: String) {
        self.object = object
        self.what = what
    }

    func string(_ key: String) throws(PayloadError) -> String {
        guard let s = object[key]?.stringValue, !s.isEmpty else { throw PayloadError(message: "the \(what) has no \(key)") }
        return s
    }

    func optionalString(_ key: String) -> String? { object[key]?.stringValue }

    /// An id if present, as a string.
    func optionalId(_ key: String) -> String? {
        if let i = object[key]?.intValue { return String(i) }
        return optionalString(key).flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Ids are strings in Apple's payloads; old ones were numbers.
    func id(_ key: String) throws(PayloadError) -> String {
        if let i = object[key]?.intValue { return String(i) }
        return try string(key)
    }

    func date(_ key: String) throws(PayloadError) -> Int64 {
        guard let d = optionalDate(key) else { throw PayloadError(message: "the \(what) has no \(key) in milliseconds") }
        return d
    }

    func optionalDate(_ key: String) -> Int64? {
        switch object[key] {
        case .int(let i)?: return i
        case .double(let d)? where d.isFinite && abs(d) < 9e15: return Int64(d)
        default: return nil
        }
    }
}

/// A verified App Store Server Notification V2, with its signed transaction and renewal info verified too.
public struct AppleNotification: Equatable, Sendable {
    public var notificationUUID: String
    public var type: String
    public var subtype: String?
    public var signedDate: Int64?
    /// `data.status`: Apple's subscription status 1-5, when the notification carries it.
    public var status: Int64?
    public var transaction: AppleTransaction?
    /// The transaction's JWS, kept as the membership's receipt when it is applied.
    public var transactionJWS: String?
    public var renewal: AppleRenewal?
    /// `RESCIND_CONSENT`: the app transaction of `appData.signedAppTransactionInfo`, verified.
    public var appTransactionId: String? = nil
    /// `CONSUMPTION_REQUEST`: why the customer asked for a refund (`UNINTENDED_PURCHASE`, `FULFILLMENT_ISSUE`, ...).
    public var consumptionRequestReason: String? = nil

    /// The instant that orders this notification against the state already applied: the signed date of
    /// its transaction (else its renewal info, else itself).
    public var order: Int64? { transaction?.signedDate ?? renewal?.signedDate ?? signedDate }

    public var originalTransactionId: String? { transaction?.originalTransactionId ?? renewal?.originalTransactionId }
}

/// What Apple's App Store Server API says of one purchase now (an entry of Get All Subscription
/// Statuses), its signed items verified: status 1-5, the latest transaction and the renewal info.
public struct AppleStatus: Equatable, Sendable {
    public var status: Int64
    public var transaction: AppleTransaction
    /// The transaction's JWS, kept as the membership's receipt.
    public var transactionJWS: String
    public var renewal: AppleRenewal?
}
