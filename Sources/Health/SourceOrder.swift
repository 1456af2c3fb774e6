import DomainSupport
import JSON
import Storage

/// A source as merging sees it: where the items came from, and whether the person entered them by hand
/// (`HKWasUserEntered`), which ranks them apart from the rest of their source's items.
public struct SourceRef: Sendable, Hashable {
    public var origin: Origin
    public var enteredByHand: Bool

    public init(_ origin: Origin, enteredByHand: Bool = false) {
        self.origin = origin
        self.enteredByHand = enteredByHand
    }
}

/// One entry of a person's source order for a type (`health.setSourceOrder`): the fields it names must
/// all equal the source's; a field it leaves out matches anything.
public struct SourceMatcher: Sendable, Equatable {
    public var bundleId: String?
    public var name: String?
    public var deviceModel: String?

    public init(bundleId: String? = nil, name: String? = nil, deviceModel: String? = nil) {
        (self.bundleId, self.name, self.deviceModel) = (bundleId, name, deviceModel)
    }

    func matches(_ origin: Origin) -> Bool {
        (bundleId == nil || bundleId == origin.bundleId) && (name == nil || name == origin.sourceName)
            && (deviceModel == nil || deviceModel == origin.deviceModel)
    }
}

/// What ranks a type's sources for one user: their own order, if they set one, and when each
/// third-party source was first seen (newer ones rank higher, as in the Health app).
public struct SourceRanking: Sendable, Equatable {
    public var userOrder: [SourceMatcher]
    /// `HealthRules.sourceKey` -> epoch milliseconds of the ingest that first brought it.
    public var firstSeen: [String: Int64]

    public init(userOrder: [SourceMatcher] = [], firstSeen: [String: Int64] = [:]) {
        (self.userOrder, self.firstSeen) = (userOrder, firstSeen)
    }

    public static let standard = SourceRanking()
}

/// The tiers of Apple's default order (support article HT204351), highest first.
public enum SourceTier: Int, Sendable, Comparable {
    /// A source the person put in their own order for the type: above every default.
    case listed = 0
    /// Data the person entered by hand.
    case enteredByHand
    /// Apple Watch.
    case appleWatch
    /// iPhone and iPod touch.
    case appleDevice
    /// Other apps and Bluetooth devices.
    case thirdParty

    public static func < (a: SourceTier, b: SourceTier) -> Bool { a.rawValue < b.rawValue }
}

extension HealthRules {
    /// The name a source is known by across ingests: its bundle id, else its name.
    public static func sourceKey(_ origin: Origin) -> String { origin.bundleId ?? origin.sourceName ?? "" }

    /// Where a source stands in Apple's default order (the person's own order aside). Apple's devices
    /// write under a bundle id `com.apple.health.<device UUID>`; the Health app's own entries are
    /// `com.apple.Health`. An item that names no bundle id is placed by its device model (else its source
    /// name): `Watch`, then `iPhone` or `iPod`, as earlier kernels did; any other bundle id is an app,
    /// even one running on an Apple Watch.
    public static func defaultTier(_ ref: SourceRef) -> SourceTier {
        let o = ref.origin
        if ref.enteredByHand || o.bundleId == "com.apple.Health" { return .enteredByHand }
        if let bundle = o.bundleId, bundle != "com.apple.health", !bundle.hasPrefix("com.apple.health.") { return .thirdParty }
        let model = o.deviceModel ?? o.sourceName ?? ""
        if model.contains("Watch") { return .appleWatch }
        if model.contains("iPhone") || model.contains("iPod") { return .appleDevice }
        return o.bundleId == nil ? .thirdParty : .appleDevice
    }

    /// How a source ranks, as a key that sorts highest first: the person's order for the type (the
    /// first entry that matches), else Apple's default tiers, within the third-party tier the source
    /// first seen most recently first, then by name, bundle id, device name and model, so distinct
    /// sources never tie.
    public static func priority(_ ref: SourceRef, _ ranking: SourceRanking) -> [String] {
        let o = ref.origin
        var head: [String]
        if let listed = ranking.userOrder.firstIndex(where: { $0.matches(o) }) {
            head = [String(SourceTier.listed.rawValue), padded(Int64(listed))]
        } else {
            let tier = defaultTier(ref)
            let seen = tier == .thirdParty ? ranking.firstSeen[sourceKey(o)] ?? 0 : 0
            head = [String(tier.rawValue), padded(Int64.max - seen)]
        }
        return head + [ref.enteredByHand ? "0" : "1", o.sourceName ?? "", o.bundleId ?? "", o.deviceName ?? "", o.deviceModel ?? ""]
    }

    /// Ranks for `refs`: 0 for the highest priority, equal for the same source.
    public static func ranks(_ refs: [SourceRef], _ ranking: SourceRanking = .standard) -> [SourceRef: Int] {
        let distinct = Array(Set(refs)).map { ($0, priority($0, ranking)) }.sorted { $0.1.lexicographicallyPrecedes($1.1) }
        var out: [SourceRef: Int] = [:]
        for (i, r) in distinct.enumerated() { out[r.0] = i }
        return out
    }

    /// 19 digits, so numbers sort as text.
    private static func padded(_ n: Int64) -> String {
        let digits = String(max(n, 0))
        return String(repeating: "0", count: max(0, 19 - digits.count)) + digits
    }
}

/// When each third-party source of a type first reached a user (`health.sourcesSeen`, key: the type
/// identifier): the Health app ranks a newly added app above the apps before it. At most
/// `SourcesSeenRow.limit` sources a type; later ones are not recorded and rank as the oldest.
public struct SourcesSeenRow: StoredRow {
    public var firstSeen: [String: Int64]
    static let limit = 1000

    public init(firstSeen: [String: Int64]) { self.firstSeen = firstSeen }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "sources seen")
        var seen: [String: Int64] = [:]
        for (key, value) in f.object["firstSeen"]?.objectValue ?? JSONObject() {
            guard case .int(let ms) = value else { throw StorageError.corrupt("sources seen: not a time") }
            seen[key] = ms
        }
        firstSeen = seen
    }

    public var stored: JSON {
        ["firstSeen": .object(JSONObject(firstSeen.sorted { $0.key < $1.key }.map { ($0.key, JSON.int($0.value)) }))]
    }
}

extension SourceShare {
    /// Several days' shares as one period's: each source's values added (in thousandths, so a week's
    /// counted values still add up exactly to its figure), highest-ranked first as the days ranked them.
    static func combined(_ days: [[Int: [SourceShare]]]) -> [Int: [SourceShare]] {
        var out: [Int: [SourceShare]] = [:]
        for day in days {
            for (code, shares) in day {
                var list = out[code] ?? []
                for share in shares {
                    if let i = list.firstIndex(where: { $0.source == share.source }) {
                        list[i].counted = thousandths(list[i].counted + share.counted)
                        list[i].overridden = thousandths(list[i].overridden + share.overridden)
                    } else {
                        list.append(share)
                    }
                }
                out[code] = list
            }
        }
        return out
    }

    private static func thousandths(_ v: Double) -> Double { (v * 1000).rounded() / 1000 }
}

/// A person's order of a type's sources (`health.sourceOrder`, key: the type identifier; synced as
/// `health.sourceOrder`), as the Health app's Data Sources & Access keeps it: listed sources rank above
/// every default, in the listed order; sources not listed keep the default order below them.
public struct SourceOrderRow: StoredRow {
    public var sources: [SourceMatcher]
    /// Most entries a list may have.
    public static let limit = 100

    public init(sources: [SourceMatcher]) { self.sources = sources }

    public init(stored: JSON) throws(StorageError) {
        let f = try StoredFields(stored, "source order")
        var list: [SourceMatcher] = []
        for entry in f.object["sources"]?.arrayValue ?? [] {
            guard case .object(let o) = entry else { throw StorageError.corrupt("source order: an entry is not an object") }
            list.append(SourceMatcher(bundleId: o["bundleId"]?.stringValue, name: o["name"]?.stringValue, deviceModel: o["deviceModel"]?.stringValue))
        }
        sources = list
    }

    public var stored: JSON { ["sources": .array(sources.map(\.json))] }

    /// As `health.sourceOrder` and the feed show it.
    public func json(type: String) -> JSON { ["type": .string(type), "sources": .array(sources.map(\.json))] }
}

extension SourceMatcher {
    var json: JSON {
        var o = JSONObject()
        if let bundleId { o["bundleId"] = .string(bundleId) }
        if let name { o["name"] = .string(name) }
        if let deviceModel { o["deviceModel"] = .string(deviceModel) }
        return .object(o)
    }
}
