import Chrono
import Foundation
import JSON
import Testing
import TestSupport
@testable import HealthImport
@testable import Kernel

/// #56 item 5: an Apple Health export imported whole, through `health.ingest` batches.
private let importUser = "1b0e9a52-3c1e-4b8e-9a54-0f6f3f6c2a11"

@Suite struct HealthImportTests {
    /// A kernel and an importer that sends its batches to it as `user`.
    func importer(_ kernel: Kernel, user: String = importUser, timezone: String? = "Europe/Paris", batchSize: Int = 500) -> ExportImporter {
        let client = InProcessClient(kernel)
        let token = kernel.auth.mint(sub: user, role: "authenticated", ttl: 3600, now: kernel.clock.now())
        return ExportImporter(timezone: timezone, batchSize: batchSize, now: kernel.clock.now(), progress: { _ in },
                              clock: { kernel.clock.monotonicMicros() }) { params in
            var p = params
            p["auth"] = .string(token)
            return client.call("health.ingest", .object(p))
        }
    }

    func steps(_ kernel: Kernel, _ from: String, _ to: String) -> [String: Double] {
        let token = kernel.auth.mint(sub: importUser, role: "authenticated", ttl: 3600, now: kernel.clock.now())
        let days = InProcessClient(kernel).call("health.summary", ["auth": .string(token), "from": .string(from), "to": .string(to),
                                                                   "types": ["HKQuantityTypeIdentifierStepCount"]])["result"]?["days"]?.arrayValue ?? []
        var out: [String: Double] = [:]
        for d in days { if let date = d["date"]?.stringValue, let sum = d["metrics"]?["HKQuantityTypeIdentifierStepCount"]?["sum"]?.numberValue { out[date] = sum } }
        return out
    }

    static let excerpt = ["../shared/testdata/healthkit/garmin-connect-iphone-export-excerpt.xml", "/work/shared/testdata/healthkit/garmin-connect-iphone-export-excerpt.xml"]
        .map { URL(fileURLWithPath: $0, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath)).path }
        .first { FileManager.default.fileExists(atPath: $0) }

    /// The real Garmin Connect + iPhone export (shared/testdata/healthkit): every day's steps as its README
    /// gives them (FACT), Garmin's 21 copies of three workouts as three, and a second import changing nothing.
    @Test(.enabled(if: excerpt != nil, "shared/testdata/healthkit is not on this machine"))
    func theGarminAndIPhoneExcerptGivesTheReadmesFigures() throws {
        let kernel = try makeKernel()
        defer { kernel.shutdown() }
        let path = try #require(Self.excerpt)
        let first = try importer(kernel).run(path: path)
        #expect(first.imported == ["samples": 2381, "sleep": 175, "workouts": 3], "\(first.json)")
        #expect(first.skipped.isEmpty && first.batches == 6)
        let expected: [String: Double] = [
            "2018-01-08": 7779, "2018-01-09": 4054, "2018-01-10": 4677, "2018-01-11": 4630, "2018-01-12": 11828, "2018-01-13": 3964,
            "2018-01-14": 441, "2020-11-28": 481, "2020-11-29": 11219, "2020-11-30": 5325, "2020-12-01": 6950, "2020-12-02": 1059,
            "2020-12-03": 2462, "2020-12-04": 6636, "2020-12-05": 1940, "2020-12-06": 1745, "2020-12-07": 5901, "2020-12-08": 6342,
            "2020-12-09": 7785, "2020-12-10": 4772, "2020-12-11": 2119, "2020-12-12": 7921, "2020-12-13": 8905, "2020-12-14": 637,
        ]
        var got = steps(kernel, "2018-01-01", "2018-01-31")
        got.merge(steps(kernel, "2020-11-20", "2020-12-31")) { a, _ in a }
        #expect(got == expected)
        let again = try importer(kernel, batchSize: 1000).run(path: path)
        #expect(again.imported == ["samples": 0, "sleep": 0, "workouts": 0] && again.unchanged == 2559, "\(again.json)")
    }

    /// An export written here: each kind of element, a record the kernel refuses (skipped with its reason),
    /// elements that are not items, and the phone later syncing one of the samples under its real UUID.
    @Test func eachKindOfElementAndAPhoneSyncAfterTheImport() throws {
        let kernel = try makeKernel()
        defer { kernel.shutdown() }
        let xml = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE HealthData [
            <!ELEMENT HealthData (ExportDate,Me,(Record|Correlation|Workout|ActivitySummary)*)>
            ]>
            <HealthData locale="en_US">
             <ExportDate value="2026-03-10 12:00:00 +0100"/>
             <Me HKCharacteristicTypeIdentifierBiologicalSex=""/>
             <Record type="HKQuantityTypeIdentifierStepCount" sourceName="Ann’s Apple Watch" sourceVersion="10.0" device="&lt;&lt;HKDevice: 0x2800&gt;, name:Apple Watch, manufacturer:Apple Inc., model:Watch, hardware:Watch6,1, software:10.0&gt;" unit="count" creationDate="2026-03-02 11:00:00 +0100" startDate="2026-03-02 10:00:00 +0100" endDate="2026-03-02 10:10:00 +0100" value="600"/>
             <Record type="HKQuantityTypeIdentifierStepCount" sourceName="Health" unit="count" startDate="2026-03-02 10:00:00 +0100" endDate="2026-03-02 10:10:00 +0100" value="1000">
              <MetadataEntry key="HKWasUserEntered" value="1"/>
             </Record>
             <Record type="HKQuantityTypeIdentifierStepCount" sourceName="Health" unit="furlong" startDate="2026-03-03 10:00:00 +0100" endDate="2026-03-03 10:10:00 +0100" value="3"/>
             <Record type="HKCategoryTypeIdentifierSleepAnalysis" sourceName="Ann’s Apple Watch" startDate="2026-03-02 23:00:00 +0100" endDate="2026-03-03 06:00:00 +0100" value="HKCategoryValueSleepAnalysisAsleepCore">
              <MetadataEntry key="HKTimeZone" value="Europe/Paris"/>
             </Record>
             <Correlation type="HKCorrelationTypeIdentifierBloodPressure" startDate="2026-03-02 08:00:00 +0100" endDate="2026-03-02 08:00:00 +0100"/>
             <Workout workoutActivityType="HKWorkoutActivityTypeTraditionalStrengthTraining" duration="30" durationUnit="min" sourceName="Ann’s Apple Watch" startDate="2026-03-02 18:00:00 +0100" endDate="2026-03-02 18:31:00 +0100">
              <WorkoutStatistics type="HKQuantityTypeIdentifierActiveEnergyBurned" startDate="2026-03-02 18:00:00 +0100" endDate="2026-03-02 18:31:00 +0100" sum="180" unit="kcal"/>
             </Workout>
             <ActivitySummary dateComponents="2026-03-02" activeEnergyBurned="400"/>
            </HealthData>
            """
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("hk-import-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("export.xml").path
        try xml.write(toFile: path, atomically: true, encoding: .utf8)
        let summary = try importer(kernel).run(path: path)
        #expect(summary.imported == ["samples": 2, "sleep": 1, "workouts": 1], "\(summary.json)")
        #expect(summary.skipped == ["HKQuantityTypeIdentifierStepCount: invalid_params unit": 1], "\(summary.json)")
        #expect(summary.notImported == ["Correlation": 1, "ActivitySummary": 1])
        // Entered by hand, so it counts over the watch's minutes.
        #expect(steps(kernel, "2026-03-02", "2026-03-02") == ["2026-03-02": 1000])
        // The watch's sample, synced later from the phone under its HealthKit UUID: the same measurement, once.
        let token = kernel.auth.mint(sub: importUser, role: "authenticated", ttl: 3600, now: kernel.clock.now())
        let synced = InProcessClient(kernel).call("health.ingest", ["auth": .string(token), "samples": [[
            "uuid": "5b1c9a8e-0f3e-4c7a-9d2b-3e4f5a6b7c8d", "type": "HKQuantityTypeIdentifierStepCount", "value": 600, "unit": "count",
            "start": "2026-03-02T10:00:00+01:00", "end": "2026-03-02T10:10:00+01:00", "source": ["name": "Ann’s Apple Watch"]]]])
        #expect(synced["result"]?["accepted"]?["samples"] == 1)
        #expect(steps(kernel, "2026-03-02", "2026-03-02") == ["2026-03-02": 1000])
        // An export.zip is read through unzip, the same items (so nothing changes).
        let zip = dir.appendingPathComponent("export.zip").path
        let python = Process()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        python.arguments = ["python3", "-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1], 'w').write(sys.argv[2], 'apple_health_export/export.xml')", zip, path]
        try python.run()
        python.waitUntilExit()
        if FileManager.default.fileExists(atPath: "/usr/bin/unzip") {
            let again = try importer(kernel).run(path: zip)
            #expect(again.unchanged == 4 && again.imported == ["samples": 0, "sleep": 0, "workouts": 0], "\(again.json)")
        }
        // Not XML at all: a clear error, nothing imported.
        try "not xml".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(throws: ExportReader.Failure.self) { try importer(kernel).run(path: path) }
    }

    @Test func mappingRules() {
        #expect(ExportMapping.rfc3339("2020-11-28 23:59:59 +0100") == "2020-11-28T23:59:59+01:00")
        #expect(ExportMapping.rfc3339("2020-11-28T23:59:59Z") == nil)
        let d = ExportMapping.device("<<HKDevice: 0x283c39c70>, name:iPhone, manufacturer:Apple Inc., model:iPhone, hardware:iPhone10,1, software:11.2.1>")
        #expect(d.name == "iPhone" && d.model == "iPhone")
        #expect(ExportMapping.categoryCase("HKCategoryValueAppleStandHourStood", type: "HKCategoryTypeIdentifierAppleStandHour") == "stood")
        let u = ExportMapping.uuid(["a", "b"])
        #expect(u == ExportMapping.uuid(["a", "b"]) && u != ExportMapping.uuid(["a", "c"]))
        #expect(u.count == 36 && Array(u)[14] == "8" && "89ab".contains(Array(u)[19]))
    }
}

/// `health.importExport`: a host that saved a user's export on the kernel's machine starts the import
/// with a service token; a child process sends the batches to the kernel's socket; `health.importStatus`
/// says when it is done and what it did.
@Suite(.oneStoreOnly) struct HealthImportJobTests {
    @Test func aServiceStartsAnImportAndReadsItsSummary() throws {
        let dir = temporaryDirectory("import-job")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let socket = dir + "/k.sock"
        let xml = """
            <?xml version="1.0" encoding="UTF-8"?>
            <HealthData locale="en_US">
             <Record type="HKQuantityTypeIdentifierStepCount" sourceName="iPhone" unit="count" startDate="2026-03-02 10:00:00 +0100" endDate="2026-03-02 10:10:00 +0100" value="321"/>
             <Workout workoutActivityType="HKWorkoutActivityTypeWalking" duration="20" durationUnit="min" sourceName="iPhone" startDate="2026-03-02 12:00:00 +0100" endDate="2026-03-02 12:20:00 +0100"/>
            </HealthData>
            """
        try xml.write(toFile: dir + "/export.xml", atomically: true, encoding: .utf8)
        let k = try LiveKernel(["serve", "--data-dir", dir + "/data", "--log-level", "error", "--jwt-secret", testSecret, "--no-stdin", "--listen", "unix:" + socket])
        defer {
            kill(k.process.processIdentifier, SIGTERM)
            _ = k.finish()
        }
        let service = try #require(runBinary(["token", "--role", "service_role", "--jwt-secret", testSecret]).stdoutText.split(separator: "\n").first)
        func call(_ method: String, _ params: String) throws -> JSON {
            let r = try runBinary(["call", method, params, "--token", String(service), "--connect", socket])
            return (try? JSON.parse(Array(r.stdoutText.utf8))) ?? ["stderr": .string(r.stderrText)]
        }
        let started = try call("health.importExport", #"{"userId": "\#(importUser)", "path": "\#(dir)/export.xml", "timezone": "Europe/Paris"}"#)
        let id = try #require(started["importId"]?.stringValue, "\(started)")
        #expect(started["state"] == "running" || started["state"] == "done")
        // The child runs on its own: wait for its end (a timeout, not a guess).
        var status = started
        let deadline = Date().addingTimeInterval(60)
        while status["state"] == "running" && Date() < deadline {
            usleep(50_000)
            status = try call("health.importStatus", #"{"importId": "\#(id)"}"#)
        }
        #expect(status["state"] == "done", "\(status)")
        #expect(status["summary"]?["imported"] == ["samples": 1, "sleep": 0, "workouts": 1], "\(status)")
        // The user's data is there, as an ingest would leave it.
        let user = try #require(runBinary(["token", "--user", importUser, "--jwt-secret", testSecret]).stdoutText.split(separator: "\n").first)
        let day = try runBinary(["call", "health.summary", #"{"from": "2026-03-02", "to": "2026-03-02"}"#, "--token", String(user), "--connect", socket])
        #expect(day.stdoutText.contains(#""sum":321"#), "\(day.stdoutText)")
        // A path the kernel cannot read is refused on its field; an unknown import is not found.
        #expect(try call("health.importExport", #"{"userId": "\#(importUser)", "path": "relative/export.xml"}"#)["stderr"]?.stringValue?.contains("params.path") == true)
        #expect(try call("health.importStatus", #"{"importId": "nope"}"#)["stderr"]?.stringValue?.contains("-32004") == true)
    }
}
