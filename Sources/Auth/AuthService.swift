import Chrono
import FoundationEssentials
import Crypto
import DomainSupport
import JSON
import JSONRPC
import Storage

/// The auth tables, registered with the store before it recovers.
public struct AuthTables: Sendable {
    public let users: any StorageTable<UserRow>
    /// Where releases before 0.2 kept the email and identity lookups (in a shared `*` partition); read
    /// once at start-up and moved into unique keys (`upgradeLegacyIndex`).
    @usableFromInline let legacyIndex: any StorageTable<IndexRow>
    public let sessions: any StorageTable<SignInRow>
    public let refresh: any StorageTable<RefreshRow>
    public let throttle: any StorageTable<ThrottleRow>
    /// Mails for the host to send (`MailRow`): a synced entity, so that hosts hear of each.
    public let mail: any StorageTable<MailRow>

    /// Registers the tables. Inlinable, so that the composition root's call is specialised for its
    /// storage and each table's row operations are compiled for their row type.
    @inlinable
    public init(_ store: some Storage) {
        users = store.table("auth.users", of: UserRow.self)
        legacyIndex = store.table("auth.index", of: IndexRow.self)
        sessions = store.table("auth.sessions", of: SignInRow.self)
        refresh = store.table("auth.refresh", of: RefreshRow.self)
        throttle = store.table("auth.throttle", of: ThrottleRow.self, orderedBy: ThrottleRow.expiry)
        mail = store.table("auth.mail", of: MailRow.self, entity: Entity("auth.mail"))
    }
}

/// Accounts, sign-in sessions and tokens: verifies bearer tokens for the dispatcher, and carries out the
/// auth methods. Its methods run on the serving thread; the slow parts (hashing and checking passwords,
/// proving id tokens) are static functions a worker runs without it.
public final class AuthService: Authenticator, @unchecked Sendable {
    /// `iss` of the tokens the kernel issues.
    public static let issuer = "healthkernel"
    /// The partition older releases kept the email and identity lookups in.
    static let legacyShared = "*"
    static let profileKey = "profile"
    static let cacheLimit = 10_000
    /// How long past its `exp` a token is still taken, for clocks that disagree a little: one allowance
    /// everywhere a token counts (requests, events subscriptions, the example server's checks).
    public static let clockSkewSeconds: Int64 = 60

    let config: AuthConfig
    let tables: AuthTables
    /// Where user and session ids, refresh tokens and password salts are drawn from.
    let random: RandomSource
    let store: any Storage
    let signingKey: VerificationKey
    /// Earlier secrets (`auth.previousJwtSecrets`): tokens they signed verify until they expire.
    let previousKeys: [VerificationKey]
    let issuerKeys: KeySource
    let providerKeys: [String: KeySource]
    private var cache: [String: VerifiedToken] = [:]

    /// What a verified access token says, kept so the signature is checked once per token.
    struct VerifiedToken {
        let userId: String?
        let role: String
        let sessionId: String?
        let expiresAt: Int64
    }

    /// A service over `tables`, signing with `secret`, accepting tokens signed with `config`'s previous
    /// secrets, and trusting the given key sources.
    public init(config: AuthConfig, secret: [UInt8], issuerKeys: KeySource = .fixed(KeySet()), providerKeys: [String: KeySource] = [:],
                store: any Storage, tables: AuthTables, random: RandomSource = SystemRandom()) throws {
        self.random = random
        self.config = config
        self.store = store
        self.tables = tables
        self.signingKey = VerificationKey.hmac(secret)
        self.previousKeys = config.previousJwtSecrets.map { VerificationKey.hmac(Array($0.utf8)) }
        self.cursorSecrets = ([secret] + config.previousJwtSecrets.map { Array($0.utf8) }).map {
            Array(SHA256.hash(data: Array("healthkernel cursor key".utf8) + $0))
        }
        self.issuerKeys = issuerKeys
        self.providerKeys = providerKeys
    }

    /// Secrets for other modules' tamper-evident values (list cursors), derived from the signing secret
    /// (the first, which seals) and the previous ones (which still open what they sealed).
    public let cursorSecrets: [[UInt8]]

    /// Number of accounts.
    public func userCount() throws(StorageError) -> Int { try tables.users.userCount() }

    // MARK: Verifying access tokens

    public func userOrdering(token: String, requirement: AuthRequirement, now: Timestamp) -> String? {
        tokenAlone(token, requirement: requirement, now: now)?.userId
    }

    /// What `token` says, from its signature and expiry alone (no stored session read); nil when not valid.
    private func tokenAlone(_ token: String, requirement: AuthRequirement, now: Timestamp) -> VerifiedToken? {
        guard requirement != .none, let verified = cache[token] ?? (try? verify(token, now: now)),
              now.seconds <= verified.expiresAt + Self.clockSkewSeconds else { return nil }
        if cache[token] == nil { remember(token, verified) }
        return verified
    }

    private func remember(_ token: String, _ verified: VerifiedToken) {
        if cache.count >= Self.cacheLimit { cache.removeAll(keepingCapacity: true) }
        cache[token] = verified
    }

    public func authenticate(token: String?, requirement: AuthRequirement, writes: Bool, now: Timestamp) throws(RPCError) -> Identity? {
        guard requirement != .none else { return nil }
        guard let token, !token.isEmpty else {
            if requirement == .optionalUser { return nil }
            throw RPCError.unauthorized("missing_token", "This method needs params.auth")
        }
        let verified: VerifiedToken
        if let hit = cache[token] {
            verified = hit
        } else {
            do {
                verified = try verify(token, now: now)
            } catch {
                throw RPCError.unauthorized(error.reason, error.message)
            }
            remember(token, verified)
        }
        // Checked on every call, cached or not: expiry and revocation take effect at once.
        guard now.seconds <= verified.expiresAt + Self.clockSkewSeconds else {
            cache[token] = nil
            throw RPCError.unauthorized("expired_token", "The token has expired")
        }
        if let sid = verified.sessionId, let user = verified.userId {
            guard let session = try answerRPC(try storage(try tables.sessions.get(user: user, key: sid))), !session.revoked else {
                throw RPCError.unauthorized("invalid_token", "The session has ended")
            }
        }
        switch requirement {
        case .service:
            guard verified.role == "service_role" else {
                throw RPCError.forbidden("service_role_required", "This method needs a service_role token")
            }
        case .userOrService where verified.role == "service_role":
            break
        case .user, .optionalUser, .userOrService:
            guard verified.role == "authenticated", let user = verified.userId else {
                throw RPCError.forbidden("user_token_required", "This method needs a user's token")
            }
            // A user of another issuer's token may have no account yet; made by their first write, not here.
            // A request that does not write needs no answer (`Identity.needsAccount`): no read for it.
            if verified.sessionId == nil, try mayLackAccount(user, writes: writes) {
                return Identity(userId: user, role: verified.role, sessionId: nil,
                                expiresAt: verified.expiresAt + Self.clockSkewSeconds, needsAccount: true)
            }
        case .none:
            break
        }
        return Identity(userId: verified.userId, role: verified.role, sessionId: verified.sessionId,
                        expiresAt: verified.expiresAt + Self.clockSkewSeconds)
    }

    public func declareReads(token: String?, requirement: AuthRequirement, writes: Bool, now: Timestamp) -> Identity? {
        guard let token, let verified = tokenAlone(token, requirement: requirement, now: now) else { return nil }
        if let user = verified.userId {
            // What `authenticate` reads: the session of a token the kernel issued, else a writer's account.
            if let sid = verified.sessionId {
                try? store.prefetch([(tables.sessions, user, sid)])
            } else if writes && verified.role == "authenticated" {
                try? store.prefetch([(tables.users, user, Self.profileKey)])
            }
        }
        return Identity(userId: verified.userId, role: verified.role, sessionId: verified.sessionId,
                        expiresAt: verified.expiresAt + Self.clockSkewSeconds)
    }

    /// The account joins the request's first commit: made with its writes or not at all.
    public func createAccount(for identity: Identity, now: Timestamp) throws(RPCError) {
        guard identity.needsAccount, let user = identity.userId else { return }
        var tx = Transaction()
        tx.put(tables.users, user: user, key: Self.profileKey, Self.externalAccount(user, now: now))
        store.attachToUnit(tx)
    }

    /// Checks signature and claims of an access token (protocol/auth.md).
    func verify(_ token: String, now: Timestamp) throws(TokenError) -> VerifiedToken {
        let jwt = try JWT(token)
        let key: VerificationKey
        switch jwt.algorithm {
        case "HS256":
            key = signingKey
        case "ES256", "RS256":
            guard let kid = jwt.keyID, let k = issuerKeys.cachedKey(kid) else { throw .invalid("The token's key is unknown") }
            key = k
        default:
            throw .invalid("The token algorithm is not accepted")
        }
        do {
            try jwt.verify(with: key)
        } catch {
            // A token signed with a previous secret, during a rotation's grace period.
            guard jwt.algorithm == "HS256", previousKeys.contains(where: { (try? jwt.verify(with: $0)) != nil }) else { throw error }
        }
        let exp = try jwt.checkTimes(now: now)
        let iss = try jwt.stringClaim("iss")
        if !config.acceptedIssuers.isEmpty {
            guard let iss, iss == Self.issuer || config.acceptedIssuers.contains(iss) else {
                throw .invalid("The token issuer is not accepted")
            }
        }
        let role = try jwt.stringClaim("role") ?? "authenticated"
        let sid = try jwt.stringClaim("sid")
        switch role {
        case "service_role":
            let sub = try jwt.stringClaim("sub").flatMap(Identifiers.canonicalUUID)
            return VerifiedToken(userId: sub, role: role, sessionId: nil, expiresAt: exp)
        case "authenticated":
            guard let rawSub = try jwt.stringClaim("sub"), let sub = Identifiers.canonicalUUID(rawSub) else {
                throw .invalid("The token subject is not a user id")
            }
            guard try jwt.audiences().contains("authenticated") else { throw .invalid("The token audience is not accepted") }
            if sid != nil && iss != Self.issuer { throw .invalid("The token session is not one of this kernel's") }
            return VerifiedToken(userId: sub, role: role, sessionId: sid, expiresAt: exp)
        default:
            throw .invalid("The token role is not accepted")
        }
    }

    /// The account of a user known only from a trusted token (a Supabase project's user), as first made.
    static func externalAccount(_ user: String, now: Timestamp) -> UserRow {
        UserRow(id: user, email: nil, createdAt: now.milliseconds, identities: ["external"], passwordHash: nil)
    }

    // MARK: Sessions

    /// Starts a session for `user`: a session row, a refresh token and an access token.
    func startSession(_ user: UserRow, _ tx: inout Transaction, now: Timestamp) throws(AuthError) -> SignedIn {
        try makeRoomForSession(user.id, &tx)
        let sid = random.uuid()
        var session = SignInRow(createdAt: now.milliseconds, revoked: false)
        let signedIn = tokens(for: user, sessionId: sid, session: &session, &tx, now: now)
        tx.put(tables.sessions, user: user.id, key: sid, session)
        return signedIn
    }

    /// Refresh tokens kept per session: the current one and the 16 spent before it, as far as a
    /// concurrent refresh's chain is followed (`reusedWithinInterval`). An older spent token presented
    /// again is -32001 `invalid_token` without ending the session: its reuse is no longer told apart.
    static let refreshTokensKept = 17

    /// Ends the user's oldest sessions (revoked ones first), with their refresh tokens, so that the new
    /// one keeps them within `auth.sessionsPerUser`. O(the user's sessions), which that bounds.
    private func makeRoomForSession(_ userId: String, _ tx: inout Transaction) throws(AuthError) {
        let limit = config.sessionsPerUser
        guard limit > 0 else { return }
        let sessions = try storage(try tables.sessions.rows(of: userId))
        guard sessions.count >= limit else { return }
        let oldest = sessions.sorted { ($0.row.revoked ? 0 : 1, $0.row.createdAt) < ($1.row.revoked ? 0 : 1, $1.row.createdAt) }
        for (sid, session) in oldest.prefix(sessions.count - limit + 1) {
            tx.delete(tables.sessions, user: userId, key: sid)
            for key in session.refreshKeys { tx.delete(tables.refresh, user: userId, key: key) }
        }
    }

    /// A new refresh token and access token within session `sid`, the token's key noted in `session`
    /// (which the caller stores) and the oldest past `refreshTokensKept` dropped.
    private func tokens(for user: UserRow, sessionId sid: String, session: inout SignInRow, _ tx: inout Transaction,
                        now: Timestamp) -> SignedIn {
        let refreshToken = user.id + "." + Base64URL.encode(random.bytes(32))
        let key = Self.digest(refreshToken)
        tx.put(tables.refresh, user: user.id, key: key,
               RefreshRow(sessionId: sid, expiresAt: now.seconds + Int64(config.refreshTokenTtlSeconds), spent: false))
        session.refreshKeys.append(key)
        if session.refreshKeys.count > Self.refreshTokensKept {
            tx.delete(tables.refresh, user: user.id, key: session.refreshKeys.removeFirst())
        }
        let access = mint(sub: user.id, role: "authenticated", sessionId: sid, email: user.email,
                          ttl: config.accessTokenTtlSeconds, now: now)
        return SignedIn(accessToken: access, expiresIn: config.accessTokenTtlSeconds, refreshToken: refreshToken, user: user)
    }

    /// Signs an access token with the kernel's secret.
    public func mint(sub: String?, role: String, sessionId: String? = nil, email: String? = nil, ttl: Int, now: Timestamp) -> String {
        Self.claims(sub: sub, role: role, sessionId: sessionId, email: email, ttl: ttl, now: now, key: signingKey)
    }

    /// Builds the claims of an access token (Supabase's shape plus `sid`) and signs them with `key`.
    static func claims(sub: String?, role: String, sessionId: String?, email: String?, ttl: Int, now: Timestamp,
                       key: VerificationKey) -> String {
        var claims = JSONObject()
        claims["iss"] = .string(Self.issuer)
        if let sub { claims["sub"] = .string(sub) }
        if role == "authenticated" { claims["aud"] = "authenticated" }
        claims["role"] = .string(role)
        claims["iat"] = .int(now.seconds)
        claims["exp"] = .int(now.seconds + Int64(ttl))
        if let sessionId { claims["sid"] = .string(sessionId) }
        if let email { claims["email"] = .string(email) }
        return JWT.sign(claims: .object(claims), with: key)
    }

    static func digest(_ token: String) -> String {
        Digest.sha256Hex(token)
    }

    /// Storage reads and commits, their failures answered as this service's.
    func storage<T>(_ body: @autoclosure () throws(StorageError) -> T) throws(AuthError) -> T {
        do { return try body() } catch { throw .storage(error) }
    }

    func commit(_ tx: Transaction) throws(AuthError) {
        try storage(try store.commit(tx))
    }

    /// Whether `user` may have no account: read for a request that writes, assumed for one that does not.
    private func mayLackAccount(_ user: String, writes: Bool) throws(RPCError) -> Bool {
        guard writes else { return true }
        return try answerRPC(try account(user)) == nil
    }

    /// The account `id`, if it exists.
    func account(_ id: String) throws(AuthError) -> UserRow? {
        try storage(try tables.users.get(user: id, key: Self.profileKey))
    }

    /// The holder of `key`, if anyone.
    func owner(of key: UniqueKey) throws(AuthError) -> String? {
        try storage(try store.holder(of: key))
    }

    // MARK: Accounts

    /// Trims and lowercases an email and checks its shape; nil when it is not an address.
    /// The address is NFC-normalised before any use as a key, so its composed and decomposed forms are
    /// one account on every store (Swift's strings compare them equal in memory; PostgreSQL compares
    /// bytes). Control (C0, C1, DEL), format (Cf: zero-width and bidi controls among them) and
    /// compatibility characters (fullwidth letters, whose NFKC form differs) are refused: they make
    /// look-alike addresses.
    static func normalizeEmail(_ raw: String) -> String? {
        let trimmed = String(raw.unicodeScalars.drop(while: { $0.properties.isWhitespace }).reversed()
            .drop(while: { $0.properties.isWhitespace }).reversed().map(Character.init))
        let email = EmailScalars.nfc(EmailScalars.nfc(trimmed).lowercased())
        guard !email.unicodeScalars.contains(where: EmailScalars.refused) else { return nil }
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard email.utf8.count <= 254, parts.count == 2, !parts[0].isEmpty, parts[1].contains("."),
              !parts[1].hasPrefix("."), !parts[1].hasSuffix("."),
              !email.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.value < 0x20 }) else { return nil }
        return email
    }

    /// Signs up at once (hashing on this thread); the methods split it around the hash.
    func signUp(email: String, password: String, from address: String? = nil, now: Timestamp) throws(AuthError) -> SignedIn {
        try beginSignUp(email: email, from: address, now: now)
        return try finishSignUp(email: email, passwordHash: Passwords.hash(password, random: random), now: now)
    }

    /// Counts the sign-up against its address's hourly limit (stored, so it holds across kernels and
    /// whatever the answer) and, under `requireEmailVerification`, as a mail request of the email and
    /// address, whether or not the email has an account. Whether the email is taken is not looked at
    /// before the password is hashed, so a taken email costs the caller the same time as a free one.
    func beginSignUp(email: String, from address: String?, now: Timestamp) throws(AuthError) {
        var tx = Transaction()
        let limit = address == nil ? config.signUpsPerHourWithoutAddress : config.signUpsPerHourPerAddress
        if limit > 0 {
            let partition = "signups:" + (address ?? "unnamed")
            let stored = try storage(try tables.throttle.get(user: partition, key: Self.throttleKey))?.failures ?? []
            let recent = Throttle.recent(stored, now: now.milliseconds, window: Throttle.signUpWindowMs)
            if let wait = Throttle.wait(recent, limit: limit, now: now.milliseconds, window: Throttle.signUpWindowMs) {
                throw .tooManySignUps(retryAfterMs: wait)
            }
            tx.put(tables.throttle, user: partition, key: Self.throttleKey, ThrottleRow(failures: recent.suffix(limit - 1) + [now.milliseconds]))
        }
        if config.requireEmailVerification { try countMailRequest(email: email, address: address, &tx, now: now) }
        guard !tx.entries.isEmpty else { return }
        try pruneThrottle(&tx, now: now)
        try commit(tx)
    }

    /// Throttle rows spent before `now` removed with the transaction that writes one, a few at a time:
    /// sign-ins with random emails leave rows behind, and each later attempt takes up to `pruneBatch` of
    /// them away, so spent rows never outgrow the attempts of the longest window. O(pruneBatch) a write.
    private func pruneThrottle(_ tx: inout Transaction, now: Timestamp) throws(AuthError) {
        let spent = ThrottleRow.expiry(ThrottleRow(failures: [], until: now.milliseconds)) + "~"
        let (rows, _) = try storage(try tables.throttle.scanAllOrdered(through: spent, limit: Self.pruneBatch))
        let written = Set(tx.entries.compactMap { $0.user })
        for row in rows where !written.contains(row.user) { tx.delete(tables.throttle, user: row.user, key: row.key) }
    }

    static let pruneBatch = 8

    /// Creates the account once its password is hashed.
    func finishSignUp(email: String, passwordHash: String, now: Timestamp) throws(AuthError) -> SignedIn {
        guard try owner(of: .email(email)) == nil else { throw .emailTaken }
        let user = UserRow(id: random.uuid(), email: email, createdAt: now.milliseconds, identities: ["password"],
                           passwordHash: passwordHash)
        var tx = Transaction()
        tx.put(tables.users, user: user.id, key: Self.profileKey, user)
        tx.claim(.email(email), for: user.id)
        let session = try startSession(user, &tx, now: now)
        try commit(tx)
        return session
    }

    /// What a sign-in found before its password is checked.
    struct SignInAttempt: Sendable {
        let email: String
        /// The throttle key of the client's address, if the host named it.
        let address: String?
        /// The account, when the email has one.
        let userId: String?
        /// The hash to check against: the account's, or a decoy, so an unknown email costs the same.
        let passwordHash: String
        /// The account waits for its email to be proven, and `passwordHash` is the one its sign-up chose.
        var awaitsVerification = false
    }

    /// Signs in at once (verifying on this thread); the methods split it around the verification.
    func signIn(email: String, password: String, from address: String? = nil, now: Timestamp) throws(AuthError) -> SignedIn {
        let attempt = try beginSignIn(email: email, from: address, now: now)
        return try finishSignIn(attempt, passwordMatches: Passwords.verify(password, against: attempt.passwordHash), now: now)
    }

    /// Checks the throttle and finds the account. The attempt is stored as a failure until it succeeds,
    /// so attempts verified concurrently, on this kernel or another, cannot get past the limit. With an
    /// address, failures count per address (5) and for the email from everywhere (50); without, the
    /// email's 5 count wherever they came from.
    func beginSignIn(email: String, from address: String? = nil, now: Timestamp) throws(AuthError) -> SignInAttempt {
        let partition = Self.throttlePartition(email), ms = now.milliseconds
        func recent(_ user: String, _ key: String) throws(AuthError) -> [Int64] {
            Throttle.recent(try storage(try tables.throttle.get(user: user, key: key))?.failures ?? [], now: ms, window: Throttle.failureWindowMs)
        }
        func full(_ times: [Int64], _ limit: Int) -> Bool { Throttle.wait(times, limit: limit, now: ms, window: Throttle.failureWindowMs) != nil }
        var tx = Transaction()
        let total = try recent(partition, Self.throttleKey)
        if let address {
            let own = try recent(partition, "from:" + address), everywhere = try recent(Self.addressPartition(address), Self.throttleKey)
            let known = try storage(try tables.throttle.get(user: partition, key: "known:" + address)).map { ($0.until ?? 0) > ms } ?? false
            guard !full(own, Throttle.failuresPerAddress),
                  known || !full(everywhere, Throttle.failuresPerAddressAllEmails),
                  !Throttle.refusesByTotal(total: total, own: own, known: known, limit: Throttle.failuresAllAddresses, now: ms) else {
                throw .tooManyAttempts
            }
            tx.put(tables.throttle, user: partition, key: "from:" + address, ThrottleRow(failures: own + [ms]))
            tx.put(tables.throttle, user: Self.addressPartition(address), key: Self.throttleKey,
                   ThrottleRow(failures: everywhere.suffix(Throttle.failuresPerAddressAllEmails) + [ms]))
        } else if full(total, Throttle.failuresPerAddress) {
            throw .tooManyAttempts
        }
        tx.put(tables.throttle, user: partition, key: Self.throttleKey, ThrottleRow(failures: total.suffix(Throttle.failuresAllAddresses) + [ms]))
        try pruneThrottle(&tx, now: now)
        try commit(tx)
        let user = try owner(of: .email(email)).map { (id) throws(AuthError) in try account(id) } ?? nil
        if let user, user.awaitsVerification, let chosen = try pendingPassword(of: user.id, now: now) {
            return SignInAttempt(email: email, address: address, userId: user.id, passwordHash: chosen, awaitsVerification: true)
        }
        return SignInAttempt(email: email, address: address, userId: user?.id, passwordHash: user?.passwordHash ?? Passwords.decoy)
    }

    /// The password a waiting account's sign-up chose: its verification mail's, while it can be redeemed
    /// (a user holds at most one mail of each kind, so this reads at most three rows).
    private func pendingPassword(of user: String, now: Timestamp) throws(AuthError) -> String? {
        try storage(try tables.mail.rows(of: user)).first { MailTokens.usable($0.1, kind: .emailVerification, now: now.milliseconds) }?.1.passwordHash
    }

    /// Starts a session once the password matched, if the account is still there with the same password.
    func finishSignIn(_ attempt: SignInAttempt, passwordMatches: Bool, now: Timestamp) throws(AuthError) -> SignedIn {
        // Only who knows the password learns that the account waits for its email.
        if passwordMatches && attempt.awaitsVerification { throw .emailNotVerified }
        guard passwordMatches, let id = attempt.userId, let user = try account(id),
              user.passwordHash == attempt.passwordHash, user.email == attempt.email else { throw .invalidCredentials }
        var tx = Transaction()
        tx.delete(tables.throttle, user: Self.throttlePartition(attempt.email), key: Self.throttleKey)
        if let address = attempt.address {
            // The address is known to the account from now on: the total over every address never refuses it.
            let partition = Self.throttlePartition(attempt.email)
            tx.delete(tables.throttle, user: partition, key: "from:" + address)
            tx.put(tables.throttle, user: partition, key: "known:" + address,
                   ThrottleRow(failures: [now.milliseconds], until: now.milliseconds + Throttle.knownAddressMs))
        }
        let session = try startSession(user, &tx, now: now)
        try commit(tx)
        return session
    }

    /// The partition an email's failed sign-ins live in (no user id starts so).
    static func throttlePartition(_ email: String) -> String { "throttle:" + email }
    /// The partition an address's failed sign-ins over every email live in.
    static func addressPartition(_ address: String) -> String { "throttle-from:" + address }
    static let throttleKey = "failures"

    func refresh(_ token: String, now: Timestamp) throws(AuthError) -> SignedIn {
        guard let dot = token.firstIndex(of: "."), let userId = Identifiers.canonicalUUID(String(token[..<dot])),
              let row = try storage(try tables.refresh.get(user: userId, key: Self.digest(token))),
              let user = try account(userId),
              var session = try storage(try tables.sessions.get(user: userId, key: row.sessionId)), !session.revoked else {
            throw .invalidRefreshToken
        }
        var tx = Transaction()
        if row.spent {
            if let current = try reusedWithinInterval(token, row, userId: userId, now: now) {
                // A concurrent refresh (two tabs, a foreground and a background task): the session its
                // first use created, with a fresh access token, as GoTrue answers.
                let access = mint(sub: user.id, role: "authenticated", sessionId: row.sessionId, email: user.email,
                                  ttl: config.accessTokenTtlSeconds, now: now)
                return SignedIn(accessToken: access, expiresIn: config.accessTokenTtlSeconds, refreshToken: current, user: user)
            }
            // A spent token presented again has leaked: end the whole session (GoTrue's reuse detection).
            session.revoked = true
            tx.put(tables.sessions, user: userId, key: row.sessionId, session)
            try commit(tx)
            throw .refreshTokenReused
        }
        guard now.seconds <= row.expiresAt else { throw .refreshTokenExpired }
        let result = tokens(for: user, sessionId: row.sessionId, session: &session, &tx, now: now)
        tx.put(tables.sessions, user: userId, key: row.sessionId, session)
        var spent = row
        spent.spent = true
        spent.spentAt = now.milliseconds
        spent.next = config.refreshReuseIntervalSeconds > 0 ? Self.seal(result.refreshToken, with: token) : nil
        tx.put(tables.refresh, user: userId, key: Self.digest(token), spent)
        try commit(tx)
        return result
    }

    /// The session's current refresh token when `token` (spent) was exchanged within the reuse interval,
    /// following the chain while each link was too; nil when the reuse must revoke the session.
    private func reusedWithinInterval(_ token: String, _ row: RefreshRow, userId: String, now: Timestamp) throws(AuthError) -> String? {
        let interval = Int64(config.refreshReuseIntervalSeconds) * 1000
        var (token, row) = (token, row)
        for _ in 0..<16 {
            guard let spentAt = row.spentAt, now.milliseconds - spentAt <= interval, let sealed = row.next,
                  let next = Self.open(sealed, with: token),
                  let nextRow = try storage(try tables.refresh.get(user: userId, key: Self.digest(next))),
                  nextRow.sessionId == row.sessionId, now.seconds <= nextRow.expiresAt else { return nil }
            guard nextRow.spent else { return next }
            (token, row) = (next, nextRow)
        }
        return nil
    }

    /// `next` encrypted (AES-GCM) under a key derived from `token`.
    static func seal(_ next: String, with token: String) -> String? {
        guard let box = try? AES.GCM.seal(Array(next.utf8), using: sealingKey(token)), let combined = box.combined else { return nil }
        return Base64URL.encode(Array(combined))
    }

    static func open(_ sealed: String, with token: String) -> String? {
        guard let bytes = Base64URL.decode(Array(sealed.utf8)), let box = try? AES.GCM.SealedBox(combined: bytes),
              let plain = try? AES.GCM.open(box, using: sealingKey(token)) else { return nil }
        return String(decoding: plain, as: UTF8.self)
    }

    private static func sealingKey(_ token: String) -> SymmetricKey {
        SymmetricKey(data: SHA256.hash(data: Array(("healthkernel refresh chain\u{0}" + token).utf8)))
    }

    func signOut(_ identity: Identity, all: Bool) throws(AuthError) -> Int {
        guard let userId = identity.userId else { return 0 }
        var tx = Transaction()
        var revoked = 0
        let sessions = try storage(try tables.sessions.rows(of: userId))
        for (sid, var session) in sessions where !session.revoked && (all || sid == identity.sessionId) {
            session.revoked = true
            tx.put(tables.sessions, user: userId, key: sid, session)
            revoked += 1
        }
        try commit(tx)
        return revoked
    }

    /// The caller's account; a user known only from a trusted token gets theirs made now (the one commit
    /// of this request), if no write made it before.
    func user(_ identity: Identity, now: Timestamp) throws(AuthError) -> UserRow {
        guard let id = identity.userId else { throw .noSuchUser }
        if let user = try account(id) { return user }
        guard identity.needsAccount else { throw .noSuchUser }
        let user = Self.externalAccount(id, now: now)
        var tx = Transaction()
        tx.put(tables.users, user: id, key: Self.profileKey, user)
        try commit(tx)
        return user
    }

    func deleteUser(_ identity: Identity) throws(AuthError) {
        guard let id = identity.userId else { throw .noSuchUser }
        if !identity.needsAccount, try account(id) == nil { throw .noSuchUser }
        var tx = Transaction()
        tx.deleteUser(id)  // every row in the user's partition, in every domain's tables, and its unique keys
        try commit(tx)
        cache.removeAll(keepingCapacity: true)
    }

    // MARK: Identity providers

    /// What a verified id token proved.
    public struct ProvenIdentity: Sendable {
        let provider: String
        let subject: String
        let email: String?
    }

    /// The configured provider `name` and its keys, or `unknownProvider`.
    public func provider(_ name: String) throws(AuthError) -> (ProviderConfig, KeySource) {
        guard let provider = config.providers.first(where: { $0.name == name }), let keys = providerKeys[name] else {
            throw .unknownProvider
        }
        return (provider, keys)
    }

    /// Verifies an OpenID Connect id token from `provider`. May fetch the provider's keys when the token
    /// names one they lack: call it on a worker thread.
    public static func prove(_ idToken: String, provider: ProviderConfig, keys: KeySource, now: Timestamp) -> Result<ProvenIdentity, AuthError> {
        do {
            let claims = try verifyIDToken(idToken, provider: provider, keys: keys, now: now)
            return .success(ProvenIdentity(provider: provider.name, subject: claims.sub, email: claims.email))
        } catch {
            return .failure(.idTokenRejected(malformed: error.reason == "malformed_jws", detail: error.message))
        }
    }

    /// Verifies an OpenID Connect id token from `provider`, then finds or creates the linked account.
    func exchange(provider name: String, idToken: String, now: Timestamp) throws(AuthError) -> SignedIn {
        let (provider, keys) = try self.provider(name)
        return try exchange(try Self.prove(idToken, provider: provider, keys: keys, now: now).get(), now: now)
    }

    /// Finds or creates the account linked to a proven identity and signs it in (the linking rule of
    /// protocol/auth.md):
    /// - an identity already linked signs in its account (for `signedIn`, only if that is the account);
    /// - with `signedIn` (the caller's access token came along) the identity links to that account;
    /// - a verified email of an account whose email was proven links the identity to it;
    /// - a verified email of an account whose email was never proven (a password sign-up, which anyone
    ///   can make with anyone's address) is taken over: the identity gets a new account with the email,
    ///   and the old account loses the email, its unproven password and every session;
    /// - otherwise a new account.
    func exchange(_ proven: ProvenIdentity, signedIn: Identity? = nil, now: Timestamp) throws(AuthError) -> SignedIn {
        let signedInNeedsAccount = signedIn?.needsAccount ?? false
        let signedIn = signedIn?.userId
        let (name, claims) = (proven.provider, (sub: proven.subject, email: proven.email))
        let identity = UniqueKey.identity(name, claims.sub)
        var tx = Transaction()
        var user: UserRow
        if let linked = try owner(of: identity), let existing = try account(linked) {
            if let signedIn, signedIn != linked { throw .identityTaken }
            user = existing
        } else if let signedIn {
            guard var existing = try account(signedIn) ?? (signedInNeedsAccount ? Self.externalAccount(signedIn, now: now) : nil) else {
                throw .noSuchUser
            }
            if !existing.identities.contains(name) { existing.identities.append(name) }
            if let email = claims.email, existing.email == email { existing.emailProven = true }
            tx.put(tables.users, user: existing.id, key: Self.profileKey, existing)
            tx.claim(identity, for: existing.id)
            user = existing
        } else if let email = claims.email, let byEmail = try owner(of: .email(email)), var existing = try account(byEmail) {
            if existing.emailProven {
                if !existing.identities.contains(name) { existing.identities.append(name) }
                tx.put(tables.users, user: existing.id, key: Self.profileKey, existing)
                tx.claim(identity, for: existing.id)
                user = existing
            } else {
                existing.email = nil
                existing.passwordHash = nil
                existing.identities.removeAll { $0 == "password" }
                tx.put(tables.users, user: existing.id, key: Self.profileKey, existing)
                tx.release(.email(email), of: existing.id)
                for (sid, var session) in try storage(try tables.sessions.rows(of: existing.id)) where !session.revoked {
                    session.revoked = true
                    tx.put(tables.sessions, user: existing.id, key: sid, session)
                }
                user = UserRow(id: random.uuid(), email: email, createdAt: now.milliseconds, identities: [name], passwordHash: nil,
                               emailProven: true)
                tx.put(tables.users, user: user.id, key: Self.profileKey, user)
                tx.claim(identity, for: user.id)
                tx.claim(.email(email), for: user.id)
            }
        } else {
            user = UserRow(id: random.uuid(), email: claims.email, createdAt: now.milliseconds, identities: [name], passwordHash: nil,
                           emailProven: claims.email != nil)
            tx.put(tables.users, user: user.id, key: Self.profileKey, user)
            tx.claim(identity, for: user.id)
            if let email = claims.email { tx.claim(.email(email), for: user.id) }
        }
        let session = try startSession(user, &tx, now: now)
        try commit(tx)
        return session
    }

    /// The id token rules: signature by a key of the provider's JWKS, `iss` one of the provider's,
    /// `aud` one of the configured client ids (and Auth0's `azp` when several audiences are present),
    /// `exp`/`nbf`/`iat` with 60 s leeway, a `sub`. Returns the subject and the email when verified.
    static func verifyIDToken(_ token: String, provider: ProviderConfig, keys: KeySource, now: Timestamp)
        throws(TokenError) -> (sub: String, email: String?)
    {
        let jwt: JWT
        do {
            jwt = try JWT(token)
        } catch {
            throw TokenError(reason: "malformed_jws", message: error.message)
        }
        guard KeySet.asymmetric.contains(jwt.algorithm), let kid = jwt.keyID, let key = keys.key(kid) else {
            throw .invalid("no key of the provider matches the token")
        }
        try jwt.verify(with: key)
        _ = try jwt.checkTimes(now: now)
        guard let iss = try jwt.stringClaim("iss"), provider.issuers.contains(iss) else { throw .invalid("wrong issuer") }
        let audiences = try jwt.audiences()
        guard audiences.contains(where: provider.audiences.contains) else { throw .invalid("wrong audience") }
        if let azp = try jwt.stringClaim("azp") {
            guard provider.audiences.contains(azp) else { throw .invalid("wrong authorized party") }
        } else if provider.name == "auth0" && audiences.count > 1 {
            throw .invalid("azp is required when the token has several audiences")
        }
        guard let sub = try jwt.stringClaim("sub"), !sub.isEmpty, sub.utf8.count <= 255 else { throw .invalid("no subject") }
        // Apple sends email_verified as the string "true"; Google and Auth0 as a boolean.
        let verified = jwt.payload["email_verified"] == .bool(true) || jwt.payload["email_verified"] == .string("true")
        let email = verified ? (try jwt.stringClaim("email")).flatMap(normalizeEmail) : nil
        return (sub, email)
    }
}

extension AuthService {
    /// The id of the account with `email`, if any.
    public func userID(forEmail raw: String) throws(AuthError) -> String? {
        guard let email = Self.normalizeEmail(raw) else { return nil }
        return try owner(of: .email(email))
    }

    /// Moves the email and identity lookups of a data dir written before 0.2 (rows of `auth.index` in a
    /// shared `*` partition) into unique keys held by their users; lookups of users that no longer exist
    /// are dropped. Runs at every start; does nothing once a snapshot holds the moved keys.
    public func upgradeLegacyIndex() throws(AuthError) {
        var tx = Transaction()
        let rows = try storage(try tables.legacyIndex.rows(of: Self.legacyShared))
        for (key, row) in rows {
            tx.delete(tables.legacyIndex, user: Self.legacyShared, key: key)
            guard try account(row.userId) != nil else { continue }
            if key.hasPrefix("email:") {
                tx.claim(.email(String(key.dropFirst(6))), for: row.userId)
            } else if key.hasPrefix("identity:") {
                let rest = key.dropFirst(9)
                guard let colon = rest.firstIndex(of: ":") else { continue }
                tx.claim(.identity(String(rest[..<colon]), String(rest[rest.index(after: colon)...])), for: row.userId)
            }
        }
        if !tx.isEmpty { store.upgrade(tx) }
    }
}

extension UniqueKey {
    /// An account's email (normalised).
    static func email(_ email: String) -> UniqueKey { UniqueKey("auth.email", email) }
    /// Whether `value` is an `auth.email` key as the kernel claims it (a normalised address): what
    /// `store import` accepts, since sign-in looks keys up only in that form.
    public static func isEmailKey(_ value: String) -> Bool { AuthService.normalizeEmail(value) == value }
    /// A (provider, subject) identity of an OpenID Connect provider.
    static func identity(_ provider: String, _ subject: String) -> UniqueKey { UniqueKey("auth.identity", provider + ":" + subject) }
}

/// Signs access tokens with a secret, without a running kernel (the `token` command).
public struct TokenMinter {
    let key: VerificationKey
    let ttl: Int

    /// A minter for `secret` whose tokens live `ttl` seconds.
    public init(secret: [UInt8], ttl: Int) throws {
        key = VerificationKey.hmac(secret)
        self.ttl = ttl
    }

    /// A token for `sub` (a user id) with `role`; it carries no session, like a Supabase project's tokens.
    public func mint(sub: String?, role: String, now: Timestamp) -> String {
        AuthService.claims(sub: sub, role: role, sessionId: nil, email: nil, ttl: ttl, now: now, key: key)
    }

    /// A token with exactly `claims`, signed with the secret (the fuzz target signs what it is given, so
    /// that the claims checks behind the signature are reached).
    public func sign(_ claims: JSON) -> String { JWT.sign(claims: claims, with: key) }
}

// MARK: What the service answers

/// Why the service refuses a request; the method layer says it on the wire.
public enum AuthError: Error, Equatable {
    case emailTaken
    /// The provider identity is linked to another account than the one signed in.
    case identityTaken
    /// Too many failed sign-ins for this email lately.
    case tooManyAttempts
    /// Too many sign-ups from this address (or from requests naming none) in the last hour.
    case tooManySignUps(retryAfterMs: Int64)
    case invalidCredentials
    /// The password is right, but the account's email is not proven yet (`requireEmailVerification`).
    case emailNotVerified
    case invalidRefreshToken
    /// A spent refresh token came back: its session is now revoked.
    case refreshTokenReused
    case refreshTokenExpired
    case noSuchUser
    /// Not a provider of the configuration.
    case unknownProvider
    /// The provider's id token does not verify.
    case idTokenRejected(malformed: Bool, detail: String)
    /// A mail token that cannot be redeemed: unknown, of another kind, used, replaced or expired.
    case invalidMailToken
    /// Too many mail requests for this email or from this address lately.
    case tooManyMailRequests(retryAfterMs: Int64)
    /// Storage failed; nothing changed.
    case storage(StorageError)
}

/// A signed-in session: its tokens and its account.
public struct SignedIn: Sendable {
    let accessToken: String
    /// Seconds the access token lives.
    let expiresIn: Int
    let refreshToken: String
    let user: UserRow
}
