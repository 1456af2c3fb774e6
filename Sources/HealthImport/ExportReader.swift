import CExpat
import JSON
#if canImport(Glibc)
import Glibc
#endif

/// Reads an Apple Health export as a stream: `export.xml`, or `export.zip` through `unzip -p` (Debian's
/// unzip), 1 MiB at a time through expat, handing each `Record` and `Workout` to `ExportMapping` as it
/// closes. Memory stays bounded whatever the file's size: one chunk, the element being read, and the
/// items mapped from one chunk (a few thousand) until `next` hands them on.
public final class ExportReader {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    private let file: UnsafeMutablePointer<FILE>
    private let piped: Bool
    private let parser: hk_xml_parser
    private var buffer = [UInt8](repeating: 0, count: 1 << 20)
    private var done = false
    /// Mapped items not yet handed on.
    private var ready: [ExportMapping.Mapped] = []
    /// The `Record` or `Workout` being read, with its children.
    private var open: (name: String, attributes: [String: String])?
    private var metadata: [(String, String)] = []
    private var statistics: [(type: String, sum: String, unit: String)] = []
    /// Elements seen that are not imported (`Correlation`, `ActivitySummary`, `ClinicalRecord`, ...), by name.
    public private(set) var otherElements: [String: Int] = [:]
    /// Bytes read so far (of the XML).
    public private(set) var bytesRead: Int64 = 0

    public init(path: String) throws {
        var error: UnsafePointer<CChar>?
        guard hk_expat_load(&error) == 1 else { throw Failure(description: error.map { String(cString: $0) } ?? "expat did not load") }
        if path.hasSuffix(".zip") {
            // The archive's export.xml only (it also holds export_cda.xml and routes).
            let quoted = "'" + path.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''") + "'"
            guard let pipe = popen("unzip -p -- \(quoted) '*/export.xml' 'export.xml' 2>/dev/null", "r") else {
                throw Failure(description: "cannot run unzip (Debian package unzip) to read \(path)")
            }
            (file, piped) = (pipe, true)
        } else {
            guard let f = fopen(path, "rb") else { throw Failure(description: "cannot open \(path): \(String(cString: strerror(errno)))") }
            (file, piped) = (f, false)
        }
        parser = hk_xml_create()
        hk_xml_set_handlers(parser, Unmanaged.passUnretained(self).toOpaque(), { user, name, attributes in
            guard let user, let name else { return }
            Unmanaged<ExportReader>.fromOpaque(user).takeUnretainedValue().start(name, attributes)
        }, { user, name in
            guard let user, let name else { return }
            Unmanaged<ExportReader>.fromOpaque(user).takeUnretainedValue().end(name)
        })
    }

    deinit {
        hk_xml_free(parser)
        if piped { pclose(file) } else { fclose(file) }
    }

    /// The next items mapped (at least one), or nil at the end of the file.
    public func next() throws -> [ExportMapping.Mapped]? {
        while ready.isEmpty && !done {
            let n = fread(&buffer, 1, buffer.count, file)
            bytesRead += Int64(n)
            let last = n < buffer.count
            let ok = buffer.withUnsafeBufferPointer { p in
                p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: n) { hk_xml_parse(parser, $0, Int32(n), last ? 1 : 0) }
            }
            if ok != 1 {
                var line: UInt = 0
                let message = hk_xml_error(parser, &line).map { String(cString: $0) } ?? "malformed XML"
                throw Failure(description: "not an Apple Health export: \(message) at line \(line)")
            }
            if last {
                done = true
                if bytesRead == 0 { throw Failure(description: piped ? "the archive holds no export.xml" : "the file is empty") }
            }
        }
        if ready.isEmpty { return nil }
        defer { ready.removeAll(keepingCapacity: true) }
        return ready
    }

    private func start(_ cName: UnsafePointer<CChar>, _ attributes: UnsafeMutablePointer<UnsafePointer<CChar>?>?) {
        let name = String(cString: cName)
        switch name {
        case "Record", "Workout":
            guard open == nil else { return } // a Record inside a Correlation also appears at the top level
            open = (name, Self.attributes(attributes))
            metadata = []
            statistics = []
        case "MetadataEntry":
            guard open != nil else { return }
            let a = Self.attributes(attributes)
            if let key = a["key"], let value = a["value"], metadata.count < 64 { metadata.append((key, value)) }
        case "WorkoutStatistics":
            let a = Self.attributes(attributes)
            if open?.name == "Workout", let type = a["type"], let sum = a["sum"] { statistics.append((type, sum, a["unit"] ?? "")) }
        case "HealthData", "ExportDate", "Me", "HeartRateVariabilityMetadataList", "InstantaneousBeatsPerMinute", "WorkoutEvent",
             "WorkoutRoute", "FileReference":
            return
        default:
            if open == nil { otherElements[name, default: 0] += 1 }
        }
    }

    private func end(_ cName: UnsafePointer<CChar>) {
        guard let current = open, strcmp(cName, current.name) == 0 else { return }
        open = nil
        ready.append(current.name == "Record"
            ? ExportMapping.record(current.attributes, metadata: metadata)
            : ExportMapping.workout(current.attributes, metadata: metadata, statistics: statistics))
    }

    private static func attributes(_ list: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> [String: String] {
        var out: [String: String] = [:]
        guard let list else { return out }
        var i = 0
        while let key = list[i], let value = list[i + 1] {
            out[String(cString: key)] = String(cString: value)
            i += 2
        }
        return out
    }
}
