import Chrono
import DomainSupport
import JSON
import JSONRPC

// The wire forms of what the rewards service answers, each with its schema from one declaration.

/// Runs a service call and answers its result, or its refusal, on the wire.
func answer<T>(_ body: () throws(RewardsError) -> T) throws(RPCError) -> T {
    do { return try body() } catch { throw error.rpc }
}

extension BalanceRow: RPCResult {
    static let fields = ResultFields<BalanceRow>(
        ResultField("xp", Schema.count) { .int($0.xp) },
        ResultField("minutes", Schema.count) { .int($0.minutes) })
    public static var schema: JSON { fields.schema }
    /// `{xp, minutes}`.
    public var json: JSON { Self.fields.encode(self) }
}

extension UnlockRow: JSONEncodable {
    public var json: JSON { ["startsAt": .timestamp(startsAt), "endsAt": .timestamp(endsAt), "minutes": .int(minutes)] }
}

extension Unlock: RPCResult {
    static let fields = ResultFields<Unlock>(
        ResultField("startsAt", Schema.timestamp) { .timestamp($0.window.startsAt) },
        ResultField("endsAt", Schema.timestamp) { .timestamp($0.window.endsAt) },
        ResultField("balance", BalanceRow.schema) { $0.balance.json })
    public static var schema: JSON { fields.schema }
    public var json: JSON { Self.fields.encode(self) }
}
