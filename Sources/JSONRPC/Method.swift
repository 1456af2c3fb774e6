import Chrono
import JSON

/// Who may call a method.
public enum AuthRequirement: String, Sendable {
    /// Anyone; a token, if sent, is ignored.
    case none
    /// A valid user access token; the user is taken from it.
    case user
    /// A token whose `role` claim is `service_role`.
    case service
}

/// The caller, as established from the request's bearer token.
public struct Identity: Sendable, Equatable {
    /// The user the token speaks for; nil for a service token without `sub`.
    public let userId: String?
    /// The `role` claim: `authenticated` or `service_role`.
    public let role: String
    /// The kernel session the token belongs to (`sid`), for tokens the kernel issued.
    public let sessionId: String?

    /// An identity.
    public init(userId: String?, role: String, sessionId: String? = nil) {
        self.userId = userId
        self.role = role
        self.sessionId = sessionId
    }
}

/// Turns the token in `params.auth` into an identity, or refuses with -32001/-32003.
public protocol Authenticator: Sendable {
    /// The identity for `token` under `requirement`; nil only for `.none`.
    func authenticate(token: String?, requirement: AuthRequirement, now: Timestamp) throws(RPCError) -> Identity?
}

/// What a handler knows about the call besides its params.
public struct CallContext: Sendable {
    /// The caller; nil for methods that need no auth.
    public let identity: Identity?
    /// The instant the request is handled, from the kernel's one clock.
    public let now: Timestamp
    /// The registry the method was found in (rpc.discover describes it).
    public let registry: MethodRegistry

    /// The caller of a method that needs auth (the dispatcher has established it).
    public func requireIdentity() throws(RPCError) -> Identity {
        guard let identity else { throw RPCError.internalError }
        return identity
    }

    /// A context.
    public init(identity: Identity?, now: Timestamp, registry: MethodRegistry) {
        self.identity = identity
        self.now = now
        self.registry = registry
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

/// One JSON-RPC method: its wire name, params and result types, whether it writes, the auth it needs,
/// its OpenRPC description and its handler. Each is registered once in the composition root.
public protocol RPCMethod: Sendable {
    associatedtype Params: RPCParams
    associatedtype Result: JSONEncodable

    /// Wire name, `domain.verb`.
    static var name: String { get }
    /// One line for the OpenRPC document.
    static var summary: String { get }
    /// Whether a call changes stored state (its effects go through the store's log).
    static var mutates: Bool { get }
    /// Who may call it.
    static var auth: AuthRequirement { get }
    /// JSON Schema of the result, as JSON text.
    static var resultSchema: String { get }
    /// Errors specific to this method (generic ones are added from the other properties).
    static var errors: [ErrorDoc] { get }

    /// Handles one call.
    func call(_ params: Params, _ context: CallContext) throws(RPCError) -> Result
}

extension RPCMethod {
    public static var errors: [ErrorDoc] { [] }
}
