import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

enum Schemas {
    static let membership = #"""
    {"type": "object", "additionalProperties": false,
     "required": ["status", "productId", "currentPeriodEnd", "transactionId", "originalTransactionId", "environment", "error"],
     "properties": {
       "status": {"enum": ["active", "grace_period", "billing_retry", "inactive", "none"]},
       "productId": {"type": ["string", "null"]},
       "currentPeriodEnd": {"type": ["string", "null"], "format": "date-time"},
       "transactionId": {"type": ["string", "null"]},
       "originalTransactionId": {"type": ["string", "null"]},
       "environment": {"type": ["string", "null"]},
       "error": {"enum": [null, "expired", "revoked"]},
       "consentRescindedAt": {"type": "string", "format": "date-time", "description": "present when a parent withdrew consent (RESCIND_CONSENT): the host decides what follows"},
       "billingPlanType": {"type": ["string", "null"], "description": "MONTHLY for monthly billing under a 12-month commitment; this and the next two are present only for commitment plans"},
       "commitment": {"type": ["object", "null"], "description": "the commitment the current period belongs to",
         "properties": {"period": {"type": ["integer", "null"], "description": "this period's number, from 1"},
           "periods": {"type": ["integer", "null"]}, "endsAt": {"type": ["string", "null"], "format": "date-time"},
           "price": {"type": ["integer", "null"], "description": "the whole commitment's price in milliunits of the storefront's currency"}}},
       "commitmentRenewal": {"type": ["object", "null"], "description": "what renewal info says of the next commitment",
         "properties": {"renews": {"type": ["boolean", "null"]}, "date": {"type": ["string", "null"], "format": "date-time"},
           "productId": {"type": ["string", "null"]}, "billingPlanType": {"type": ["string", "null"]},
           "price": {"type": ["integer", "null"]}}}}}
    """#
}

// MARK: The wire form of what the service answers

extension SubscriptionsError {
    var rpc: RPCError {
        switch self {
        case .verification(let reason, let message): return .verificationFailed(reason, message)
        case .ownedByOtherUser:
            return .conflict("transaction_owned_by_other_user", "This purchase belongs to another account")
        case .storage(let error): return .from(error)
        }
    }
}

/// Runs a service call and answers its result, or its refusal, on the wire.
func answer<T: JSONEncodable>(_ body: () throws(SubscriptionsError) -> T) throws(RPCError) -> JSON {
    try answerValue(body).json
}

/// Runs a service call: its value, or its refusal as on the wire.
func answerValue<T>(_ body: () throws(SubscriptionsError) -> T) throws(RPCError) -> T {
    do { return try body() } catch { throw error.rpc }
}

extension Membership: JSONEncodable {
    public var json: JSON {
        var o = JSONObject([("status", .string(status)), ("productId", .optional(productId)), ("currentPeriodEnd", .timestamp(currentPeriodEnd)),
                            ("transactionId", .optional(transactionId)), ("originalTransactionId", .optional(originalTransactionId)),
                            ("environment", .optional(environment)), ("error", .optional(error))])
        if let at = consentRescindedAt { o["consentRescindedAt"] = .timestamp(at) }
        // Only for commitment plans: every other answer stays as it was.
        if billingPlanType != nil || commitment != nil || commitmentRenewal != nil {
            o["billingPlanType"] = .optional(billingPlanType)
            o["commitment"] = commitment.map { c in
                ["period": .optionalInt(c.period), "periods": .optionalInt(c.periods), "endsAt": .timestamp(c.endsAt), "price": .optionalInt(c.price)]
            } ?? .null
            o["commitmentRenewal"] = commitmentRenewal.map { r in
                ["renews": r.renews.map(JSON.bool) ?? .null, "date": .timestamp(r.date), "productId": .optional(r.productId),
                 "billingPlanType": .optional(r.billingPlanType), "price": .optionalInt(r.price)]
            } ?? .null
        }
        return .object(o)
    }
}

extension RefreshReport: JSONEncodable {
    public var json: JSON {
        ["checked": .int(Int64(checked)), "expired": .int(Int64(expired)), "renewed": .int(Int64(renewed)),
         "unchanged": .int(Int64(unchanged)), "failed": .int(Int64(failed)), "remaining": .int(Int64(remaining)), "mode": .string(mode),
         "consumption": ["sent": .int(Int64(consumptionSent)), "failed": .int(Int64(consumptionFailed))]]
    }
}

extension NotifyReport: JSONEncodable {
    public var json: JSON {
        ["notificationType": .string(notificationType), "subtype": .optional(subtype), "originalTransactionId": .optional(originalTransactionId),
         "userId": .optional(userId), "status": .optional(status), "duplicate": .bool(duplicate)]
    }
}

let verificationErrors = [
    ErrorDoc(.verificationFailed, "malformed_jws, untrusted_chain, invalid_signature, bundle_mismatch, environment_mismatch, product_mismatch; nothing stored"),
]

/// `subscriptions.verify`.
public struct SubscriptionsVerify: RPCMethod {
    public struct Params: RPCParams {
        let productId: String
        let receipt: String
        public static let declaration = ParamList(
            required("provider", oneOf: ["apple"]).described("the store: only apple (StoreKit 2)"),
            required("productId", maxBytes: 255).described("the product the app believes it bought; must equal the receipt's"),
            required("receipt", maxBytes: SignedDataVerifier.maxBytes).described("a StoreKit 2 signed transaction (JWS with an x5c chain)"))
        public init(_ v: (String, String, String)) { (_, productId, receipt) = v }
    }
    public static let name = "subscriptions.verify"
    public static let summary = "Verifies a StoreKit 2 signed transaction to a trusted root and binds the purchase to the caller; answers its membership."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.membership
    public static let errors = verificationErrors + [ErrorDoc(.conflict, "transaction_owned_by_other_user")]
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SubscriptionsError) in
            try service.verify(user, productId: p.productId, receipt: p.receipt, now: c.now)
        }
    }
}

/// `subscriptions.status`.
public struct SubscriptionsStatus: RPCMethod {
    public static let name = "subscriptions.status"
    public static let summary = "The caller's membership now (status none before any purchase)."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    public static let resultSchema = Schemas.membership
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> JSON {
        let user = try c.userID()
        return try answer { () throws(SubscriptionsError) in try service.status(user, now: c.now) }
    }
}

/// `subscriptions.refresh`: in api mode the calls to Apple run on worker threads.
public struct SubscriptionsRefresh: SlowRPCMethod {
    public struct Params: RPCParams {
        let limit: Int
        public static let declaration = ParamList(optional("limit", in: 1...500, default: 50).described("memberships to check in this call"))
        public init(_ limit: Int64) { self.limit = Int(limit) }
    }
    public static let name = "subscriptions.refresh"
    public static let summary = "Brings due memberships up to date (not looked at by refresh within appStore.refreshIntervalSeconds, or whose period or grace period ended since), soonest due first: from Apple's App Store Server API when a key is configured (mode api), else against the clock; call until remaining is 0."
    public static let mutates = true
    public static let auth = AuthRequirement.service
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false,
     "required": ["checked", "expired", "renewed", "unchanged", "failed", "remaining", "mode", "consumption"],
     "properties": {
       "checked": {"type": "integer", "minimum": 0, "description": "memberships looked at: expired + renewed + unchanged + failed"},
       "expired": {"type": "integer", "minimum": 0, "description": "lost access"},
       "renewed": {"type": "integer", "minimum": 0, "description": "a later period than before"},
       "unchanged": {"type": "integer", "minimum": 0},
       "failed": {"type": "integer", "minimum": 0, "description": "api mode: no usable answer from Apple; nothing changed, due again after a minute (Retry-After when throttled)"},
       "remaining": {"type": "integer", "minimum": 0, "description": "due memberships this call left; call again until 0"},
       "mode": {"enum": ["clock", "api"]},
       "consumption": {"type": "object", "additionalProperties": false, "required": ["sent", "failed"],
         "description": "api mode, appStore.consumptionRequests.answer: answers to Apple's consumption requests sent first, and those Apple did not take (sent again later unless it refused them)",
         "properties": {"sent": {"type": "integer", "minimum": 0}, "failed": {"type": "integer", "minimum": 0}}}}}
    """#
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func orderingKeys(_ params: JSONObject) -> [String] { [] }
    public func start(_ p: Params, _ c: CallContext) throws(RPCError) -> SlowCall<JSON> {
        let service = self.service
        guard let api = service.api else {
            let report = try answer { () throws(SubscriptionsError) in try service.refresh(limit: p.limit, now: c.now) }
            return SlowCall(work: {}) { (_: ()) throws(RPCError) -> JSON in report }
        }
        let answers = try answerValue { () throws(SubscriptionsError) in try service.beginConsumption(limit: p.limit, now: c.now) }
        let (lookups, remaining) = try answerValue { () throws(SubscriptionsError) in try service.beginLookups(limit: p.limit, now: c.now) }
        // The users are not listed: their requests need not wait for Apple, and the answers are applied
        // to the state as it is by then.
        return SlowCall(work: { (api.send(answers), api.run(lookups, now: c.now, budgetSeconds: SubscriptionsService.lookupBudgetSeconds)) }) {
            (results: ([ServerAPIFailure?], [LookupResult])) throws(RPCError) -> JSON in
            try answer { () throws(SubscriptionsError) in
                let consumption = try service.finishConsumption(answers, results.0, now: c.now)
                var report = try service.finishLookups(lookups, results.1, remaining: remaining, now: c.now)
                (report.consumptionSent, report.consumptionFailed) = consumption
                return report
            }
        }
    }
}

/// `subscriptions.recoverNotifications`: one page of Apple's notification history, fetched and verified
/// on a worker thread, applied like `subscriptions.notify`.
public struct SubscriptionsRecoverNotifications: SlowRPCMethod {
    public struct Params: RPCParams {
        let startDate: Timestamp
        let endDate: Timestamp?
        let paginationToken: String?
        public static let declaration = ParamList(
            required("startDate", Timestamp.self).described("RFC 3339; at most 180 days ago (Apple keeps no older history)"),
            optional("endDate", Timestamp.self).described("RFC 3339, after startDate; default now"),
            optional("paginationToken", maxBytes: 4096).described("the previous page's paginationToken, with the same startDate and endDate"))
        public init(_ v: (Timestamp, Timestamp?, String?)) throws(FieldError) {
            (startDate, endDate, paginationToken) = v
            if let endDate, endDate.milliseconds <= startDate.milliseconds {
                throw .outOfRange("params.endDate", "must be after params.startDate")
            }
        }
    }
    public static let name = "subscriptions.recoverNotifications"
    public static let summary = "Fetches one page of Apple's App Store Server Notification history and applies each notification as subscriptions.notify would (duplicates change nothing); call with the answer's paginationToken until it is null."
    public static let mutates = true
    public static let auth = AuthRequirement.service
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false,
     "required": ["fetched", "applied", "duplicates", "failed", "paginationToken"],
     "properties": {
       "fetched": {"type": "integer", "minimum": 0}, "applied": {"type": "integer", "minimum": 0},
       "duplicates": {"type": "integer", "minimum": 0},
       "failed": {"type": "integer", "minimum": 0, "description": "notifications whose signed data did not verify"},
       "paginationToken": {"type": ["string", "null"], "description": "null after the last page"}}}
    """#
    public static let errors = [
        ErrorDoc(.forbidden, "app_store_api_not_configured (no appStore.serverApi), app_store_key_rejected (Apple refused the key)"),
        ErrorDoc(.limited, "app_store_unavailable: Apple could not be reached, answered 5xx or throttled; data.retryAfterMs"),
    ]
    /// How far back Apple keeps notification history.
    static let historyDays: Int64 = 180
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func orderingKeys(_ params: JSONObject) -> [String] { [] }
    public func start(_ p: Params, _ c: CallContext) throws(RPCError) -> SlowCall<JSON> {
        guard let api = service.api else {
            throw RPCError.forbidden("app_store_api_not_configured", "No App Store Server API key is configured (appStore.serverApi)")
        }
        let endDate = p.endDate ?? c.now
        guard p.startDate.milliseconds >= c.now.milliseconds - Self.historyDays * 86_400_000 else {
            throw RPCError.invalidParams("params.startDate", reason: "out_of_range", "params.startDate must be within the last \(Self.historyDays) days")
        }
        guard endDate.milliseconds > p.startDate.milliseconds else {
            throw RPCError.invalidParams("params.endDate", reason: "out_of_range", "params.endDate must be after params.startDate")
        }
        guard let (environment, appleToken) = service.recoveryStart(p.paginationToken) else {
            throw RPCError.invalidParams("params.paginationToken", reason: "out_of_range", "params.paginationToken is not one this kernel gave")
        }
        let (service, start, end) = (service, p.startDate.milliseconds, endDate.milliseconds)
        return SlowCall(work: {
            api.notificationPage(startDate: start, endDate: end, environment: environment, paginationToken: appleToken, now: c.now)
        }) { (page: HistoryPage) throws(RPCError) -> JSON in
            switch page {
            case .failure(let failure): throw failure.rpc
            case .success(let page):
                return try answer { () throws(SubscriptionsError) in
                    try service.finishRecovery(page.notifications, environment: environment, next: page.next, now: c.now)
                }
            }
        }
    }
}

extension ServerAPIFailure {
    /// How a call that needed Apple's answer fails when there is none.
    var rpc: RPCError {
        switch self {
        case .keyRejected: return .forbidden("app_store_key_rejected", description)
        case .throttled(let seconds):
            return RPCError(code: .limited, message: "The App Store Server API is " + description, reason: "app_store_unavailable",
                            extra: [("retryAfterMs", .int(Int64(seconds) * 1000))])
        case .notFound, .unavailable, .invalid:
            return RPCError(code: .limited, message: "The App Store Server API is not usable now: " + description, reason: "app_store_unavailable",
                            extra: [("retryAfterMs", .int(60_000))])
        }
    }
}

extension RecoveryReport: JSONEncodable {
    public var json: JSON {
        ["fetched": .int(Int64(fetched)), "applied": .int(Int64(applied)), "duplicates": .int(Int64(duplicates)),
         "failed": .int(Int64(failed)), "paginationToken": .optional(paginationToken)]
    }
}

/// `subscriptions.notify`.
public struct SubscriptionsNotify: RPCMethod {
    public struct Params: RPCParams {
        let signedPayload: String
        public static let declaration = ParamList(
            required("signedPayload", maxBytes: SignedDataVerifier.maxBytes).described("an App Store Server Notification V2, as Apple posts it"))
        public init(_ v: String) { signedPayload = v }
    }
    public static let name = "subscriptions.notify"
    public static let summary = "Applies an App Store Server Notification V2 once per notificationUUID; older data never rolls a membership back."
    public static let mutates = true
    public static let auth = AuthRequirement.service
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false,
     "required": ["notificationType", "subtype", "originalTransactionId", "userId", "status", "duplicate"],
     "properties": {
       "notificationType": {"type": "string"}, "subtype": {"type": ["string", "null"]},
       "originalTransactionId": {"type": ["string", "null"]}, "userId": {"type": ["string", "null"], "format": "uuid"},
       "status": {"enum": [null, "active", "grace_period", "billing_retry", "inactive"]}, "duplicate": {"type": "boolean"}}}
    """#
    public static let errors = verificationErrors
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try answer { () throws(SubscriptionsError) in try service.notify(p.signedPayload, now: c.now) }
    }
}
