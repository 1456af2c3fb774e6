import DomainSupport
import JSON
import Storage

/// A purchase's membership (`subscriptions.memberships`, key: its `originalTransactionId`): the state
/// last applied from a verified transaction or notification, and the receipt it came from.
public struct MembershipRow: StoredRow {
    /// `active`, `grace_period`, `billing_retry` or `inactive`, as of the last write (the clock may have
    /// moved it on since: see `MembershipRules.current`).
    public var status: String
    /// Why it is inactive: `expired` or `revoked`.
    public var error: String?
    public var productId: String
    public var transactionId: String
    public var environment: String
    public var purchaseDate: Int64
    /// The end of the current period; nil for a purchase that never ends (non-consumable).
    public var expiresDate: Int64?
    /// The end of the billing grace period, from renewal info.
    public var gracePeriodEnd: Int64?
    /// Whether the subscription renews, from renewal info.
    public var autoRenew: Bool?
    /// The signed date of the newest signed data applied: older data never rolls the state back.
    public var signedDate: Int64
    /// The latest verified transaction JWS.
    public var receipt: String
    public var updatedAt: Int64
    /// From the latest transaction: `MONTHLY` under a commitment, and the commitment.
    public var billingPlanType: String? = nil
    public var commitment: Commitment? = nil
    /// From renewal info: the next commitment.
    public var commitmentRenewal: CommitmentRenewal? = nil
}

extension MembershipRow {
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "membership")
        status = try f.string("status")
        error = f.optionalString("error")
        productId = try f.string("productId")
        transactionId = try f.string("transactionId")
        environment = try f.string("environment")
        purchaseDate = try f.instant("purchaseDate")
        expiresDate = try f.optionalInstant("expiresDate")
        gracePeriodEnd = try f.optionalInstant("gracePeriodEnd")
        if case .bool(let b)? = stored["autoRenew"] { autoRenew = b } else { autoRenew = nil }
        signedDate = try f.instant("signedDate")
        receipt = try f.string("receipt")
        updatedAt = try f.instant("updatedAt")
        billingPlanType = f.optionalString("billingPlanType")
        if let c = f.object["commitment"]?.objectValue {
            let g = try StoredFields(.object(c), "commitment")
            commitment = Commitment(period: try g.optionalInt("period"), periods: try g.optionalInt("periods"),
                                    endsAt: try g.optionalInstant("endsAt"), price: try g.optionalInt("price"))
        }
        if let r = f.object["commitmentRenewal"]?.objectValue {
            let g = try StoredFields(.object(r), "commitment renewal")
            let renews: Bool? = if case .bool(let b)? = r["renews"] { b } else { nil }
            commitmentRenewal = CommitmentRenewal(renews: renews, date: try g.optionalInstant("date"), productId: g.optionalString("productId"),
                                                  billingPlanType: g.optionalString("billingPlanType"), price: try g.optionalInt("price"))
        }
    }

    public var stored: JSON {
        ["status": .string(status), "error": .optional(error), "productId": .string(productId), "transactionId": .string(transactionId),
         "environment": .string(environment), "purchaseDate": .int(purchaseDate), "expiresDate": .optionalInt(expiresDate),
         "gracePeriodEnd": .optionalInt(gracePeriodEnd), "autoRenew": autoRenew.map(JSON.bool) ?? .null, "signedDate": .int(signedDate),
         "receipt": .string(receipt), "updatedAt": .int(updatedAt), "billingPlanType": .optional(billingPlanType),
         "commitment": commitment?.json ?? .null, "commitmentRenewal": commitmentRenewal?.json ?? .null]
    }
}

extension Commitment {
    /// The stored form, which is also the wire form (`subscriptions.status`).
    var json: JSON {
        ["period": .optionalInt(period), "periods": .optionalInt(periods), "endsAt": .optionalInt(endsAt), "price": .optionalInt(price)]
    }
}

extension CommitmentRenewal {
    var json: JSON {
        ["renews": renews.map(JSON.bool) ?? .null, "date": .optionalInt(date), "productId": .optional(productId),
         "billingPlanType": .optional(billingPlanType), "price": .optionalInt(price)]
    }
}

/// When `subscriptions.refresh` last looked at a membership and when it is next due
/// (`subscriptions.checks`, key: its `originalTransactionId`, in the order of `dueAt`). Apart from the
/// membership so that a daily check writes a few bytes, not the receipt.
public struct CheckRow: StoredRow {
    /// When refresh last looked at it; nil: never (a verify or a notification is not a look).
    public var checkedAt: Int64?
    /// The membership's `expiresDate` at that look (at the verify before any), so the next one can tell a renewal.
    public var expiresDate: Int64?
    /// When it is next due (`MembershipRules.dueAt`).
    public var dueAt: Int64

    public init(checkedAt: Int64?, expiresDate: Int64?, dueAt: Int64) {
        self.checkedAt = checkedAt
        self.expiresDate = expiresDate
        self.dueAt = dueAt
    }
}

extension CheckRow {
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "check")
        checkedAt = try f.optionalInstant("checkedAt")
        expiresDate = try f.optionalInstant("expiresDate")
        // Rows written before `dueAt` were due an hour after their check.
        dueAt = try f.optionalInstant("dueAt") ?? (checkedAt ?? 0) + MembershipRules.defaultRefreshIntervalMs
    }
    public var stored: JSON { ["checkedAt": .optionalInt(checkedAt), "expiresDate": .optionalInt(expiresDate), "dueAt": .int(dueAt)] }
}

/// A notification received (`subscriptions.notifications`, key: its `notificationUUID`). In the owner's
/// partition it is the record of what was done with it; in a purchase's pending partition (no user owns
/// the purchase yet) it also keeps the verified facts, to apply once a user verifies the purchase.
public struct NotificationRow: StoredRow {
    public var type: String
    public var subtype: String?
    public var originalTransactionId: String
    public var signedDate: Int64?
    public var receivedAt: Int64
    /// Whether it changed the membership (false: older than the state, or a type that changes nothing).
    public var applied: Bool
    /// Pending only: `data.status`, and the verified transaction and renewal payloads.
    public var status: Int64? = nil
    public var transaction: JSONObject? = nil
    public var transactionJWS: String? = nil
    public var renewal: JSONObject? = nil
}

extension NotificationRow {
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "notification")
        type = try f.string("type")
        subtype = f.optionalString("subtype")
        originalTransactionId = try f.string("originalTransactionId")
        signedDate = try f.optionalInstant("signedDate")
        receivedAt = try f.instant("receivedAt")
        applied = f.bool("applied")
        status = try f.optionalInt("status")
        transaction = stored["transaction"]?.objectValue
        transactionJWS = f.optionalString("transactionJWS")
        renewal = stored["renewal"]?.objectValue
    }

    public var stored: JSON {
        var o = JSONObject([("type", .string(type)), ("subtype", .optional(subtype)), ("originalTransactionId", .string(originalTransactionId)),
                            ("signedDate", .optionalInt(signedDate)), ("receivedAt", .int(receivedAt)), ("applied", .bool(applied))])
        if let status { o["status"] = .int(status) }
        if let transaction { o["transaction"] = .object(transaction) }
        if let transactionJWS { o["transactionJWS"] = .string(transactionJWS) }
        if let renewal { o["renewal"] = .object(renewal) }
        return .object(o)
    }
}

/// The subscriptions tables, registered with the store before it recovers.
public struct SubscriptionTables: Sendable {
    public let memberships: any StorageTable<MembershipRow>
    public let checks: any StorageTable<CheckRow>
    public let notifications: any StorageTable<NotificationRow>
    /// A parent's withdrawn consent (`RESCIND_CONSENT`), one row per user (key `consent`).
    public let consent: any StorageTable<ConsentRow>
    public let consumption: any StorageTable<ConsumptionRow>

    @inlinable
    public init(_ store: some Storage) {
        memberships = store.table("subscriptions.memberships", of: MembershipRow.self, entity: Entity("subscriptions.membership"))
        checks = store.table("subscriptions.checks", of: CheckRow.self,
                             orderedBy: { row in MembershipRules.checkOrderHead(dueAt: row.dueAt) })
        notifications = store.table("subscriptions.notifications", of: NotificationRow.self)
        consent = store.table("subscriptions.consent", of: ConsentRow.self)
        consumption = store.table("subscriptions.consumptionRequests", of: ConsumptionRow.self, orderedBy: { row in ConsumptionRow.order(row) },
                                  entity: Entity("subscriptions.consumptionRequest"))
    }
}

/// The unique keys of App Store purchases: one owner per purchase, each notification applied once.
enum SubscriptionKeys {
    static func purchase(_ originalTransactionId: String) -> UniqueKey { UniqueKey("subscriptions.originalTransactionId", originalTransactionId) }
    static func notification(_ uuid: String) -> UniqueKey { UniqueKey("subscriptions.notificationUUID", uuid) }
    /// The partition that keeps notifications of a purchase no user owns yet. Never a user id (those are
    /// UUIDs), so no user's data and no `auth.deleteUser` reaches it.
    static func pending(_ originalTransactionId: String) -> String { "appstore:" + originalTransactionId }
    static let pendingPrefix = "appstore:"
    /// The user whose purchases first carried an app transaction (the download a `RESCIND_CONSENT` names).
    static func appTransaction(_ id: String) -> UniqueKey { UniqueKey("subscriptions.appTransactionId", id) }
    static let consentKey = "consent"
}

/// A parent withdrew consent for a child's use of the app (`RESCIND_CONSENT`): when Apple signed it, and
/// the notification. The host decides what follows (`subscriptions.status` shows it).
public struct ConsentRow: StoredRow, Equatable {
    public var rescindedAt: Int64
    public var notificationUUID: String

    public init(rescindedAt: Int64, notificationUUID: String) {
        self.rescindedAt = rescindedAt
        self.notificationUUID = notificationUUID
    }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "consent")
        rescindedAt = try f.instant("rescindedAt")
        notificationUUID = try f.string("notificationUUID")
    }

    public var stored: JSON { ["rescindedAt": .int(rescindedAt), "notificationUUID": .string(notificationUUID)] }
}
