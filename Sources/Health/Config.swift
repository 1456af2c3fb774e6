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

/// The `health` configuration section.
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
    public static var sections: [String] { ["health"] }

    /// Reads `health: {unknownTypes}`.
    public mutating func read(section name: String, _ reader: inout ObjectReader, files: ConfigFiles) throws(FieldError) {
        if let v: String = try reader.optional("unknownTypes") {
            guard let policy = UnknownTypePolicy(rawValue: v) else {
                throw .outOfRange(reader.path("unknownTypes"), "must be one of \(UnknownTypePolicy.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            unknownTypes = policy
        }
        if let v = try reader.optional("maxHistoryDays", in: Self.historyDays) { maxHistoryDays = v }
        try reader.finish()
    }

    /// `HEALTHKERNEL_HEALTH_UNKNOWN_TYPES` and `HEALTHKERNEL_HEALTH_MAX_HISTORY_DAYS` override the file.
    public mutating func read(environment: [String: String], readFile: (String) -> [UInt8]?) throws(FieldError) {
        if let v = environment["HEALTHKERNEL_HEALTH_MAX_HISTORY_DAYS"] {
            guard let days = Int64(v), Self.historyDays.contains(days) else {
                throw .outOfRange("HEALTHKERNEL_HEALTH_MAX_HISTORY_DAYS", "must be a whole number from 0 to 36500")
            }
            maxHistoryDays = days
        }
        guard let v = environment["HEALTHKERNEL_HEALTH_UNKNOWN_TYPES"] else { return }
        guard let policy = UnknownTypePolicy(rawValue: v) else {
            throw .outOfRange("HEALTHKERNEL_HEALTH_UNKNOWN_TYPES", "must be one of \(UnknownTypePolicy.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        unknownTypes = policy
    }
}
