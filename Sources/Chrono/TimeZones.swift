#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Threads

/// IANA time zones: read from the system's tz database (`/usr/share/zoneinfo`, see `TZif`). Only
/// local-day arithmetic uses this; stored times are always UTC.
public struct Zone: Sendable, Equatable {
    /// The IANA name, e.g. `America/Los_Angeles`.
    public let identifier: String
    private let zone: TZif

    /// Where the system keeps its tz database.
    static let databasePath = "/usr/share/zoneinfo/"

    /// The zone named `identifier`, or nil when the system's tz database has no such zone.
    public init?(_ identifier: String) {
        let bytes = Array(identifier.utf8)
        guard (1...64).contains(bytes.count), bytes.first != UInt8(ascii: "/"), !identifier.contains(".."),
              bytes.allSatisfy({ c in
                  (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39)
                      || c == UInt8(ascii: "/") || c == UInt8(ascii: "_") || c == UInt8(ascii: "-") || c == UInt8(ascii: "+")
              }),
              let bytes = Self.read(Self.databasePath + identifier), let zone = TZif(bytes) else { return nil }
        self.identifier = identifier
        self.zone = zone
    }

    /// The zone named `identifier`, remembered after the first lookup: validating reads and parses the
    /// tz file, far too slow to repeat on every request.
    public static func named(_ identifier: String) -> Zone? {
        if let hit = cache.withLock({ $0[identifier] }) { return hit }
        guard let zone = Zone(identifier) else { return nil }
        cache.withLock { if $0.count < 1024 { $0[identifier] = zone } }
        return zone
    }

    private static let cache = ZoneCache()

    /// UTC.
    public static let utc = Zone("UTC") ?? Zone(unchecked: "UTC")

    private init(unchecked identifier: String) {
        self.identifier = identifier
        self.zone = TZif(fixed: 0)
    }

    /// The bytes of the tz file at `path` (a tz file is a few KB; more than 1 MB is not one).
    static func read(_ path: String) -> [UInt8]? {
        guard let f = fopen(path, "rb") else { return nil }
        defer { fclose(f) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while bytes.count <= 1 << 20 {
            let n = fread(&chunk, 1, chunk.count, f)
            if n <= 0 { break }
            bytes += chunk[..<n]
        }
        return bytes.count <= 1 << 20 ? bytes : nil
    }

    /// Seconds east of UTC at `instant`.
    public func offsetSeconds(at instant: Timestamp) -> Int {
        let ms = instant.milliseconds
        return zone.offset(at: ms >= 0 ? ms / 1000 : (ms - 999) / 1000)
    }

    /// The local calendar date at `instant`.
    public func localDate(at instant: Timestamp) -> CalendarDate {
        Timestamp(milliseconds: instant.milliseconds + Int64(offsetSeconds(at: instant)) * 1000).utcDate
    }

    /// The first instant of local day `date`: its midnight, or where a change of offset skips midnight,
    /// the first local time that exists on that day.
    public func startOfDay(_ date: CalendarDate) -> Timestamp {
        let midnight = Int64(date.daysSinceEpoch) * 86_400_000
        // Local midnight minus the offset in force then; two rounds settle an offset that changes near it.
        var guess = midnight - Int64(offsetSeconds(at: Timestamp(milliseconds: midnight))) * 1000
        guess = midnight - Int64(offsetSeconds(at: Timestamp(milliseconds: guess))) * 1000
        // In a gap (midnight does not exist), the guess lands on the previous day: the day starts at the change.
        if localDate(at: Timestamp(milliseconds: guess)) < date {
            var step: Int64 = 3_600_000
            while localDate(at: Timestamp(milliseconds: guess)) < date { guess += step }
            // Back off to the exact change, at one-second precision.
            while step > 1000 {
                step /= 2
                if localDate(at: Timestamp(milliseconds: guess - step)) == date { guess -= step }
            }
        }
        return Timestamp(milliseconds: guess)
    }

    public static func == (a: Zone, b: Zone) -> Bool { a.identifier == b.identifier }
}

/// Zones by name, shared by all threads.
final class ZoneCache: Sendable {
    private let zones = Locked<[String: Zone]>([:])
    func withLock<R>(_ body: (inout [String: Zone]) -> R) -> R { zones.withLock(body) }
}
