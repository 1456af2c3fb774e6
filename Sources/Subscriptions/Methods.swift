import Chrono
import DomainSupport
import JSON
import JSONRPC
import Storage

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

/// Runs a service call: its value, or its refusal as on the wire.
func answer<T>(_ body: () throws(SubscriptionsError) -> T) throws(RPCError) -> T {
    do { return try body() } catch { throw error.rpc }
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
    public static let errors = verificationErrors + [ErrorDoc(.conflict, "transaction_owned_by_other_user")]
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> Membership {
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
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> Membership {
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
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func orderingKeys(_ params: JSONObject) -> [String] { [] }
    public func start(_ p: Params, _ c: CallContext) throws(RPCError) -> SlowCall<RefreshReport> {
        let service = self.service
        guard let api = service.api else {
            let report = try answer { () throws(SubscriptionsError) in try service.refresh(limit: p.limit, now: c.now) }
            return SlowCall(work: {}) { (_: ()) throws(RPCError) -> RefreshReport in report }
        }
        let answers = try answer { () throws(SubscriptionsError) in try service.beginConsumption(limit: p.limit, now: c.now) }
        let (lookups, remaining) = try answer { () throws(SubscriptionsError) in try service.beginLookups(limit: p.limit, now: c.now) }
        // The users are not listed: their requests need not wait for Apple, and the answers are applied
        // to the state as it is by then.
        return SlowCall(work: { (api.send(answers), api.run(lookups, now: c.now, budgetSeconds: SubscriptionsService.lookupBudgetSeconds)) }) {
            (results: ([ServerAPIFailure?], [LookupResult])) throws(RPCError) -> RefreshReport in
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
    public static let errors = [
        ErrorDoc(.forbidden, "app_store_api_not_configured (no appStore.serverApi), app_store_key_rejected (Apple refused the key)"),
        ErrorDoc(.limited, "app_store_unavailable: Apple could not be reached, answered 5xx or throttled; data.retryAfterMs"),
    ]
    /// How far back Apple keeps notification history.
    static let historyDays: Int64 = 180
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func orderingKeys(_ params: JSONObject) -> [String] { [] }
    public func start(_ p: Params, _ c: CallContext) throws(RPCError) -> SlowCall<RecoveryReport> {
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
        }) { (page: HistoryPage) throws(RPCError) -> RecoveryReport in
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
    public static let errors = verificationErrors
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> NotifyReport {
        try answer { () throws(SubscriptionsError) in try service.notify(p.signedPayload, now: c.now) }
    }
}
