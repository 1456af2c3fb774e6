import JSON
import JSONParsing

/// A method with its types erased, as the dispatcher calls it. A class: every request carries its
/// method from the line reader through the dispatcher, and passing one reference costs one retain where
/// a copy of these members cost one each.
public final class RegisteredMethod: Sendable {
    public let name: String
    public let summary: String
    public let mutates: Bool
    public let auth: AuthRequirement
    /// OpenRPC content descriptors of the declared params (`auth` is added from `auth`).
    public let params: [JSON]
    /// The result's JSON Schema, as its type states it.
    public let resultSchema: JSON
    public let errors: [ErrorDoc]
    public let readsState: Bool
    /// Whether calls have a slow part for a worker thread.
    public let slow: Bool
    let invoke: @Sendable (inout ObjectReader, CallContext) throws(RPCError) -> Invocation
    /// The ordering keys a slow method reads from its raw params.
    let orderingKeys: @Sendable (JSONObject) -> [String]
    /// Names the rows a call will read (`RPCMethod.declareReads`); nil when they cannot be named ahead.
    let declareReads: (@Sendable (JSONObject, CallContext) -> Void)?

    /// What calling a method gave.
    enum Invocation {
        case done(JSON)
        case slow(SlowCall<JSON>)
    }

    private convenience init<M: RPCMethodDeclaration>(_ type: M.Type, slow: Bool, orderingKeys: @escaping @Sendable (JSONObject) -> [String],
                                          declareReads: (@Sendable (M.Params, CallContext) -> Void)? = nil,
                                          invoke: @escaping @Sendable (M.Params, CallContext) throws(RPCError) -> Invocation) {
        // The params are decoded again for the declaration (only on a store that reads ahead, where it
        // saves a round trip, about a thousand times what decoding an upload's params costs); params
        // that do not decode declare nothing, and the call answers -32602.
        let declaring = declareReads.map { declare in
            { @Sendable (params: JSONObject, context: CallContext) in
                var reader = ObjectReader(params, path: "params")
                _ = try? reader.optional("auth", as: String.self)
                guard let decoded = try? Self.decode(M.self, &reader) else { return }
                declare(decoded, context)
            }
        }
        self.init(M.self, slow: slow, orderingKeys: orderingKeys, declareReads: declaring) { (reader: inout ObjectReader, context: CallContext) throws(RPCError) -> Invocation in
            try invoke(try Self.decode(M.self, &reader), context)
        }
    }

    private init<M: RPCMethodDeclaration>(_ type: M.Type, slow: Bool, orderingKeys: @escaping @Sendable (JSONObject) -> [String],
                                          declareReads: (@Sendable (JSONObject, CallContext) -> Void)? = nil,
                                          reading: @escaping @Sendable (inout ObjectReader, CallContext) throws(RPCError) -> Invocation) {
        name = M.name
        summary = M.summary
        mutates = M.mutates
        auth = M.auth
        params = M.Params.declaration.descriptors
        resultSchema = M.Result.schema
        errors = M.errors
        readsState = M.readsState
        self.slow = slow
        self.orderingKeys = orderingKeys
        self.declareReads = declareReads
        invoke = reading
    }

    /// The params `reader` holds, checked as `M` declares them.
    private static func decode<M: RPCMethodDeclaration>(_ type: M.Type, _ reader: inout ObjectReader) throws(RPCError) -> M.Params {
        do throws(FieldError) {
            let values = try M.Params.declaration.decode(&reader)
            try reader.finish()
            return try M.Params(values)
        } catch {
            throw RPCError.invalidParams(error)
        }
    }

    /// Wraps `method`.
    public convenience init<M: RPCMethod>(_ method: M) {
        let declare: (@Sendable (M.Params, CallContext) -> Void)? = M.readsAhead ? { @Sendable (p: M.Params, c: CallContext) in method.declareReads(p, c) } : nil
        self.init(M.self, slow: false, orderingKeys: { _ in [] }, declareReads: declare) { (params: M.Params, context: CallContext) throws(RPCError) -> Invocation in
            .done(try method.call(params, context).json)
        }
    }

    /// Wraps a method whose params are read on a worker thread.
    public convenience init<M: BulkRPCMethod>(_ method: M) {
        self.init(M.self, slow: true, orderingKeys: { _ in [] }) { (reader: inout ObjectReader, context: CallContext) throws(RPCError) -> Invocation in
            let prepared = try method.prepare(context)
            let raw = reader
            let call = SlowCall(work: { () -> Swift.Result<M.Value, RPCError> in
                var reader = raw
                return Swift.Result { () throws(RPCError) in method.work(try Self.decode(M.self, &reader), prepared) }
            }) { (value: Swift.Result<M.Value, RPCError>) throws(RPCError) -> M.Result in
                try method.apply(try value.get(), prepared, context)
            }
            return .slow(call.erased())
        }
    }

    /// Wraps a method with a slow part.
    public convenience init<M: SlowRPCMethod>(_ method: M) {
        self.init(M.self, slow: true, orderingKeys: { method.orderingKeys($0) }) { (params, context) throws(RPCError) in
            .slow(try method.start(params, context).erased())
        }
    }
}

/// Why a set of methods cannot be served.
public struct RegistryError: Error, CustomStringConvertible {
    public let description: String
}

/// Every method the kernel serves, by wire name. Built once at start-up; a duplicate name is fatal.
public final class MethodRegistry: Sendable {
    /// Methods in registration order (the OpenRPC document keeps it).
    public let methods: [RegisteredMethod]
    private let index: [String: Int]
    private let info: JSON

    /// A registry; throws on a duplicate or malformed name. `info` is the OpenRPC `info` object.
    public init(_ methods: [RegisteredMethod], info: JSON) throws(RegistryError) {
        var index: [String: Int] = [:]
        for (i, m) in methods.enumerated() {
            guard index[m.name] == nil else { throw RegistryError(description: "method \(m.name) is registered twice") }
            guard m.name.split(separator: ".").count == 2 else {
                throw RegistryError(description: "method name \(m.name) is not domain.verb")
            }
            index[m.name] = i
        }
        self.methods = methods
        self.index = index
        self.info = info
    }

    /// The method called `name`.
    public func method(named name: String) -> RegisteredMethod? {
        index[name].map { methods[$0] }
    }

    /// The OpenRPC 1.3 document describing every registered method, built from the registry itself.
    public func openRPCDocument() throws -> JSON {
        var list: [JSON] = []
        for m in methods {
            var params: [JSON] = []
            if m.auth != .none {
                params.append([
                    "name": "auth", "required": .bool(m.auth != .optionalUser),
                    "description": .string(m.auth == .service ? "Bearer token whose role claim is service_role."
                        : m.auth == .optionalUser ? "Bearer access token of the user signed in, if any."
                        : m.auth == .userOrService ? "Bearer access token of the user, or a service_role token (then userId names the user)."
                        : "Bearer access token of the user."),
                    "schema": ["type": "string"],
                ])
            }
            params += m.params
            let errors = m.publishedErrors
            list.append([
                "name": .string(m.name),
                "summary": .string(m.summary),
                "paramStructure": "by-name",
                "params": .array(params),
                "result": ["name": "result", "schema": m.resultSchema],
                "errors": .array(errors.map { ["code": .int(Int64($0.code.rawValue)), "message": .string($0.message)] }),
                "x-mutates": .bool(m.mutates),
                "x-reads-ahead": .bool(m.declareReads != nil),
                "x-auth": .string(m.auth.rawValue),
            ])
        }
        return ["openrpc": "1.3.2", "info": info, "methods": .array(list)]
    }
}

extension RegisteredMethod {
    /// Every error the method can answer: what the dispatcher raises for its auth, params, rate limit
    /// and storage, around the method's own. `rpc.discover` and protocol/README.md publish this list.
    public var publishedErrors: [ErrorDoc] {
        var errors: [ErrorDoc] = []
        if auth != .none { errors.append(ErrorDoc(.unauthorized, "Unauthorized")) }
        if auth == .service { errors.append(ErrorDoc(.forbidden, "Forbidden: service_role required")) }
        if auth != .none || !params.isEmpty { errors.append(ErrorDoc(.invalidParams, "Invalid params")) }
        errors += self.errors
        // The dispatcher limits every user's requests (limits.requestsPerSecond); service tokens never.
        if auth == .user || auth == .optionalUser || auth == .userOrService { errors.append(ErrorDoc(.limited, "rate_limited: past limits.requestsPerSecond; data.retryAfterMs")) }
        if mutates { errors.append(ErrorDoc(.storageUnavailable, "Storage unavailable: the write was not applied")) }
        return errors
    }
}
