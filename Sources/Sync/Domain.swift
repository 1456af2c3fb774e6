import DomainSupport
import JSONRPC
import Storage

/// The per-user change feed as clients read it. It owns no tables: the feed is kept by the storage
/// beside every domain's synced rows, and shown through the renderers those domains registered.
public struct SyncDomain: Domain {
    public let methods: [RegisteredMethod]

    public static func tables(_ store: some Storage) {}

    public init(config: NoConfig, tables: Void, context: DomainContext) {
        let sync = SyncService(store: context.store, renderers: context.entities, cursorSecrets: context.cursorSecrets,
                               maxAnswerBytes: context.maxAnswerBytes)
        methods = [RegisteredMethod(SyncChanges(sync))]
    }
}
