import Chrono
import Crypto
import DomainSupport
import JSON
import JSONRPC
import Storage

/// Accounts that recover: a password reset and an email verification, each by a single-use token the
/// host mails (`MailRow`). The kernel sends no mail: a mail it makes reaches subscribed hosts as
/// `events.changed` (entity `auth.mail`), and a host reads it with `auth.mail`.
extension AuthService {
    /// Makes a password-reset mail for the account holding `email`, if there is one. The answer, and the
    /// throttle (per email and per address, counted whether or not the email has an account), are the
    /// same either way: nobody learns from it which emails have accounts.
    func requestPasswordReset(email: String, from address: String?, now: Timestamp) throws(AuthError) {
        var tx = Transaction()
        try countMailRequest(email: email, address: address, &tx, now: now)
        if let user = try owner(of: .email(email)), let account = try account(user) {
            try makeMail(.passwordReset, for: account, &tx, now: now)
        }
        try commit(tx)
    }

    /// Makes an email-verification mail for the caller's account; false when there is nothing to verify
    /// (no email, or it is proven already).
    func requestEmailVerification(_ identity: Identity, now: Timestamp) throws(AuthError) -> Bool {
        guard let userId = identity.userId, let account = try account(userId) else { throw .noSuchUser }
        guard let email = account.email, !account.emailProven else { return false }
        var tx = Transaction()
        try countMailRequest(email: email, address: nil, &tx, now: now)
        try makeMail(.emailVerification, for: account, &tx, now: now)
        try commit(tx)
        return true
    }

    /// Proves the account's email with a verification token, once. A sign-up's mail also sets the
    /// password that sign-up chose: the account can sign in from now on.
    func verifyEmail(token: String, now: Timestamp) throws(AuthError) -> UserRow {
        let (account, mailId, row) = try redeemable(token, .emailVerification, now: now)
        var proven = account
        proven.emailProven = true
        if let hash = row.passwordHash {
            proven.passwordHash = hash
            if !proven.identities.contains("password") { proven.identities.append("password") }
        }
        var tx = Transaction()
        tx.delete(tables.mail, user: account.id, key: mailId)
        tx.put(tables.users, user: account.id, key: Self.profileKey, proven)
        try commit(tx)
        return proven
    }

    /// Checks a reset token before its new password is hashed (on a worker): a token that cannot be
    /// redeemed costs no hash.
    func beginResetPassword(token: String, now: Timestamp) throws(AuthError) {
        _ = try redeemable(token, .passwordReset, now: now)
    }

    /// Sign-up under `auth.requireEmailVerification`, once the password is hashed (whether or not the
    /// email is taken, so both cost the same): a new account that cannot sign in yet and a verification
    /// mail carrying the password; or, when the email has an account, a mail to its owner (a new
    /// verification mail with this password if that account is still waiting for one, else
    /// `account_exists`). The caller answers the same either way; the request was counted as a mail
    /// request in `beginSignUp`.
    func finishSignUpByMail(email: String, passwordHash: String, now: Timestamp) throws(AuthError) {
        for attempt in 0..<2 {
            var tx = Transaction()
            if let id = try owner(of: .email(email)), let account = try account(id) {
                try makeMail(account.awaitsVerification ? .emailVerification : .accountExists, for: account, &tx, now: now,
                             passwordHash: account.awaitsVerification ? passwordHash : nil)
                return try commit(tx)
            }
            let user = UserRow(id: random.uuid(), email: email, createdAt: now.milliseconds, identities: [], passwordHash: nil)
            tx.put(tables.users, user: user.id, key: Self.profileKey, user)
            tx.claim(.email(email), for: user.id)
            try makeMail(.emailVerification, for: user, &tx, now: now, passwordHash: passwordHash)
            do {
                return try commit(tx)
            } catch .storage(.taken) where attempt == 0 {
                // A sign-up of the same email on another kernel won the claim: mail its owner instead.
                continue
            }
        }
    }

    /// Sets the new password (hashed) with a reset token, once, and ends every session of the account:
    /// whoever held one may be who the reset locks out. The mail proved the email too. Returns how many
    /// sessions ended.
    func finishResetPassword(token: String, passwordHash: String, now: Timestamp) throws(AuthError) -> Int {
        let (account, mailId, _) = try redeemable(token, .passwordReset, now: now)
        var updated = account
        updated.passwordHash = passwordHash
        updated.emailProven = true
        if !updated.identities.contains("password") { updated.identities.append("password") }
        var tx = Transaction()
        tx.delete(tables.mail, user: account.id, key: mailId)
        tx.put(tables.users, user: account.id, key: Self.profileKey, updated)
        var ended = 0
        for (sid, var session) in try storage(try tables.sessions.rows(of: account.id)) where !session.revoked {
            session.revoked = true
            tx.put(tables.sessions, user: account.id, key: sid, session)
            ended += 1
        }
        try commit(tx)
        return ended
    }

    /// A mail for the host to send: its kind, address and token, while it can still be redeemed; nil once
    /// it was used, replaced or has expired.
    func mail(user: String, id: String, now: Timestamp) throws(AuthError) -> Mail? {
        guard let row = try storage(try tables.mail.get(user: user, key: id)), now.milliseconds < row.expiresAt,
              let token = Self.openMail(row.sealed, secrets: cursorSecrets) else { return nil }
        return Mail(id: id, userId: user, kind: row.kind, email: row.email, token: token, expiresAt: row.expiresAt)
    }

    /// The account and mail id a token redeems, or `invalidMailToken`: unknown, of another kind, used,
    /// replaced or expired all look the same.
    private func redeemable(_ token: String, _ kind: MailRow.Kind, now: Timestamp) throws(AuthError) -> (UserRow, String, MailRow) {
        guard let (user, mailId, secret) = MailTokens.parse(token),
              let row = try storage(try tables.mail.get(user: user, key: mailId)),
              MailTokens.usable(row, kind: kind, now: now.milliseconds), MailTokens.matches(secret, digest: row.digest),
              let account = try account(user) else { throw .invalidMailToken }
        return (account, mailId, row)
    }

    /// Puts a new mail of `kind` for `account`, replacing the user's earlier ones of that kind.
    private func makeMail(_ kind: MailRow.Kind, for account: UserRow, _ tx: inout Transaction, now: Timestamp,
                          passwordHash: String? = nil) throws(AuthError) {
        guard let email = account.email else { return }
        for (id, row) in try storage(try tables.mail.rows(of: account.id)) where row.kind == kind || now.milliseconds >= row.expiresAt {
            tx.delete(tables.mail, user: account.id, key: id)
        }
        let mailId = random.bytes(16).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
        let secret = random.bytes(32)
        let token = MailTokens.token(user: account.id, mailId: mailId, secret: secret)
        guard let sealed = Self.sealMail(token, secret: cursorSecrets[0]) else { throw .storage(.unavailable("sealing a mail token failed")) }
        tx.put(tables.mail, user: account.id, key: mailId,
               MailRow(kind: kind, email: email, digest: MailTokens.digest(secret), sealed: sealed, createdAt: now.milliseconds,
                       expiresAt: now.milliseconds + MailTokens.lifetimeMs(kind), passwordHash: passwordHash))
    }

    /// Counts a mail request against the email's and the address's limits (`MailTokens`).
    func countMailRequest(email: String, address: String?, _ tx: inout Transaction, now: Timestamp) throws(AuthError) {
        let ms = now.milliseconds
        for (partition, limit) in [("mail:" + email, MailTokens.perEmail)] + (address.map { [("mail-from:" + $0, MailTokens.perAddress)] } ?? []) {
            let stored = try storage(try tables.throttle.get(user: partition, key: Self.throttleKey))?.failures ?? []
            let recent = Throttle.recent(stored, now: ms, window: MailTokens.windowMs)
            if let wait = Throttle.wait(recent, limit: limit, now: ms, window: MailTokens.windowMs) { throw .tooManyMailRequests(retryAfterMs: wait) }
            tx.put(tables.throttle, user: partition, key: Self.throttleKey,
                   ThrottleRow(failures: recent.suffix(limit - 1) + [ms], until: ms + MailTokens.windowMs))
        }
    }

    /// `token` encrypted (AES-GCM) under a key derived from the kernel's secret, for `auth.mail` only.
    static func sealMail(_ token: String, secret: [UInt8]) -> String? {
        guard let box = try? AES.GCM.seal(Array(token.utf8), using: mailKey(secret)), let combined = box.combined else { return nil }
        return Base64URL.encode(Array(combined))
    }

    /// A sealed token, opened with whichever of the kernel's secrets sealed it.
    static func openMail(_ sealed: String, secrets: [[UInt8]]) -> String? {
        guard let bytes = Base64URL.decode(Array(sealed.utf8)), let box = try? AES.GCM.SealedBox(combined: bytes) else { return nil }
        for secret in secrets {
            if let plain = try? AES.GCM.open(box, using: mailKey(secret)) { return String(decoding: plain, as: UTF8.self) }
        }
        return nil
    }

    private static func mailKey(_ secret: [UInt8]) -> SymmetricKey {
        SymmetricKey(data: SHA256.hash(data: Array("healthkernel mail token".utf8) + secret))
    }
}

extension AuthService {
    /// A mail as the change feed shows it with `includeData`: its kind, address and expiry, never its
    /// token; nil once used, replaced or expired.
    public func renderMail(user: String, id: String, now: Timestamp) throws(RPCError) -> JSON? {
        guard let row = try answerRPC(try storage(try tables.mail.get(user: user, key: id))), now.milliseconds < row.expiresAt else { return nil }
        return ["kind": .string(row.kind.rawValue), "email": .string(row.email),
                "expiresAt": .string(Timestamp(milliseconds: row.expiresAt).description)]
    }
}

/// A mail as `auth.mail` gives it to the host.
public struct Mail: Sendable {
    public let id: String
    public let userId: String
    public let kind: MailRow.Kind
    public let email: String
    public let token: String
    public let expiresAt: Int64
}
