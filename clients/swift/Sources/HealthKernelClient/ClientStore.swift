import Foundation

/// Where the client keeps what must outlive the app's process: the session (its tokens) and the sync
/// positions (HealthKit anchors, the change feed's cursor). On an iPhone, back it with the Keychain
/// (clients/swift/README.md shows one); `MemoryStore` keeps nothing past the process.
public protocol ClientStore: Sendable {
    func load(_ key: String) async throws -> Data?
    /// `nil` removes the key.
    func save(_ key: String, _ value: Data?) async throws
}

/// A `ClientStore` in memory: for tests, previews and apps that sign in at each launch.
public actor MemoryStore: ClientStore {
    private var values: [String: Data] = [:]

    public init() {}

    public func load(_ key: String) -> Data? { values[key] }

    public func save(_ key: String, _ value: Data?) { values[key] = value }
}

/// The keys the client writes: one place, so a store can tell its own keys from the client's.
enum StoreKey {
    static let session = "healthkernel.session"
    static func feedCursor(_ entities: [String]?) -> String {
        "healthkernel.feed.cursor" + (entities.map { "." + $0.sorted().joined(separator: ",") } ?? "")
    }
    static func healthAnchor(_ name: String) -> String { "healthkernel.healthkit.anchor." + name }
}
