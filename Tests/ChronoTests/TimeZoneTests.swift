import Foundation
import Testing
import TestSupport
@testable import Chrono

/// The kernel reads tz files itself (`TZif`, `PosixTZ`); the C library's `localtime_r`, reading the same
/// files, is the reference (Foundation's ICU zones carry ICU's own, older tz data).
@Suite(.oneStoreOnly) struct TimeZoneTests {
    /// Every zone of the system's database whose name the kernel accepts.
    static func zoneNames() -> [String] {
        guard let e = FileManager.default.enumerator(atPath: Zone.databasePath) else { return [] }
        return e.compactMap { $0 as? String }.filter { name in
            !name.hasPrefix("posix") && !name.hasPrefix("right") && name.first?.isUppercase == true && !name.hasSuffix(".tab")
                && Zone(name) != nil
        }.sorted()
    }

    /// The C library's offsets (`localtime`'s `tm_gmtoff`), by zone, at each instant: computed in a
    /// python3 child, because setting `TZ` in this process would race the tests running beside it.
    static func reference(_ cases: [(name: String, instants: [Int64])]) throws -> [[Int]] {
        let script = """
            import os, sys, time
            for line in sys.stdin:
                name, *instants = line.split()
                os.environ["TZ"] = ":" + name
                time.tzset()
                print(" ".join(str(time.localtime(int(t)).tm_gmtoff) for t in instants))
            """
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("tz-\(UUID().uuidString).txt")
        defer { try? FileManager.default.removeItem(at: input) }
        try cases.map { ([$0.name] + $0.instants.map(String.init)).joined(separator: " ") }.joined(separator: "\n")
            .write(to: input, atomically: true, encoding: .utf8)
        let process = Process(), output = Pipe()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script]
        process.standardInput = try FileHandle(forReadingFrom: input)
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map { $0.split(separator: " ").compactMap { Int($0) } }
    }

    @Test func everyZoneAgreesWithTheCLibraryFrom1900To2100() throws {
        let names = Self.zoneNames()
        #expect(names.count > 300, "the tz database is installed")
        var random = SystemRandomNumberGenerator()
        let from = Int64(-2_208_988_800), to = Int64(4_102_444_800)  // 1900 to 2100
        // Random instants, and every third hour of 2030 and 2060 (past the transitions a fat file lists,
        // so the footer's rule answers; a rule a day off shows within the hours around each change).
        let cases = names.map { name in
            var instants = (0..<300).map { _ in Int64.random(in: from...to, using: &random) }
            for year in [2030, 2060] {
                let jan1 = Int64(CalendarDate(year: year, month: 1, day: 1)!.daysSinceEpoch) * 86_400
                instants += stride(from: jan1, to: jan1 + 366 * 86_400, by: 3 * 3600)
            }
            return (name: name, instants: instants)
        }
        let reference = try Self.reference(cases)
        try #require(reference.count == cases.count, "python3 answered every zone")
        for (c, want) in zip(cases, reference) {
            let zone = try #require(Zone(c.name))
            for (t, offset) in zip(c.instants, want) where zone.offsetSeconds(at: Timestamp(milliseconds: t * 1000)) != offset {
                Issue.record("\(c.name) at \(t): \(zone.offsetSeconds(at: Timestamp(milliseconds: t * 1000))), the C library \(offset)")
                break
            }
        }
    }

    @Test func posixRulesParseAndRefuseGarbage() {
        #expect(PosixTZ("PST8PDT,M3.2.0,M11.1.0")?.standard == -8 * 3600)
        #expect(PosixTZ("<+0330>-3:30")?.standard == 12_600)
        #expect(PosixTZ("IST-2IDT,M3.4.4/26,M10.5.0")?.daylight?.start.time == 26 * 3600)
        #expect(PosixTZ("<-03>3<-02>,M3.5.0/-2,M10.5.0/-1")?.daylight?.offset == -7200)
        for bad in ["", "P", "PST", "PST8PDT,M13.1.0,M11.1.0", "PST8PDT,M3.2.0", "PST8PDT,J0,J365", "<PST8"] {
            #expect(PosixTZ(bad) == nil, "\(bad)")
        }
    }

    @Test func aFileThatIsNoTzFileIsNoZone() {
        #expect(TZif(Array("TZif2".utf8)) == nil)
        #expect(TZif([]) == nil)
        var truncated = Zone.read(Zone.databasePath + "Europe/Berlin") ?? []
        truncated.removeLast(truncated.count / 2)
        #expect(TZif(truncated) == nil)
    }
}
