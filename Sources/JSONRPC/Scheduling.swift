import Chrono
import JSON

/// Scheduling: whether a request runs now or waits in its stream behind earlier requests of the same
/// user (or behind a commit another stream's request of that user is applying), and its ordering keys.
extension Dispatcher {
    /// Answers a request now, or keeps it in `stream`: held while an earlier request it is ordered
    /// after is not applied, running while its slow part runs. `element` is its place in a batch.
    func place(_ request: Request, started: UInt64, element: Slot?, on stream: RequestStream, into out: inout [UInt8]) {
        guard case .success(let (method, params)) = request.target else {
            if case .failure(let error) = request.target {
                deliver(id: request.id, .failure(error), depends: nil, started: started, slot: element, on: stream, into: &out)
            }
            return
        }
        let id = request.id
        var keys: Set<String>? = []
        if method.readsState && (!stream.entries.isEmpty || method.slow || !inFlight.isEmpty) {
            keys = orderingKeys(method, params, stream.ordering)
            if stream.mustWait(keys) || waitsAcross(keys, stream) {
                let slot = element ?? stream.newSlot()
                stream.entries.append(Entry(ticket: stream.nextTicket(), id: id, slot: slot, keys: keys, started: started,
                                            state: .held(method, params)))
                return
            }
        }
        switch execute(method, params, on: stream) {
        case .answered(let outcome, let depends):
            deliver(id: id, outcome, depends: depends, started: started, slot: element, on: stream, into: &out)
        case .slow(let call):
            let entry = Entry(ticket: stream.nextTicket(), id: id, slot: element ?? stream.newSlot(), keys: keys, started: started,
                              state: .running(method, params, call))
            stream.entries.append(entry)
            run(entry, call, on: stream)
        }
    }

    /// The caller's user and the method's own keys; nil (ordered after everything before it) for a
    /// request of no user in read order. Reads no stored state: the token's signature and expiry only.
    func orderingKeys(_ method: RegisteredMethod, _ params: JSONObject, _ ordering: ResponseOrdering) -> Set<String>? {
        var keys = Set(method.orderingKeys(params))
        if method.auth != .none, case .string(let token)? = params["auth"],
           let user = authenticator.userOrdering(token: token, requirement: method.auth, now: clock.now()) {
            keys.insert("user:" + user)
        }
        return keys.isEmpty && ordering == .read ? nil : keys
    }

    /// Whether a request of `stream` with `keys` waits for a commit another stream's request of the same
    /// user is applying.
    func waitsAcross(_ keys: Set<String>?, _ stream: RequestStream) -> Bool {
        guard let journal else { return false }
        return inFlight.holds(keys, on: stream, journal)
    }

    /// Executes the held requests of `stream` nothing before them holds up any more, in read order.
    func release(_ stream: RequestStream, into out: inout [UInt8]) {
        var i = 0
        while i < stream.entries.count {
            let entry = stream.entries[i]
            guard case .held(let method, let params) = entry.state, !stream.mustWait(entry.keys, before: i),
                  !waitsAcross(entry.keys, stream) else {
                i += 1
                continue
            }
            switch execute(method, params, on: stream) {
            case .answered(let outcome, let depends):
                stream.entries.remove(at: i)
                deliver(id: entry.id, outcome, depends: depends, started: entry.started, slot: entry.slot, on: stream, into: &out)
            case .slow(let call):
                entry.state = .running(method, params, call)
                run(entry, call, on: stream)
                i += 1
            }
        }
    }
}
