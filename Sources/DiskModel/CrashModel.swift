import Foundation
import Store

/// What a data dir would hold after a crash at any instant, as LazyFS models it: file data not yet
/// fsynced is lost (but for a prefix of the unsynced tail of the file written last, which the page
/// cache may have written back), and directory changes (creations, renames, removals) not yet made
/// durable by an fsync of the folder are undone. Fed every file operation before it runs, by the
/// store's fault injector. Used by the crash-point walk (every state, one by one) and the simulation
/// (one state at a power loss the seed picks).
public final class CrashModel: @unchecked Sendable {
    public enum Change {
        case created(String)
        /// A rename; over `to` it replaced what it held and how much of that was synced.
        case renamed(from: String, to: String, replaced: (Data, Int?)?)
        case removed(String, Data)
    }

    public let dir: String
    /// Bytes of each file known to be on the device (by its current name).
    private var synced: [String: Int] = [:]
    private var lastWritten: String?
    /// Directory changes since the folder was last synced, oldest first.
    private var pending: [Change] = []

    public init(dir: String) { self.dir = dir }

    /// Notes operation `op` on `name`, about to run.
    public func observe(_ op: FaultInjector.Operation, _ name: String) {
        switch op {
        case .create:
            pending.append(.created(name))
            synced[name] = 0
        case .write:
            lastWritten = name
        case .fsync:
            synced[name] = size(name)
        case .rename:
            let to = String(name.dropLast(".tmp".count))
            let replaced = FileManager.default.contents(atPath: dir + "/" + to).map { ($0, synced[to]) }
            pending.append(.renamed(from: name, to: to, replaced: replaced))
            synced[to] = synced.removeValue(forKey: name)
            if lastWritten == name { lastWritten = to }
        case .unlink:
            if let data = FileManager.default.contents(atPath: dir + "/" + name) { pending.append(.removed(name, data)) }
        case .truncate:
            break  // the size is read when an image is made
        case .fsyncDirectory:
            pending.removeAll()
        }
    }

    private func size(_ name: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: dir + "/" + name))?[.size] as? Int) ?? 0
    }

    /// How many unsynced bytes the last written file has now (what a crash may keep a prefix of).
    public var unsyncedTail: Int {
        guard let name = lastWritten, let durable = synced[name] else { return 0 }
        return max(0, size(name) - durable)
    }

    /// Writes into `image` (an empty folder) what a crash now leaves, keeping `keep` bytes of the last
    /// written file's unsynced tail.
    public func image(into image: String, keep: Int) throws {
        let fm = FileManager.default
        for name in try fm.contentsOfDirectory(atPath: dir) where name != "LOCK" && !name.hasSuffix(".lock") {
            try fm.copyItem(atPath: dir + "/" + name, toPath: image + "/" + name)
        }
        var sizes = synced
        for change in pending.reversed() {
            switch change {
            case .created(let name):
                try? fm.removeItem(atPath: image + "/" + name)
                sizes[name] = nil
            case .renamed(let from, let to, let replaced):
                // A rename is atomic: until the folder is synced, the name may still hold what it held.
                if fm.fileExists(atPath: image + "/" + to) { try fm.moveItem(atPath: image + "/" + to, toPath: image + "/" + from) }
                sizes[from] = sizes.removeValue(forKey: to)
                if let (data, durable) = replaced {
                    fm.createFile(atPath: image + "/" + to, contents: data)
                    sizes[to] = durable
                }
            case .removed(let name, let data):
                fm.createFile(atPath: image + "/" + name, contents: data)
            }
        }
        for (name, durable) in sizes {
            let path = image + "/" + name
            guard fm.fileExists(atPath: path) else { continue }
            let extra = name == lastWritten ? keep : 0
            let now = ((try? fm.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
            _ = truncate(path, off_t(min(durable + extra, now)))
        }
    }
}
