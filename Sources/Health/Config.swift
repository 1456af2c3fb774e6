import DomainSupport
import JSON

/// What `health.ingest` does with a sample of a type the kernel's table lacks (a newer iOS's).
public enum UnknownTypePolicy: String, Sendable, CaseIterable {
    /// Stored as sent, synced, exported and deletable, not summarised; counted in `unsummarized`.
    case keep
    /// Left out (nothing stored), counted in `skipped`; the rest of the request goes ahead.
    case skip
    /// The request is refused, -32602 on the sample's `type`.
    case refuse
}

/// The `health` configuration section (its keys are rows of the kernel's settings table).
public struct HealthConfig: Sendable, Equatable {
    public var unknownTypes: UnknownTypePolicy = .keep
    /// How far back (days before the kernel's clock) an item may start; 0: no bound. A deployment that
    /// keeps only recent history (iOS 27 lets a person share only recent data) refuses older items
    /// clearly instead of storing what it will not keep.
    public var maxHistoryDays: Int64 = 0
    public static let historyDays: ClosedRange<Int64> = 0...36_500
    public init() {}
}

extension HealthConfig: DomainConfig {
    /// Read through the kernel's settings table (`health.unknownTypes`, `health.maxHistoryDays`).
    public static var sections: [String] { [] }
    public mutating func read(section name: String, _ reader: inout ObjectReader, files: ConfigFiles) throws(FieldError) {}
}
