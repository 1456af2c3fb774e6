import Foundation
import Testing
import TestSupport

/// Every seed input of the fuzz targets and every input that once crashed one (Fuzz/regressions/TARGET)
/// replayed through the fuzz binary's replay driver (a normal build): none may crash it.
@Suite(.oneStoreOnly) struct FuzzRegressionTests {
    static var driver: String { (Paths.binary as NSString).deletingLastPathComponent + "/healthkernel-fuzz" }

    static var targets: [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: Paths.root.appendingPathComponent("Fuzz/corpus").path).sorted()) ?? []
    }

    @Test func everyTargetHasSeeds() throws {
        let listed = try runProcess(Self.driver, []).split(separator: "\n").map { String($0.split(separator: "\t")[0]) }
        #expect(Set(listed) == Set(Self.targets), "each fuzz target has a seed folder in Fuzz/corpus")
    }

    @Test(arguments: targets)
    func seedsAndRegressionsReplayWithoutACrash(_ target: String) throws {
        var files: [String] = []
        for folder in ["Fuzz/corpus/" + target, "Fuzz/regressions/" + target] {
            let dir = Paths.root.appendingPathComponent(folder).path
            for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] { files.append(dir + "/" + name) }
        }
        #expect(!files.isEmpty)
        let out = try runProcess(Self.driver, [target] + files)
        #expect(out.contains("ran \(files.count) inputs of \(target): no crash"), "\(out)")
    }

    /// Runs `path` with `arguments`; its stdout. A crash shows as a status other than 0.
    func runProcess(_ path: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(path) \(arguments.first ?? "") exited \(process.terminationStatus)")
        return String(decoding: data, as: UTF8.self)
    }
}
