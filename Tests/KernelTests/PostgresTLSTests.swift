import Foundation
import JSON
import JSONRPC
@testable import Postgres
import Storage
import Testing
import TestSupport
@testable import Kernel

/// #54 item 5: the kernel reaches PostgreSQL over TLS, `sslmode=require` and `verify-full` with a CA
/// file, against a server whose certificate a CA made for the test signed (`scripts/pg-server start-tls`).
@Suite(.oneStoreOnly) struct PostgresTLSTests {
    @Test func theKernelWorksOverVerifiedTLSAndRefusesACertificateForAnotherName() throws {
        let server = TestPostgres.Private(tls: true)
        defer { server.stop() }
        let verified = server.url + "?sslmode=verify-full&sslrootcert=\(server.dir)/tls/ca.crt"
        for url in [server.url + "?sslmode=require", verified] {
            let c = try DatabaseConnection(url: url)
            let ssl = try c.run([Statement("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")])[0].scalar
            #expect(ssl == "t", "encrypted with \(url)")
        }
        // The certificate names localhost: reached as 127.0.0.1, verify-full refuses it.
        let other = verified.replacingOccurrences(of: "@localhost:", with: "@127.0.0.1:")
        #expect(throws: StorageError.self) { _ = try DatabaseConnection(url: other) }

        // A kernel on it writes and reads back, every session of its pool over TLS.
        let kernel = try makeKernel { config in
            config.memoryOnly = false
            config.storeURL = verified
            config.storeSchema = "healthkernel"
            config.enableTestMethods = true
        }
        defer { kernel.shutdown() }
        var connection = kernel.connection()
        defer { connection.close() }
        connection.receive(Array(#"{"jsonrpc":"2.0","id":1,"method":"test.write","params":{"key":"k","value":"v"}}"#.utf8) + [10]
                           + Array(#"{"jsonrpc":"2.0","id":2,"method":"test.dump"}"#.utf8) + [10])
        _ = connection.endBatch()
        let answers = try connection.output.split(separator: 10).map { try JSON.parse(Array($0)) }
        #expect(answers.first?["result"] != nil, "written: \(answers.first?.serialized ?? "")")
        let keys = answers.last?["result"]?["rows"]?.arrayValue?.compactMap { $0["key"]?.stringValue } ?? []
        #expect(keys == ["k"])
        let plain = server.sql("SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'hk' AND NOT s.ssl")
        #expect(plain == "0", "no session of the kernel's without TLS")
    }
}
