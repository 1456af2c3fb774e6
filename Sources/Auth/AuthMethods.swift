import DomainSupport
import Chrono
import JSON
import JSONRPC

/// JSON Schemas shared by the auth methods.
// MARK: The wire form of what the service answers

extension AuthError {
    var rpc: RPCError {
        switch self {
        case .emailTaken: return .conflict("email_taken", "An account with this email already exists")
        case .identityTaken: return .conflict("identity_taken", "This identity is linked to another account; sign in with it, or unlink it there first")
        case .tooManyAttempts: return .rateLimited("Too many failed sign-ins for this email; try again later")
        case .tooManySignUps(let wait):
            return RPCError(code: .limited, message: "Too many sign-ups from this address; retry in \(wait) ms", reason: "rate_limited",
                            extra: [("retryAfterMs", .int(wait))])
        case .invalidCredentials: return .unauthorized("invalid_credentials", "Invalid login credentials")
        case .emailNotVerified:
            return .forbidden("email_not_verified", "The email is not verified yet: follow the link in the verification mail (signing up again sends a new one)")
        case .invalidRefreshToken: return .unauthorized("invalid_token", "The refresh token is not valid")
        case .refreshTokenReused: return .unauthorized("invalid_token", "The refresh token was already used; the session is revoked")
        case .refreshTokenExpired: return .unauthorized("expired_token", "The refresh token has expired")
        case .noSuchUser: return .notFound("No such user")
        case .unknownProvider: return .invalidParams("params.provider", reason: "out_of_range", "params.provider is not a configured provider")
        case .idTokenRejected(let malformed, let detail):
            return .verificationFailed(malformed ? "malformed_jws" : "invalid_signature", "The id token does not verify: \(detail)")
        case .invalidMailToken: return .unauthorized("invalid_token", "The token is not valid: unknown, used, replaced by a newer mail, or expired")
        case .tooManyMailRequests(let wait):
            return RPCError(code: .limited, message: "Too many mail requests for this email or from this address; retry in \(wait) ms", reason: "rate_limited",
                            extra: [("retryAfterMs", .int(wait))])
        case .storage(let error): return .from(error)
        }
    }
}

/// A service call whose refusal is answered on the wire.
func answerRPC<T>(_ body: @autoclosure () throws(AuthError) -> T) throws(RPCError) -> T {
    do { return try body() } catch { throw error.rpc }
}

extension UserRow: RPCResult {
    static let fields = ResultFields<UserRow>(
        ResultField("id", Schema.uuid) { .string($0.id) },
        ResultField("email", Schema.nullable(Schema.string)) { .optional($0.email) },
        ResultField("createdAt", Schema.timestamp) { .string(Timestamp(milliseconds: $0.createdAt).description) },
        ResultField("identities", Schema.array(Schema.string)) { .array($0.identities.map(JSON.string)) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

extension SignedIn: RPCResult {
    static let fields = ResultFields<SignedIn>(
        ResultField("accessToken", Schema.string) { .string($0.accessToken) },
        ResultField("tokenType", Schema.constant("bearer")) { _ in "bearer" },
        ResultField("expiresIn", Schema.integer(from: 1)) { .int(Int64($0.expiresIn)) },
        ResultField("refreshToken", Schema.string) { .string($0.refreshToken) },
        ResultField("user", UserRow.schema) { $0.user.json })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// `auth.signOut`'s answer: how many sessions ended.
public struct Revoked: RPCResult {
    let count: Int
    static let fields = ResultFields<Revoked>(ResultField("revoked", Schema.count) { .int(Int64($0.count)) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// `auth.deleteUser`'s answer.
public struct UserDeleted: RPCResult {
    static let fields = ResultFields<UserDeleted>(ResultField("deleted", Schema.constant(true)) { _ in true })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// The members several auth methods take, declared once.
enum AuthParams {
    /// An email address, as an account holds it (`AuthService.normalizeEmail`).
    static let email = required("email", String.self).schema(["maxLength": 254, "format": "email"]).checked { (raw, path) throws(FieldError) in
        guard AuthService.normalizeEmail(raw) != nil else {
            throw FieldError(field: path, reason: "invalid_params", message: "\(path) is not an email address")
        }
    }
    /// A new or given password.
    static let password = required("password", String.self).schema(["minLength": 8, "maxLength": 256]).checked { (password, path) throws(FieldError) in
        guard Passwords.acceptable(password) else { throw .outOfRange(path, "must be 8 to 256 characters") }
    }
    /// The end user's address, which the throttles count.
    static let clientAddress = optional("clientAddress", String.self).schema(["maxLength": 64])
        .described("the end user's IP address as the host saw it; set by the host, never taken from the end user")
        .checked { (raw, path) throws(FieldError) in
            guard let raw, Throttle.addressKey(raw) == nil else { return }
            throw FieldError(field: path, reason: "invalid_params", message: "\(path) is not an IPv4 or IPv6 address")
        }
}

public struct Credentials: RPCParams {
    public static let declaration = ParamList(AuthParams.email, AuthParams.password, AuthParams.clientAddress)
    /// Trimmed and lowercased.
    let email: String
    let password: String
    /// The throttle key of `clientAddress`.
    let address: String?
    public init(_ v: (String, String, String?)) {
        email = AuthService.normalizeEmail(v.0) ?? v.0
        password = v.1
        address = v.2.flatMap(Throttle.addressKey)
    }
}

extension Credentials {
    /// A sign-up and a later sign-in of the same email on one stream stay in read order.
    static func orderingKeys(_ params: JSONObject) -> [String] {
        guard case .string(let raw)? = params["email"], let email = AuthService.normalizeEmail(raw) else { return [] }
        return ["email:" + email]
    }
}

/// `auth.signUp`: the password is hashed on a worker thread.
public struct AuthSignUp: SlowRPCMethod {
    public static let name = "auth.signUp"
    public static let summary = "Creates an account with email and password and signs it in."
    public static let mutates = true
    public static let auth = AuthRequirement.none
    public static let errors = [ErrorDoc(.conflict, "email_taken (not under auth.requireEmailVerification)"),
                                ErrorDoc(.limited, "rate_limited: past auth.signUpsPerHourPerAddress (or WithoutAddress); under auth.requireEmailVerification also 3 an hour per email, 20 per address; data.retryAfterMs")]
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func orderingKeys(_ params: JSONObject) -> [String] { Credentials.orderingKeys(params) }
    public func start(_ p: Credentials, _ c: CallContext) throws(RPCError) -> SlowCall<SignUpAnswer> {
        try answerRPC(try service.beginSignUp(email: p.email, from: p.address, now: c.now))
        let (service, password) = (self.service, p.password)
        return SlowCall(work: { Passwords.hash(password, random: service.random) }) { (hash: String) throws(RPCError) -> SignUpAnswer in
            guard service.config.requireEmailVerification else {
                return .signedIn(try answerRPC(try service.finishSignUp(email: p.email, passwordHash: hash, now: c.now)))
            }
            try answerRPC(try service.finishSignUpByMail(email: p.email, passwordHash: hash, now: c.now))
            return .mailed
        }
    }
}

/// `auth.signUp`'s answer: the session, or under `auth.requireEmailVerification` `{accepted: true}`
/// whatever the email (the mail tells its owner what happened).
public enum SignUpAnswer: RPCResult {
    case signedIn(SignedIn)
    case mailed

    public static var schema: JSON { ["oneOf": [SignedIn.schema, AcceptedMail.schema]] }
    public var json: JSON {
        switch self {
        case .signedIn(let session): return session.json
        case .mailed: return AcceptedMail().json
        }
    }
}

/// `auth.signIn`: the password is verified on a worker thread.
public struct AuthSignIn: SlowRPCMethod {
    public static let name = "auth.signIn"
    public static let summary = "Signs in with email and password; 5 failures in 15 minutes per email and client address, 50 per email from addresses that failed, 30 per address over all emails are throttled."
    public static let mutates = true
    public static let auth = AuthRequirement.none
    public static let errors = [ErrorDoc(.unauthorized, "invalid_credentials"), ErrorDoc(.limited, "too_many_attempts")]
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func orderingKeys(_ params: JSONObject) -> [String] { Credentials.orderingKeys(params) }
    public func start(_ p: Credentials, _ c: CallContext) throws(RPCError) -> SlowCall<SignedIn> {
        let attempt = try answerRPC(try service.beginSignIn(email: p.email, from: p.address, now: c.now))
        let (service, password) = (self.service, p.password)
        return SlowCall(users: attempt.userId.map { [$0] } ?? [],
                        work: { Passwords.verify(password, against: attempt.passwordHash) }) { (matches: Bool) throws(RPCError) -> SignedIn in
            try answerRPC(try service.finishSignIn(attempt, passwordMatches: matches, now: c.now))
        }
    }
}

/// `auth.refresh`.
public struct AuthRefresh: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(
            required("refreshToken", String.self).schema(["maxLength": 512]).checked { (token, path) throws(FieldError) in
                guard token.utf8.count <= 512 else { throw .outOfRange(path, "is too long") }
            })
        let refreshToken: String
        public init(_ token: String) { refreshToken = token }
    }
    public static let name = "auth.refresh"
    public static let summary = "Exchanges a refresh token for a new session; the old token is spent, and reusing a spent one revokes the session."
    public static let mutates = true
    public static let auth = AuthRequirement.none
    public static let errors = [ErrorDoc(.unauthorized, "invalid_token, expired_token")]
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> SignedIn {
        try answerRPC(try service.refresh(p.refreshToken, now: c.now))
    }
}

/// `auth.signOut`.
public struct AuthSignOut: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(optional("scope", oneOf: ["current", "all"], default: "current"))
        let all: Bool
        public init(_ scope: String) { all = scope == "all" }
    }
    public static let name = "auth.signOut"
    public static let summary = "Ends the token's session, or every session of the user with scope all."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> Revoked {
        let identity = try c.requireIdentity()
        return Revoked(count: try answerRPC(try service.signOut(identity, all: p.all)))
    }
}

/// `auth.exchange`: the id token is verified on a worker thread, where fetching a provider's rotated
/// keys may wait on the network.
public struct AuthExchange: SlowRPCMethod {
    public struct Params: RPCParams {
        let provider: String
        let idToken: String
        public static let declaration = ParamList(
            required("provider", String.self).described("a provider named in the auth configuration"),
            required("idToken", String.self).described("the provider's OpenID Connect id token (a JWS)"))
        public init(_ v: (String, String)) { (provider, idToken) = v }
    }
    public static let name = "auth.exchange"
    public static let summary = "Signs in with an OpenID Connect id token from a configured provider (google, auth0, apple, ...); with a signed-in user's token in auth, links the identity to that account."
    public static let mutates = true
    /// With the access token of a signed-in user, the identity links to that account (explicit linking).
    public static let auth = AuthRequirement.optionalUser
    public static let errors = [ErrorDoc(.verificationFailed, "invalid_signature, malformed_jws"), ErrorDoc(.conflict, "identity_taken")]
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    /// None: the account is looked up when the verified token is applied, on the serving thread.
    public func orderingKeys(_ params: JSONObject) -> [String] { [] }
    public func start(_ p: Params, _ c: CallContext) throws(RPCError) -> SlowCall<SignedIn> {
        let (provider, keys) = try answerRPC(try service.provider(p.provider))
        let (service, token, now) = (self.service, p.idToken, c.now)
        return SlowCall(work: { AuthService.prove(token, provider: provider, keys: keys, now: now) }) {
            (proven: Swift.Result<AuthService.ProvenIdentity, AuthError>) throws(RPCError) -> SignedIn in
            try answerRPC(try service.exchange(try proven.get(), signedIn: c.identity, now: c.now))
        }
    }
}

/// `auth.user`.
public struct AuthUser: RPCMethod {
    public static let name = "auth.user"
    public static let summary = "The account the token belongs to."
    public static let mutates = false
    public static let auth = AuthRequirement.user
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> UserRow {
        let identity = try c.requireIdentity()
        return try answerRPC(try service.user(identity, now: c.now))
    }
}

/// `auth.deleteUser`.
public struct AuthDeleteUser: RPCMethod {
    public static let name = "auth.deleteUser"
    public static let summary = "Deletes the token's account and every record of it in every domain."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> UserDeleted {
        let identity = try c.requireIdentity()
        try answerRPC(try service.deleteUser(identity))
        return UserDeleted()
    }
}

/// Accounts, sign-in and tokens, as the kernel composes them. Not a `Domain` like the others, on purpose:
/// the kernel builds it first, because every other domain's context (its cursor secrets) and the
/// dispatcher (which checks every request's token) come from its service.
public struct AuthDomain {
    public let methods: [RegisteredMethod]

    public init(_ service: AuthService) {
        methods = [
            RegisteredMethod(AuthSignUp(service)),
            RegisteredMethod(AuthSignIn(service)),
            RegisteredMethod(AuthRefresh(service)),
            RegisteredMethod(AuthSignOut(service)),
            RegisteredMethod(AuthExchange(service)),
            RegisteredMethod(AuthUser(service)),
            RegisteredMethod(AuthDeleteUser(service)),
            RegisteredMethod(AuthRequestPasswordReset(service)),
            RegisteredMethod(AuthResetPassword(service)),
            RegisteredMethod(AuthRequestEmailVerification(service)),
            RegisteredMethod(AuthVerifyEmail(service)),
            RegisteredMethod(AuthMail(service)),
        ]
    }
}
