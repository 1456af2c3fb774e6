import Chrono
import DomainSupport
import JSON
import Auth
import JSONRPC
import Storage
import Store

/// `rpc.discover`: the OpenRPC document of every registered method.
struct RPCDiscover: RPCMethod {
    static let name = "rpc.discover"
    static let summary = "Returns the OpenRPC 1.3 document that describes every method of this kernel."
    static let mutates = false
    static let auth = AuthRequirement.none

    func call(_ params: NoParams, _ context: CallContext) throws(RPCError) -> OpenRPCDocument {
        do {
            return OpenRPCDocument(document: try context.registry.openRPCDocument())
        } catch {
            throw RPCError.internalError
        }
    }
}

/// `kernel.info`: identity, uptime, durability settings, record counts and request statistics.
struct KernelInfo: RPCMethod {
    static let name = "kernel.info"
    static let summary = "Describes the running kernel: version, uptime, durability, counts and request latencies."
    static let mutates = false
    static let auth = AuthRequirement.none

    let startedAt: Timestamp
    let stats: RequestStats
    let store: any KernelStore
    let auth: AuthService
    let sections: InfoSections

    func call(_ params: NoParams, _ context: CallContext) throws(RPCError) -> KernelInfoReport {
        KernelInfoReport(
            startedAt: startedAt, uptimeSeconds: max(0, context.now.seconds - startedAt.seconds),
            durability: store.durabilityInfo, store: store.storeInfo,
            users: try count { () throws(StorageError) in try auth.userCount() },
            records: try count { () throws(StorageError) in try store.recordCount() },
            requests: (stats.total, stats.errors, stats.retries, stats.percentile(0.5), stats.percentile(0.99)),
            sections: sections.byName.map { ($0.0, $0.1()) })
    }
}

/// A count for `kernel.info`, or -32050 when the store cannot give it.
private func count(_ body: () throws(StorageError) -> Int) throws(RPCError) -> Int {
    do { return try body() } catch { throw RPCError.from(error) }
}

/// `kernel.snapshot`: writes a snapshot now and answers once it is durable.
struct KernelSnapshot: RPCMethod {
    static let name = "kernel.snapshot"
    static let summary = "Writes a snapshot of all data now; answers once it is durable. Older log segments are then removed."
    static let auth = AuthRequirement.service
    static let mutates = false
    static let errors = [ErrorDoc(.storageUnavailable, "Storage unavailable (memory-only kernel, or the snapshot could not be written)")]

    let store: any KernelStore

    func call(_ params: NoParams, _ context: CallContext) throws(RPCError) -> SnapshotReport {
        do {
            return SnapshotReport(info: try store.takeSnapshot())
        } catch {
            throw RPCError.from(error)
        }
    }
}

/// `events.subscribe`: from the next batch on, an `events.changed` notification for every committed
/// change (of the topics named), written after the responses of the batch that made it durable.
struct EventsSubscribe: RPCMethod {
    struct Params: RPCParams {
        static let declaration = ParamList(
            optional("topics", strings: 1...50, maxBytes: 100)
                .described("entity names (screentime.day) or domains (screentime); omitted: every change"))
        let topics: [String]?
        init(_ topics: [String]?) { self.topics = topics }
    }
    static let name = "events.subscribe"
    static let summary = "Asks for an events.changed notification line for every committed change (filtered by topics: entity names or domain prefixes), written once the change is durable, after the responses of its batch."
    static let mutates = false
    static let auth = AuthRequirement.service

    let events: EventHub
    let store: any KernelStore

    func call(_ p: Params, _ context: CallContext) throws(RPCError) -> Subscribed {
        let horizon: UInt64
        do { horizon = try store.lastFeedPosition(of: nil) } catch { throw RPCError.from(error) }
        context.stream.events.subscribe(p.topics ?? [], afterCommit: store.lastCommitID, endsAt: context.identity?.expiresAt, now: context.now.seconds)
        store.collectsChanges = true
        return Subscribed(horizon: horizon, endsAt: context.stream.events.endsAtSeconds)
    }
}

/// `events.renew`: moves this stream's subscription's end to the expiry of a fresh service token, so
/// that a long-lived host keeps its events without a gap (and without subscribing again, which would
/// skip nothing but re-sets the horizon).
struct EventsRenew: RPCMethod {
    static let name = "events.renew"
    static let summary = "Moves this stream's events subscription's end to the expiry of the service token given (send it before events.ending's endsAt)."
    static let mutates = false
    static let auth = AuthRequirement.service
    static let errors = [ErrorDoc(.invalidParams, "not_subscribed: this stream has no events subscription (events.subscribe first, or again after events.ended)")]

    let events: EventHub

    func call(_ p: NoParams, _ context: CallContext) throws(RPCError) -> Subscribed {
        guard context.stream.events.renew(endsAt: context.identity?.expiresAt, now: context.now.seconds) else {
            throw RPCError.invalidParams("params", reason: "not_subscribed",
                                         "this stream has no events subscription: call events.subscribe (a subscription that ended must be made again)")
        }
        return Subscribed(horizon: nil, endsAt: context.stream.events.endsAtSeconds)
    }
}

/// `events.unsubscribe`: no more `events.changed` notifications on this stream.
struct EventsUnsubscribe: RPCMethod {
    static let name = "events.unsubscribe"
    static let summary = "Stops the events.changed notifications of this stream."
    static let mutates = false
    /// No token needed: it only stops this stream's own notifications, and a host whose service token
    /// expired must still be able to.
    static let auth = AuthRequirement.none

    let events: EventHub
    let store: any KernelStore

    func call(_ p: NoParams, _ context: CallContext) throws(RPCError) -> Unsubscribed {
        context.stream.events.unsubscribe()
        store.collectsChanges = events.anySubscribed
        return Unsubscribed()
    }
}

/// `kernel.setOrdering`: the order this stream's responses are written in, from the next request on.
struct KernelSetOrdering: RPCMethod {
    struct Params: RPCParams {
        static let declaration = ParamList(
            required("mode", oneOf: ResponseOrdering.allCases.map(\.rawValue))
                .described("read: in the order requests were read; completion: each as soon as it is done and durable"))
        let mode: ResponseOrdering
        init(_ mode: String) { self.mode = ResponseOrdering(rawValue: mode) ?? .read }
    }
    static let name = "kernel.setOrdering"
    static let summary = "Sets the order of this stream's responses from the next request on: read order (the default) or completion order, for hosts that match answers by id. Requests of one user are applied in read order either way."
    static let mutates = false
    static let auth = AuthRequirement.none
    static let readsState = false

    func call(_ p: Params, _ context: CallContext) throws(RPCError) -> OrderingSet {
        context.stream.ordering = p.mode
        return OrderingSet(mode: p.mode)
    }
}
