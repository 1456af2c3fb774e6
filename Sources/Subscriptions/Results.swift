import DomainSupport
import JSON
import JSONRPC

// The wire forms of what the subscriptions service answers, each with its schema from one declaration.

extension Commitment {
    static let fields = ResultFields<Commitment>(
        ResultField("period", Schema.described(Schema.nullable(Schema.integer), "this period's number, from 1")) { .optionalInt($0.period) },
        ResultField("periods", Schema.nullable(Schema.integer)) { .optionalInt($0.periods) },
        ResultField("endsAt", Schema.nullable(Schema.timestamp)) { .timestamp($0.endsAt) },
        ResultField("price", Schema.described(Schema.nullable(Schema.integer), "the whole commitment's price in milliunits of the storefront's currency")) {
            .optionalInt($0.price)
        })
}

extension CommitmentRenewal {
    static let fields = ResultFields<CommitmentRenewal>(
        ResultField("renews", Schema.nullable(Schema.boolean)) { $0.renews.map(JSON.bool) ?? .null },
        ResultField("date", Schema.nullable(Schema.timestamp)) { .timestamp($0.date) },
        ResultField("productId", Schema.nullable(Schema.string)) { .optional($0.productId) },
        ResultField("billingPlanType", Schema.nullable(Schema.string)) { .optional($0.billingPlanType) },
        ResultField("price", Schema.nullable(Schema.integer)) { .optionalInt($0.price) })
}

extension Membership: RPCResult {
    /// Only commitment plans carry their members: every other answer stays as it was.
    var isCommitmentPlan: Bool { billingPlanType != nil || commitment != nil || commitmentRenewal != nil }

    static let fields = ResultFields<Membership>(
        ResultField("status", Schema.oneOf(["active", "grace_period", "billing_retry", "inactive", "none"])) { .string($0.status) },
        ResultField("productId", Schema.nullable(Schema.string)) { .optional($0.productId) },
        ResultField("currentPeriodEnd", Schema.nullable(Schema.timestamp)) { .timestamp($0.currentPeriodEnd) },
        ResultField("transactionId", Schema.nullable(Schema.string)) { .optional($0.transactionId) },
        ResultField("originalTransactionId", Schema.nullable(Schema.string)) { .optional($0.originalTransactionId) },
        ResultField("environment", Schema.nullable(Schema.string)) { .optional($0.environment) },
        ResultField("error", Schema.nullable(Schema.oneOf(["expired", "revoked"]))) { .optional($0.error) },
        .optional("consentRescindedAt", Schema.described(Schema.timestamp, "present when a parent withdrew consent (RESCIND_CONSENT): the host decides what follows")) {
            $0.consentRescindedAt.map { .timestamp($0) }
        },
        .optional("billingPlanType", Schema.described(Schema.nullable(Schema.string),
                                                      "MONTHLY for monthly billing under a 12-month commitment; this and the next two are present only for commitment plans")) {
            $0.isCommitmentPlan ? .optional($0.billingPlanType) : JSON?.none
        },
        .optional("commitment", Schema.described(Schema.orNull(Commitment.fields.schema), "the commitment the current period belongs to")) {
            $0.isCommitmentPlan ? ($0.commitment.map(Commitment.fields.encode) ?? .null) : JSON?.none
        },
        .optional("commitmentRenewal", Schema.described(Schema.orNull(CommitmentRenewal.fields.schema), "what renewal info says of the next commitment")) {
            $0.isCommitmentPlan ? ($0.commitmentRenewal.map(CommitmentRenewal.fields.encode) ?? .null) : JSON?.none
        })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension RefreshReport: RPCResult {
    static let consumption = ResultFields<RefreshReport>(
        description: "api mode, appStore.consumptionRequests.answer: answers to Apple's consumption requests sent first, and those Apple did not take (sent again later unless it refused them)",
        ResultField("sent", Schema.count) { .int(Int64($0.consumptionSent)) },
        ResultField("failed", Schema.count) { .int(Int64($0.consumptionFailed)) })

    static let fields = ResultFields<RefreshReport>(
        ResultField("checked", Schema.described(Schema.count, "memberships looked at: expired + renewed + unchanged + failed")) { .int(Int64($0.checked)) },
        ResultField("expired", Schema.described(Schema.count, "lost access")) { .int(Int64($0.expired)) },
        ResultField("renewed", Schema.described(Schema.count, "a later period than before")) { .int(Int64($0.renewed)) },
        ResultField("unchanged", Schema.count) { .int(Int64($0.unchanged)) },
        ResultField("failed", Schema.described(Schema.count, "api mode: no usable answer from Apple; nothing changed, due again after a minute (Retry-After when throttled)")) {
            .int(Int64($0.failed))
        },
        ResultField("remaining", Schema.described(Schema.count, "due memberships this call left; call again until 0")) { .int(Int64($0.remaining)) },
        ResultField("mode", Schema.oneOf(["clock", "api"])) { .string($0.mode) },
        ResultField("consumption", consumption.schema) { consumption.encode($0) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension RecoveryReport: RPCResult {
    static let fields = ResultFields<RecoveryReport>(
        ResultField("fetched", Schema.count) { .int(Int64($0.fetched)) },
        ResultField("applied", Schema.count) { .int(Int64($0.applied)) },
        ResultField("duplicates", Schema.count) { .int(Int64($0.duplicates)) },
        ResultField("failed", Schema.described(Schema.count, "notifications whose signed data did not verify")) { .int(Int64($0.failed)) },
        ResultField("paginationToken", Schema.described(Schema.nullable(Schema.string), "null after the last page")) { .optional($0.paginationToken) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension NotifyReport: RPCResult {
    static let fields = ResultFields<NotifyReport>(
        ResultField("notificationType", Schema.string) { .string($0.notificationType) },
        ResultField("subtype", Schema.nullable(Schema.string)) { .optional($0.subtype) },
        ResultField("originalTransactionId", Schema.nullable(Schema.string)) { .optional($0.originalTransactionId) },
        ResultField("userId", ["type": ["string", "null"], "format": "uuid"]) { .optional($0.userId) },
        ResultField("status", Schema.nullable(Schema.oneOf(["active", "grace_period", "billing_retry", "inactive"]))) { .optional($0.status) },
        ResultField("duplicate", Schema.boolean) { .bool($0.duplicate) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}
