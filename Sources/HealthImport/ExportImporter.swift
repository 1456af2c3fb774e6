import Chrono
import Health
import JSON
import JSONRPC

/// What an import did: items sent and what the kernel made of them, and what was left out and why.
public struct ImportSummary: Sendable {
    public var imported: [String: Int] = ["samples": 0, "sleep": 0, "workouts": 0]
    public var unchanged = 0
    public var superseded = 0
    /// Items left out, by reason (an unsupported record type, a value the kernel refuses, ...).
    public var skipped: [String: Int] = [:]
    /// Elements that are not samples, sleep or workouts (`Correlation`, `ActivitySummary`, ...), by name.
    public var notImported: [String: Int] = [:]
    public var batches = 0
    public var bytes: Int64 = 0
    public var seconds = 0.0

    public var json: JSON {
        let counts = { (d: [String: Int]) in JSON.object(JSONObject(d.sorted { $0.key < $1.key }.map { ($0.key, JSON.int(Int64($0.value))) })) }
        return ["imported": counts(imported), "unchanged": .int(Int64(unchanged)), "superseded": .int(Int64(superseded)),
                "skipped": counts(skipped), "notImported": counts(notImported), "batches": .int(Int64(batches)),
                "bytes": .int(bytes), "seconds": .double((seconds * 10).rounded() / 10)]
    }
}

/// Imports an Apple Health export for one user through `health.ingest`, in batches, so that every rule
/// of an ingest applies (validation, the user's quota, the merge, the feed): `send` carries one batch's
/// params (without `auth`) to the kernel and answers its response. Each item is checked before it joins
/// a batch, so one bad record is skipped (and counted) rather than refusing its batch.
public struct ExportImporter {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    let send: (JSONObject) -> JSON
    let timezone: String?
    let batchSize: Int
    let now: Timestamp
    let progress: (String) -> Void
    let clock: () -> UInt64

    public init(timezone: String?, batchSize: Int = 5_000, now: Timestamp, progress: @escaping (String) -> Void,
                clock: @escaping () -> UInt64, send: @escaping (JSONObject) -> JSON) {
        (self.timezone, self.batchSize, self.now, self.progress, self.clock, self.send) = (timezone, batchSize, now, progress, clock, send)
    }

    public func run(path: String) throws -> ImportSummary {
        let began = clock()
        let reader = try ExportReader(path: path)
        var summary = ImportSummary()
        var batch: [(kind: String, item: JSONObject)] = []
        var inBatch = Set<String>()
        var nextReport: Int64 = 64 << 20
        let latest = now.milliseconds + 86_400_000
        func flush() throws {
            guard !batch.isEmpty else { return }
            var params = JSONObject()
            if let timezone { params["timezone"] = .string(timezone) }
            for kind in ["samples", "sleep", "workouts"] {
                let items = batch.filter { $0.kind == kind }.map { JSON.object($0.item) }
                if !items.isEmpty { params[kind] = .array(items) }
            }
            let response = send(params)
            guard let result = response["result"] else {
                let error = response["error"] ?? response
                throw Failure(description: "health.ingest refused batch \(summary.batches + 1): \(error.serialized) (the batches before it were imported; running the import again continues)")
            }
            for kind in ["samples", "sleep", "workouts"] { summary.imported[kind, default: 0] += Int(result["accepted"]?[kind]?.intValue ?? 0) }
            summary.unchanged += Int(result["unchanged"]?.intValue ?? 0)
            summary.superseded += Int(result["superseded"]?.intValue ?? 0)
            summary.batches += 1
            batch.removeAll(keepingCapacity: true)
            inBatch.removeAll(keepingCapacity: true)
        }
        while let mapped = try reader.next() {
            for m in mapped {
                let (kind, item): (String, JSONObject)
                switch m {
                case .sample(let o): (kind, item) = ("samples", o)
                case .sleep(let o): (kind, item) = ("sleep", o)
                case .workout(let o): (kind, item) = ("workouts", o)
                case .skipped(let reason):
                    summary.skipped[reason, default: 0] += 1
                    continue
                }
                if let problem = Self.check(kind, item, latest: latest) {
                    summary.skipped[problem, default: 0] += 1
                    continue
                }
                // A copy of an item already in this batch (the same content, so the same UUID).
                guard let uuid = item["uuid"]?.stringValue, inBatch.insert(uuid).inserted else { continue }
                batch.append((kind, item))
                if batch.count >= batchSize { try flush() }
            }
            if reader.bytesRead >= nextReport {
                progress("health import-export: \(reader.bytesRead >> 20) MiB read, \(summary.batches) batches sent")
                nextReport += 64 << 20
            }
        }
        try flush()
        summary.notImported = reader.otherElements
        summary.bytes = reader.bytesRead
        summary.seconds = Double(clock() - began) / 1_000_000
        return summary
    }

    /// Why `item` would refuse its batch (as `health.ingest` reads it), or nil: the reason, with the member
    /// it concerns, is the key the summary counts under.
    static func check(_ kind: String, _ item: JSONObject, latest: Int64) -> String? {
        let path = "item"
        do {
            switch kind {
            case "samples": _ = try SampleInput.decode(.object(item), at: path)
            case "sleep": _ = try SleepInput.decode(.object(item), at: path)
            default: _ = try WorkoutInput.decode(.object(item), at: path)
            }
        } catch {
            let type = item["type"]?.stringValue ?? item["activityType"]?.stringValue ?? kind
            return "\(type): \(error.reason) \(error.field.dropFirst(path.count + 1))"
        }
        if let end = item["end"]?.stringValue.flatMap(Timestamp.init(rfc3339:)), end.milliseconds > latest { return "\(kind): ends in the future" }
        return nil
    }
}
