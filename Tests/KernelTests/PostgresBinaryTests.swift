import Foundation
import JSON
import Testing
import TestSupport

/// The real binary on PostgreSQL: `store migrate`, and kernels on one database seeing each other's work.
@Suite struct PostgresBinaryTests {
    @Test func storeMigrateCreatesOnceAndRefusesANewerSchema() throws {
        let schema = TestPostgres.freshSchema()
        let args = ["store", "migrate", "--store", TestPostgres.url, "--config", try configFile(schema)]
        let first = try runBinary(args)
        #expect(first.status == 0, "\(first.stderrText)")
        #expect(try JSON.parse(first.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)) == ["schema": .string(schema), "from": 0, "to": 1])
        let again = try runBinary(args)
        #expect(try JSON.parse(again.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))["from"] == 1)

        // A database migrated by a newer binary: this one must not touch it.
        #expect(psql("UPDATE \(schema).schema_version SET version = 99") == 0)
        let refused = try runBinary(args)
        #expect(refused.status == 2)
        #expect(refused.stderrText.contains("version 99") && refused.stderrText.contains("binary's 1"), "\(refused.stderrText)")
    }

    /// A config file naming `schema` (the schema has no flag of its own).
    func configFile(_ schema: String) throws -> String {
        let path = NSTemporaryDirectory() + "hk-config-\(schema).json"
        try Data(#"{"store":{"schema":"\#(schema)"}}"#.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Runs one SQL command on the test server; returns psql's exit status.
    func psql(_ sql: String) -> Int32 {
        system("psql -q '\(TestPostgres.url)' -c '\(sql)' > /dev/null")
    }
}
