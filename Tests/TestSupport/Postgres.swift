import Foundation

/// A PostgreSQL server the tests share: `$HEALTHKERNEL_TEST_PG_URL` (the README's test command starts
/// one with `scripts/pg-server`), else one this test process starts itself the first time a test asks
/// and stops when it exits. Each test gets a schema of its own, so tests never see each other's rows.
public enum TestPostgres {
    /// The server's URL.
    public static let url: String = {
        if let url = ProcessInfo.processInfo.environment["HEALTHKERNEL_TEST_PG_URL"], !url.isEmpty { return url }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let dir = "/tmp/hk-pg-\(getpid())"
        let process = Process()
        process.executableURL = root.appendingPathComponent("scripts/pg-server")
        process.arguments = ["start", dir]
        let out = Pipe()
        process.standardOutput = out
        try! process.run()
        process.waitUntilExit()
        precondition(process.terminationStatus == 0, "scripts/pg-server start failed")
        atexit {
            let stop = Process()
            stop.executableURL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("scripts/pg-server")
            stop.arguments = ["stop", "/tmp/hk-pg-\(getpid())"]
            try? stop.run()
            stop.waitUntilExit()
        }
        return String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }()

    /// A schema name no other test uses.
    public static func freshSchema() -> String {
        "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
    }
}
