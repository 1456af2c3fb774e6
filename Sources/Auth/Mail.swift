import Crypto
import DomainSupport
import JSON
import Storage

/// A mail the host is to send for the kernel, which sends none: a password reset, an email verification,
/// or (under `auth.requireEmailVerification`) word to an account's owner that someone signed up with
/// their email, whose token resets the password as a reset mail's does; each carrying a single-use token (`auth.mail`, keyed by mail id in the user's partition). A
/// synced entity, so that its creation reaches subscribed hosts as `events.changed` with entity
/// `auth.mail`; the host then reads it with `auth.mail` (service token) and sends it. The token is kept
/// as its SHA-256, which redeeming it checks, and sealed under a key derived from the kernel's secret,
/// which only `auth.mail` opens: a copy of the store redeems nothing. A new mail of a kind replaces the
/// user's earlier one of that kind, and redeeming one deletes it: a user holds at most one of each.
public struct MailRow: StoredRow {
    public enum Kind: String, Sendable {
        case passwordReset = "password_reset"
        case emailVerification = "email_verification"
        case accountExists = "account_exists"
    }

    public let kind: Kind
    /// Where it goes: the account's email when it was made.
    public let email: String
    /// SHA-256 of the token's secret, hex.
    public let digest: String
    /// The token, sealed (AES-GCM) for `auth.mail`.
    public let sealed: String
    public let createdAt: Int64
    public let expiresAt: Int64
    /// The password a sign-up under `auth.requireEmailVerification` chose (scrypt hash), which becomes the
    /// account's when this verification mail's token is redeemed: whoever proves the email sets the password.
    public let passwordHash: String?

    public init(kind: Kind, email: String, digest: String, sealed: String, createdAt: Int64, expiresAt: Int64, passwordHash: String? = nil) {
        (self.kind, self.email, self.digest, self.sealed, self.createdAt, self.expiresAt) = (kind, email, digest, sealed, createdAt, expiresAt)
        self.passwordHash = passwordHash
    }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "mail")
        guard let kind = Kind(rawValue: try f.string("kind")) else { throw StorageError.corrupt("mail: unknown kind") }
        self.kind = kind
        email = try f.string("email")
        digest = try f.string("digest")
        sealed = try f.string("sealed")
        createdAt = try f.instant("createdAt")
        expiresAt = try f.instant("expiresAt")
        passwordHash = f.optionalString("passwordHash")
    }

    public var stored: JSON {
        ["kind": .string(kind.rawValue), "email": .string(email), "digest": .string(digest), "sealed": .string(sealed),
         "createdAt": .int(createdAt), "expiresAt": .int(expiresAt), "passwordHash": .optional(passwordHash)]
    }
}

/// The rules of mail tokens: pure, so tests call them directly.
enum MailTokens {
    /// How long a token is good for: an hour to reset a password (a stolen mailbox's window stays
    /// short), a day to verify an email (people read mail late).
    static func lifetimeMs(_ kind: MailRow.Kind) -> Int64 {
        kind == .emailVerification ? 24 * 60 * 60 * 1000 : 60 * 60 * 1000
    }

    /// Mail requests per email, and per client address, in `windowMs`: answered the same whether or not
    /// the email has an account, so the limit tells nothing either.
    static let perEmail = 3
    static let perAddress = 20
    static let windowMs: Int64 = 60 * 60 * 1000

    /// The token a mail carries: `hkm1.` + the user id, the mail id and 32 random bytes, base64url each.
    static func token(user: String, mailId: String, secret: [UInt8]) -> String {
        "hkm1." + Base64URL.encode(Array(user.utf8)) + "." + mailId + "." + Base64URL.encode(secret)
    }

    /// The parts of a token; nil when it is not one.
    static func parse(_ token: String) -> (user: String, mailId: String, secret: [UInt8])? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard token.utf8.count <= 512, parts.count == 4, parts[0] == "hkm1", let user = Base64URL.decode(Array(parts[1].utf8)),
              let secret = Base64URL.decode(Array(parts[3].utf8)), secret.count == 32,
              parts[2].utf8.count == 32, parts[2].utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else { return nil }
        return (String(decoding: user, as: UTF8.self), String(parts[2]), secret)
    }

    /// SHA-256 of `secret`, hex.
    static func digest(_ secret: [UInt8]) -> String {
        Digest.sha256Hex(secret)
    }

    /// Whether `secret` is the one `digest` was made of, in time that does not depend on where they differ.
    static func matches(_ secret: [UInt8], digest: String) -> Bool {
        let a = Array(Self.digest(secret).utf8), b = Array(digest.utf8)
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// Whether a mail row may still be redeemed at `now` for `kind` (an `account_exists` mail's token
    /// resets the password).
    static func usable(_ row: MailRow, kind: MailRow.Kind, now: Int64) -> Bool {
        (row.kind == kind || (kind == .passwordReset && row.kind == .accountExists)) && now < row.expiresAt
    }
}
