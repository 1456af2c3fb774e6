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
       "error": {"enum": [null, "expired", "revoked"]}}}
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
    do { return try body().json } catch { throw error.rpc }
}

extension Membership: JSONEncodable {
    public var json: JSON {
        ["status": .string(status), "productId": .optional(productId), "currentPeriodEnd": .timestamp(currentPeriodEnd),
         "transactionId": .optional(transactionId), "originalTransactionId": .optional(originalTransactionId),
         "environment": .optional(environment), "error": .optional(error)]
    }
}

extension RefreshReport: JSONEncodable {
    public var json: JSON {
        ["checked": .int(Int64(checked)), "expired": .int(Int64(expired)), "renewed": .int(Int64(renewed)),
         "unchanged": .int(Int64(unchanged)), "failed": .int(Int64(failed)), "remaining": .int(Int64(remaining)), "mode": .string(mode)]
    }
}

extension NotifyReport: JSONEncodable {
    public var json: JSON {
        ["notificationType": .string(notificationType), "subtype": .optional(subtype), "originalTransactionId": .optional(originalTransactionId),
         "userId": .optional(userId), "status": .optional(status), "duplicate": .bool(duplicate)]
    }
}

let verificationErrors = [
    ErrorDoc(-32010, "malformed_jws, untrusted_chain, invalid_signature, bundle_mismatch, environment_mismatch, product_mismatch; nothing stored"),
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
    public static let errors = verificationErrors + [ErrorDoc(-32009, "transaction_owned_by_other_user")]
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

/// `subscriptions.refresh`.
public struct SubscriptionsRefresh: RPCMethod {
    public struct Params: RPCParams {
        let limit: Int
        public static let declaration = ParamList(optional("limit", in: 1...500, default: 50).described("memberships to check in this call"))
        public init(_ limit: Int64) { self.limit = Int(limit) }
    }
    public static let name = "subscriptions.refresh"
    public static let summary = "Re-checks due memberships against the clock (not looked at by refresh within appStore.refreshIntervalSeconds, or whose period or grace period ended since), soonest due first; call until remaining is 0."
    public static let mutates = true
    public static let auth = AuthRequirement.service
    public static let resultSchema = #"""
    {"type": "object", "additionalProperties": false,
     "required": ["checked", "expired", "renewed", "unchanged", "failed", "remaining", "mode"],
     "properties": {
       "checked": {"type": "integer", "minimum": 0}, "expired": {"type": "integer", "minimum": 0},
       "renewed": {"type": "integer", "minimum": 0}, "unchanged": {"type": "integer", "minimum": 0},
       "failed": {"type": "integer", "minimum": 0}, "remaining": {"type": "integer", "minimum": 0},
       "mode": {"enum": ["clock", "api"]}}}
    """#
    let service: SubscriptionsService
    public init(_ service: SubscriptionsService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> JSON {
        try answer { () throws(SubscriptionsError) in try service.refresh(limit: p.limit, now: c.now) }
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
