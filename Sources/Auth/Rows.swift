import DomainSupport
import JSON
import Storage

/// An account (`auth.users`, key `profile` in the user's own partition).
public struct UserRow: StoredRow {
    public let id: String
    public var email: String?
    public let createdAt: Int64
    /// `password`, or the identity providers the account signs in with.
    public var identities: [String]
    /// scrypt hash; nil for accounts without a password.
    public var passwordHash: String?
    /// Whether the email was proven: asserted verified by an identity provider. A password sign-up
    /// proves nothing (the kernel sends no mail), so a provider identity never links to such an account
    /// on its own (see `AuthService.exchange`).
    public var emailProven: Bool

    public init(id: String, email: String?, createdAt: Int64, identities: [String], passwordHash: String?, emailProven: Bool = false) {
        self.id = id
        self.email = email
        self.createdAt = createdAt
        self.identities = identities
        self.passwordHash = passwordHash
        self.emailProven = emailProven
    }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "user")
        id = try f.string("id")
        email = f.optionalString("email")
        createdAt = try f.instant("createdAt")
        identities = f.strings("identities")
        passwordHash = f.optionalString("passwordHash")
        // Rows written before the flag: an email came from a provider only where one is linked.
        if case .bool(let proven)? = f.object["emailProven"] { emailProven = proven } else {
            emailProven = email != nil && identities.contains { $0 != "password" && $0 != "external" }
        }
    }

    /// An account a sign-up under `auth.requireEmailVerification` made, waiting for its email to be
    /// proven: no way to sign in yet (no password, no identity).
    public var awaitsVerification: Bool { identities.isEmpty && passwordHash == nil }

    public var stored: JSON {
        ["id": .string(id), "email": .optional(email), "createdAt": .int(createdAt),
         "identities": .array(identities.map(JSON.string)), "passwordHash": .optional(passwordHash), "emailProven": .bool(emailProven)]
    }
}

/// A lookup entry of releases before 0.2, in the shared `*` partition: `email:<email>` or
/// `identity:<provider>:<sub>` -> user id. Read only to move it into unique keys.
public struct IndexRow: StoredRow {
    public let userId: String
    public init(userId: String) { self.userId = userId }
    public init(stored: JSON) throws(StorageError) { userId = try StoredFields(stored, "index").string("userId") }
    public var stored: JSON { ["userId": .string(userId)] }
}

/// A sign-in session (`auth.sessions`, keyed by session id in the user's partition). Access tokens
/// carry its id as `sid`; revoking it ends them and its refresh tokens at once.
public struct SignInRow: StoredRow {
    public let createdAt: Int64
    public var revoked: Bool
    /// The keys of the session's refresh tokens still kept, oldest first, the current one last: what
    /// goes when the session is pushed out, and what drops off as the token rotates.
    public var refreshKeys: [String]
    public init(createdAt: Int64, revoked: Bool, refreshKeys: [String] = []) {
        self.createdAt = createdAt
        self.revoked = revoked
        self.refreshKeys = refreshKeys
    }
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "session")
        createdAt = try f.instant("createdAt")
        revoked = f.bool("revoked")
        refreshKeys = f.object["refresh"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }
    public var stored: JSON {
        var o = JSONObject([("createdAt", .int(createdAt)), ("revoked", .bool(revoked))])
        if !refreshKeys.isEmpty { o["refresh"] = .array(refreshKeys.map(JSON.string)) }
        return .object(o)
    }
}

/// A refresh token (`auth.refresh`, keyed by the SHA-256 of the token in the user's partition).
public struct RefreshRow: StoredRow {
    public let sessionId: String
    public let expiresAt: Int64
    /// Already exchanged for a new one: presenting it again means it leaked, unless within the reuse
    /// interval (a concurrent refresh).
    public var spent: Bool
    /// When it was exchanged (ms since 1970).
    public var spentAt: Int64?
    /// The token it was exchanged for, sealed with a key derived from this token, so only a holder of
    /// this one can read it: what a reuse within the interval answers.
    public var next: String?
    public init(sessionId: String, expiresAt: Int64, spent: Bool, spentAt: Int64? = nil, next: String? = nil) {
        self.sessionId = sessionId
        self.expiresAt = expiresAt
        self.spent = spent
        self.spentAt = spentAt
        self.next = next
    }
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "refresh token")
        sessionId = try f.string("sessionId")
        expiresAt = try f.instant("expiresAt")
        spent = f.bool("spent")
        spentAt = try f.optionalInstant("spentAt")
        next = f.optionalString("next")
    }
    public var stored: JSON {
        var o = JSONObject([("sessionId", .string(sessionId)), ("expiresAt", .int(expiresAt)), ("spent", .bool(spent))])
        if let spentAt { o["spentAt"] = .int(spentAt) }
        if let next { o["next"] = .string(next) }
        return .object(o)
    }
}

/// Failed sign-ins of one email in the throttle window (`auth.throttle`, in the email's own partition
/// `throttle:<email>`, key `failures`): in the store, so that every kernel on one database counts them.
public struct ThrottleRow: StoredRow {
    /// When each failure happened (ms since 1970), oldest first.
    public var failures: [Int64]
    /// When the row stops counting, where that is not its newest time and the longest window (an
    /// address known to an account).
    public var until: Int64?
    public init(failures: [Int64], until: Int64? = nil) {
        self.failures = failures
        self.until = until
    }
    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "throttle")
        failures = f.object["failures"]?.arrayValue?.compactMap(\.intValue) ?? []
        until = f.object["until"]?.intValue
    }
    /// A throttle row's second-order key: when it has no more effect (its newest time plus the longest
    /// window, or its own `until`), 15 digits, so that `prune` finds spent rows in time order.
    public static func expiry(_ row: ThrottleRow) -> String {
        let at = max(0, min(row.until ?? ((row.failures.last ?? 0) + Throttle.signUpWindowMs), 999_999_999_999_999))
        let digits = String(at)
        return String(repeating: "0", count: 15 - digits.count) + digits
    }

    public var stored: JSON {
        guard let until else { return ["failures": .array(failures.map(JSON.int))] }
        return ["failures": .array(failures.map(JSON.int)), "until": .int(until)]
    }
}
