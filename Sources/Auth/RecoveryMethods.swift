import Chrono
import DomainSupport
import JSON
import JSONRPC

/// The params of a request that names an email (and, set by the host, the end user's address).
public struct MailRequest: RPCParams {
    public static let declaration = ParamList(AuthParams.email, AuthParams.clientAddress)
    let email: String
    let address: String?
    public init(_ v: (String, String?)) {
        email = AuthService.normalizeEmail(v.0) ?? v.0
        address = v.1.flatMap(Throttle.addressKey)
    }
}

/// A mail token's params.
public struct MailTokenParams: RPCParams {
    public static let declaration = ParamList(required("token", maxBytes: 512).described("the token of the mail the user received"))
    let token: String
    public init(_ token: String) { self.token = token }
}

/// `auth.requestPasswordReset`'s and `auth.requestEmailVerification`'s answer.
public struct MailRequested: RPCResult {
    let sent: Bool
    static let fields = ResultFields<MailRequested>(
        ResultField("accepted", Schema.constant(true)) { _ in true },
        ResultField("mailed", Schema.boolean) { .bool($0.sent) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// `auth.requestPasswordReset`: answers the same whether or not the email has an account.
public struct AuthRequestPasswordReset: RPCMethod {
    public static let name = "auth.requestPasswordReset"
    public static let summary = "Makes a password-reset mail (events.changed entity auth.mail, read with auth.mail) for the account of an email, if there is one; the same answer either way."
    public static let mutates = true
    public static let auth = AuthRequirement.none
    public static let errors = [ErrorDoc(.limited, "rate_limited: past 3 requests an hour per email or 20 per address; data.retryAfterMs")]
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func call(_ p: MailRequest, _ c: CallContext) throws(RPCError) -> AcceptedMail {
        try answerRPC(try service.requestPasswordReset(email: p.email, from: p.address, now: c.now))
        return AcceptedMail()
    }
}

/// The answer that tells nothing: `{accepted: true}`.
public struct AcceptedMail: RPCResult {
    static let fields = ResultFields<AcceptedMail>(ResultField("accepted", Schema.constant(true)) { _ in true })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}

/// `auth.requestEmailVerification`.
public struct AuthRequestEmailVerification: RPCMethod {
    public static let name = "auth.requestEmailVerification"
    public static let summary = "Makes an email-verification mail for the caller's account (events.changed entity auth.mail); mailed: false when the email is verified already or there is none."
    public static let mutates = true
    public static let auth = AuthRequirement.user
    public static let errors = [ErrorDoc(.limited, "rate_limited: past 3 requests an hour; data.retryAfterMs")]
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func call(_ p: NoParams, _ c: CallContext) throws(RPCError) -> MailRequested {
        let identity = try c.requireIdentity()
        return MailRequested(sent: try answerRPC(try service.requestEmailVerification(identity, now: c.now)))
    }
}

/// `auth.verifyEmail`.
public struct AuthVerifyEmail: RPCMethod {
    public static let name = "auth.verifyEmail"
    public static let summary = "Proves the account's email with the token of its verification mail; a token works once."
    public static let mutates = true
    public static let auth = AuthRequirement.none
    public static let errors = [ErrorDoc(.unauthorized, "invalid_token: unknown, used, replaced or expired")]
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func call(_ p: MailTokenParams, _ c: CallContext) throws(RPCError) -> UserRow {
        try answerRPC(try service.verifyEmail(token: p.token, now: c.now))
    }
}

/// `auth.resetPassword`: the new password is hashed on a worker thread.
public struct AuthResetPassword: SlowRPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(
            required("token", maxBytes: 512).described("the token of the password-reset mail"), AuthParams.password)
        let token: String
        let password: String
        public init(_ v: (String, String)) { (token, password) = v }
    }
    public static let name = "auth.resetPassword"
    public static let summary = "Sets a new password with the token of a password-reset mail (once) and ends every session of the account."
    public static let mutates = true
    public static let auth = AuthRequirement.none
    public static let errors = [ErrorDoc(.unauthorized, "invalid_token: unknown, used, replaced or expired")]
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func orderingKeys(_ params: JSONObject) -> [String] { [] }
    public func start(_ p: Params, _ c: CallContext) throws(RPCError) -> SlowCall<Revoked> {
        try answerRPC(try service.beginResetPassword(token: p.token, now: c.now))
        let (service, password) = (self.service, p.password)
        return SlowCall(work: { Passwords.hash(password, random: service.random) }) { (hash: String) throws(RPCError) -> Revoked in
            Revoked(count: try answerRPC(try service.finishResetPassword(token: p.token, passwordHash: hash, now: c.now)))
        }
    }
}

/// `auth.mail`: what the host sends.
public struct AuthMail: RPCMethod {
    public struct Params: RPCParams {
        public static let declaration = ParamList(
            required("userId", maxBytes: 200).described("the user of the events.changed notification (entity auth.mail)"),
            required("id", maxBytes: 64).described("its id"))
        let userId: String
        let id: String
        public init(_ v: (String, String)) { (userId, id) = v }
    }
    public static let name = "auth.mail"
    public static let summary = "A mail for the host to send (service token): kind, email, token and expiry; -32004 once used, replaced or expired."
    public static let mutates = false
    public static let auth = AuthRequirement.service
    public static let errors = [ErrorDoc(.notFound, "not_found: used, replaced or expired")]
    let service: AuthService
    public init(_ service: AuthService) { self.service = service }
    public func call(_ p: Params, _ c: CallContext) throws(RPCError) -> Mail {
        guard let mail = try answerRPC(try service.mail(user: p.userId, id: p.id, now: c.now)) else { throw RPCError.notFound("No such mail") }
        return mail
    }
}

extension Mail: RPCResult {
    static let fields = ResultFields<Mail>(
        ResultField("id", Schema.string) { .string($0.id) },
        ResultField("userId", Schema.string) { .string($0.userId) },
        ResultField("kind", Schema.oneOf(["password_reset", "email_verification", "account_exists"])) { .string($0.kind.rawValue) },
        ResultField("email", Schema.string) { .string($0.email) },
        ResultField("token", Schema.string) { .string($0.token) },
        ResultField("expiresAt", Schema.timestamp) { .string(Timestamp(milliseconds: $0.expiresAt).description) })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}
