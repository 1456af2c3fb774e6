import Chrono
import JSON
import Threads

/// Who may call a method.
public enum AuthRequirement: String, Sendable {
    /// Anyone; a token, if sent, is ignored.
    case none
    /// A valid user access token; the user is taken from it.
    case user
    /// A token whose `role` claim is `service_role`.
    case service
    /// Anyone; a user access token, when sent, must be valid and says who is signed in (to link an
    /// identity to that account).
    case optionalUser
    /// A user's access token (the user is taken from it), or a `service_role` token, which names the
    /// user in params (`userId`): a backend catching up on a user's changes.
    case userOrService
}

/// The caller, as established from the request's bearer token.
public struct Identity: Sendable, Equatable {
    /// The user the token speaks for; nil for a service token without `sub`.
    public let userId: String?
    /// The `role` claim: `authenticated` or `service_role`.
    public let role: String
    /// The kernel session the token belongs to (`sid`), for tokens the kernel issued.
    public let sessionId: String?
    /// The last second the token is taken (its `exp` plus the clock-skew allowance), seconds since 1970:
    /// what it grants ends then (an events subscription too).
    public let expiresAt: Int64?
    /// A user known only from a trusted token (one the kernel did not issue) who has no account yet: a
    /// request of theirs that writes creates it first (`Authenticator.createAccount`); reads never do.
    /// For a request that does not write, the account is not looked up (a database round trip nothing
    /// would use): true for every such token, "may have none".
    public let needsAccount: Bool

    /// An identity.
    public init(userId: String?, role: String, sessionId: String? = nil, expiresAt: Int64? = nil, needsAccount: Bool = false) {
        self.userId = userId
        self.role = role
        self.sessionId = sessionId
        self.expiresAt = expiresAt
        self.needsAccount = needsAccount
    }
}

/// Turns the token in `params.auth` into an identity, or refuses with -32001/-32003.
public protocol Authenticator: Sendable {
    /// The identity for `token` under `requirement`, for a method that `writes` or not; nil only for `.none`.
    func authenticate(token: String?, requirement: AuthRequirement, writes: Bool, now: Timestamp) throws(RPCError) -> Identity?
    /// The user a token speaks for, from the token alone (signature and expiry), reading no stored state:
    /// what orders a request against others before it runs. A store read here could wait for the user's
    /// lock on the serving thread. nil when the token names nobody or is not valid.
    func userOrdering(token: String, requirement: AuthRequirement, now: Timestamp) -> String?
    /// Makes the account of `identity` (`needsAccount`) part of the running unit of work's next commit:
    /// the dispatcher calls it before a method that writes (`Storage.attachToUnit`).
    func createAccount(for identity: Identity, now: Timestamp) throws(RPCError)
    /// Names the rows `authenticate` will read for `token` (`Storage.prefetch`: its session, or the
    /// account a write checks) and returns the identity the token claims, from the token alone: what a
    /// method's `declareReads` is given. nil when the token names nobody or is not valid.
    func declareReads(token: String?, requirement: AuthRequirement, writes: Bool, now: Timestamp) -> Identity?
}

extension Authenticator {
    /// The identity for `token`, exact for a method that writes.
    public func authenticate(token: String?, requirement: AuthRequirement, now: Timestamp) throws(RPCError) -> Identity? {
        try authenticate(token: token, requirement: requirement, writes: true, now: now)
    }

    public func createAccount(for identity: Identity, now: Timestamp) throws(RPCError) {}

    public func declareReads(token: String?, requirement: AuthRequirement, writes: Bool, now: Timestamp) -> Identity? { nil }

    public func userOrdering(token: String, requirement: AuthRequirement, now: Timestamp) -> String? {
        (try? authenticate(token: token, requirement: requirement, now: now))??.userId
    }
}

/// What a handler knows about the call besides its params.
public struct CallContext: Sendable {
    /// The caller; nil for methods that need no auth.
    public let identity: Identity?
    /// The instant the request is handled, from the kernel's one clock.
    public let now: Timestamp
    /// The registry the method was found in (rpc.discover describes it).
    public let registry: MethodRegistry
    /// The stream the request came on (stdio, or one socket connection).
    public let stream: RequestStream

    /// The caller of a method that needs auth (the dispatcher has established it).
    public func requireIdentity() throws(RPCError) -> Identity {
        guard let identity else { throw RPCError.internalError }
        return identity
    }

    /// A context.
    public init(identity: Identity?, now: Timestamp, registry: MethodRegistry, stream: RequestStream) {
        self.identity = identity
        self.now = now
        self.registry = registry
        self.stream = stream
    }
}

/// A method's params: one declaration (`ParamList`) that reads every member with precise field paths
/// and describes it in the OpenRPC document, and the params built from the values it read.
public protocol RPCParams: Sendable {
    associatedtype Declaration: ParamDecoding
    /// The members, in order. Members not declared are rejected (`unknown_field`).
    static var declaration: Declaration { get }
    /// The params from the declared members' values; checks that involve several members go here.
    init(_ values: Declaration.Values) throws(FieldError)
}

/// The params of a method that takes none.
public struct NoParams: RPCParams {
    public static let declaration = ParamList()
    public init(_ values: ()) {}
}

/// A value with a JSON wire form.
public protocol JSONEncodable: Sendable {
    /// The wire form.
    var json: JSON { get }
}

extension JSON: JSONEncodable {
    public var json: JSON { self }
}

extension Optional: JSONEncodable where Wrapped: JSONEncodable {
    /// null for nil.
    public var json: JSON { map(\.json) ?? .null }
}

/// What every method declares: its wire name, params and result types, whether it writes, the auth it
/// needs and its OpenRPC description. A method is an `RPCMethod` (answered on the serving thread) or a
/// `SlowRPCMethod` (with a slow part on a worker thread); each is registered once in the composition root.
public protocol RPCMethodDeclaration: Sendable {
    associatedtype Params: RPCParams
    associatedtype Result: RPCResult

    /// Wire name, `domain.verb`.
    static var name: String { get }
    /// One line for the OpenRPC document.
    static var summary: String { get }
    /// Whether a call changes stored state (its effects go through the store's log).
    static var mutates: Bool { get }
    /// Who may call it.
    static var auth: AuthRequirement { get }
    /// Errors specific to this method (generic ones are added from the other properties).
    static var errors: [ErrorDoc] { get }
    /// Whether the answer depends on stored state. A method that does not (`kernel.setOrdering`) is
    /// answered when read even while earlier requests of its stream wait for slow work.
    static var readsState: Bool { get }
    /// Whether the rows a call reads follow from its params (`RPCMethod.declareReads` names them), so
    /// that a store across a network fetches them with every other request's of the batch in one
    /// round trip. False (the default): its reads cost round trips of their own (`x-reads-ahead`).
    static var readsAhead: Bool { get }
}

extension RPCMethodDeclaration {
    public static var errors: [ErrorDoc] { [] }
    public static var readsState: Bool { true }
    public static var readsAhead: Bool { false }
}

/// A method answered entirely on the serving thread.
public protocol RPCMethod: RPCMethodDeclaration {
    // Restated so that they are inferred from `call`.
    associatedtype Params
    associatedtype Result
    /// Handles one call.
    func call(_ params: Params, _ context: CallContext) throws(RPCError) -> Result
    /// Names the rows `call` will read, through the same prefetch `call` makes (`Storage.prefetch`),
    /// before any request of the batch runs (`readsAhead`). The identity is the token's, unchecked
    /// against stored sessions: a wrong guess costs a round trip, never a wrong answer.
    func declareReads(_ params: Params, _ context: CallContext)
}

extension RPCMethod {
    public func declareReads(_ params: Params, _ context: CallContext) {}
}

/// A method with a slow part (CPU-heavy, or waiting on the network) that must not hold up the requests
/// behind it: `start` runs on the serving thread and reads what the slow part needs, the slow part runs
/// on a worker thread without touching stored state, then its `apply` runs on the serving thread and
/// writes. Requests of the stream that share an ordering key with it wait for it.
public protocol SlowRPCMethod: RPCMethodDeclaration {
    associatedtype Params
    associatedtype Result
    /// Keys besides the caller's user (`user:<id>`) that order this call against the stream's other
    /// requests, read from the raw params before they are checked (`email:<address>` for a sign-in).
    func orderingKeys(_ params: JSONObject) -> [String]
    /// Reads what the slow part needs; throwing answers the call at once.
    func start(_ params: Params, _ context: CallContext) throws(RPCError) -> SlowCall<Result>
}

/// A method whose params can be large (a month of HealthKit samples: decoding them takes as long as
/// the work): `prepare` runs on the serving thread and takes what the work reads (say a view of the
/// user's rows), then the params are decoded on a worker thread and `work` runs there, then `apply`
/// runs on the serving thread and writes. Invalid params are answered -32602 as for any method, once the
/// worker has read them. Requests of the caller's user that the stream reads after it wait for it.
public protocol BulkRPCMethod: RPCMethodDeclaration {
    associatedtype Params
    associatedtype Result
    associatedtype Prepared: Sendable
    associatedtype Value: Sendable
    /// On the serving thread, before the params are read; throwing answers the call at once.
    func prepare(_ context: CallContext) throws(RPCError) -> Prepared
    /// On a worker thread: must not touch stored state except through what `prepare` took.
    func work(_ params: Params, _ prepared: Prepared) -> Value
    /// On the serving thread, with the state as it is then.
    func apply(_ value: Value, _ prepared: Prepared, _ context: CallContext) throws(RPCError) -> Result
}

/// The rest of a slow call: `work` for a worker thread, then `apply` on the serving thread with its value.
public struct SlowCall<Result> {
    /// Users the call turned out to touch (found by `start`): later requests of theirs wait for it.
    let users: [String]
    let work: @Sendable () -> any Sendable
    let apply: (any Sendable) throws(RPCError) -> Result

    /// `work` must not touch stored state: the serving thread keeps changing it meanwhile. `apply` sees the
    /// state as it is then, so it re-checks whatever `start` read.
    public init<Value: Sendable>(users: [String] = [], work: @escaping @Sendable () -> Value,
                                 apply: @escaping (Value) throws(RPCError) -> Result) {
        self.users = users
        // The value crosses from the worker to the serving thread in a slot of its own type, so nothing
        // is cast back from `any Sendable`.
        let slot = Locked<Value?>(nil)
        self.work = { slot.withLock { $0 = work() } }
        self.apply = { (_: any Sendable) throws(RPCError) -> Result in
            guard let value = slot.withLock({ $0 }) else { throw RPCError.internalError }
            return try apply(value)
        }
    }

    /// The same call, running `before` first when its result is applied (in that unit of work).
    func first(_ before: @escaping () throws(RPCError) -> Void) -> SlowCall {
        let apply = self.apply
        return SlowCall(users: users, work: work, apply: { (v: any Sendable) throws(RPCError) -> Result in
            try before()
            return try apply(v)
        })
    }

    func erased() -> SlowCall<JSON> where Result: JSONEncodable {
        let apply = self.apply
        return SlowCall<JSON>(users: users, work: work, apply: { (v: any Sendable) throws(RPCError) -> JSON in try apply(v).json })
    }

    private init(users: [String], work: @escaping @Sendable () -> any Sendable, apply: @escaping (any Sendable) throws(RPCError) -> Result) {
        self.users = users
        self.work = work
        self.apply = apply
    }
}
