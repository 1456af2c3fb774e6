/// A value at most one user may hold at a time: an email, a provider identity, an App Store original
/// transaction id, a notification id. A transaction claims or releases it; deleting a user releases
/// every key the user holds.
public struct UniqueKey: Hashable, Sendable, CustomStringConvertible {
    /// What kind of value it is (`auth.email`); keys of different namespaces never clash.
    public let namespace: String
    public let value: String

    public init(_ namespace: String, _ value: String) {
        self.namespace = namespace
        self.value = value
    }

    /// The row key a store keeps it under: namespace, a NUL, the value.
    public var rowKey: String { namespace + "\u{0}" + value }

    public var description: String { "\(namespace) \(value)" }
}
