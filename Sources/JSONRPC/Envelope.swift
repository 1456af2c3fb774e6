import Chrono
import JSON
import Threads

/// The JSON-RPC envelope of one request: its id, version, method and params, checked before anything
/// runs.
extension Dispatcher {
    static let envelopeKeys: Set<String> = ["jsonrpc", "id", "method", "params"]

    /// Answers a request now, or keeps it in the stream: held while an earlier request it is ordered
    /// after is not applied, running while its slow part runs. `element` is its place in a batch.
    func place(_ request: JSON, started: UInt64, element: Slot?, into out: inout [UInt8]) {
        let stream = current
        let (id, target) = envelope(request)
        guard case .success(let (method, params)) = target else {
            if case .failure(let error) = target { deliver(id: id, .failure(error), depends: nil, started: started, slot: element, into: &out) }
            return
        }
        var keys: Set<String>? = []
        if method.readsState && (!stream.entries.isEmpty || method.slow || !applying.isEmpty) {
            keys = orderingKeys(method, params)
            if stream.mustWait(keys) || waitsAcross(keys, stream) {
                let slot = element ?? newSlot()
                stream.entries.append(Entry(ticket: nextTicket(), id: id, slot: slot, keys: keys, started: started,
                                            state: .held(method, params)))
                return
            }
        }
        switch execute(method, params) {
        case .answered(let outcome, let depends):
            deliver(id: id, outcome, depends: depends, started: started, slot: element, into: &out)
        case .slow(let call):
            let entry = Entry(ticket: nextTicket(), id: id, slot: element ?? newSlot(), keys: keys, started: started,
                              state: .running(method, params, call))
            stream.entries.append(entry)
            run(entry, call)
        }
    }

    /// The response id (nil for a notification), and the method and params to call or why not.
    func envelope(_ request: JSON) -> (JSON?, Result<(RegisteredMethod, JSONObject), RPCError>) {
        guard case .object(let envelope) = request else {
            return (.null, .failure(.invalidRequest("a request must be an object")))
        }
        let rawID = envelope["id"]
        var responseID: JSON? = nil
        if let rawID {
            switch rawID {
            // An id the kernel could not echo exactly: NaN, an infinity, an integer beyond 64 bits.
            case .double(let d) where !d.isFinite || (d.rounded() == d && d.magnitude >= 0x1p63):
                return (.null, .failure(.invalidRequest("id must be a string, null, a 64-bit integer or a finite number")))
            case .string, .int, .double, .null: responseID = rawID
            default: return (.null, .failure(.invalidRequest("id must be a string, a number or null")))
            }
        }
        let replyID = responseID ?? .null
        guard envelope["jsonrpc"] == .string("2.0") else {
            return (replyID, .failure(.invalidRequest("jsonrpc must be \"2.0\"")))
        }
        guard case .string(let name)? = envelope["method"] else {
            return (replyID, .failure(.invalidRequest("method must be a string")))
        }
        if let extra = envelope.members.first(where: { !Self.envelopeKeys.contains($0.key) })?.key {
            return (replyID, .failure(.invalidRequest("unknown member \"\(extra)\" in the request")))
        }
        var params = JSONObject()
        switch envelope["params"] {
        case nil: break
        case .object(let o)?: params = o
        case .array(let a)? where a.isEmpty: break
        case .array?:
            return (responseID, .failure(.invalidParams("params", reason: "wrong_type",
                                                       "params must be an object: methods take named params")))
        default:
            return (replyID, .failure(.invalidRequest("params must be an object or an array")))
        }
        guard let method = registry.method(named: name) else {
            return (responseID, .failure(.methodNotFound(name)))
        }
        return (responseID, .success((method, params)))
    }
}
