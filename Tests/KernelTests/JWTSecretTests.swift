import Foundation
import Testing
import TestSupport
@testable import Kernel

/// The generated secret file appears whole or not at all, and a cut-short one never blocks a start.
@Suite(.oneStoreOnly) struct JWTSecretFileTests {
    @Test func generatedOnceThenReadAndAShortFileIsReplaced() throws {
        let dir = temporaryDirectory("secret")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let first = try JWTSecret.resolve(configured: nil, dataDir: dir)
        #expect(first.count >= 32)
        #expect(try JWTSecret.resolve(configured: nil, dataDir: dir) == first)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == [JWTSecret.fileName], "a temp file was left")
        // What an older version left when the disk filled up while it wrote the secret.
        let path = dir + "/" + JWTSecret.fileName
        try Data().write(to: URL(fileURLWithPath: path))
        let replaced = try JWTSecret.resolve(configured: nil, dataDir: dir)
        #expect(replaced.count >= 32 && replaced != first)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(replaced))
        #expect(try JWTSecret.resolve(configured: nil, dataDir: dir) == replaced)
    }

    /// #51 item 14: a deleted jwt-secret in a data dir that holds data was regenerated silently, and every
    /// token then failed "the signature does not verify". The kernel refuses to start instead.
    @Test func aDataDirThatLostItsSecretRefusesToStart() throws {
        let dir = temporaryDirectory("lost-secret")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let signUp = try runBinary(["call", "auth.signUp", #"{"email": "ann@example.com", "password": "correct horse battery"}"#,
                                    "--data-dir", dir, "--log-level", "error"])
        #expect(signUp.status == 0, "\(signUp.stderrText)")
        try FileManager.default.removeItem(atPath: dir + "/" + JWTSecret.fileName)
        #expect(throws: (any Error).self) { try JWTSecret.resolve(configured: nil, dataDir: dir) }
        let start = try runBinary(["call", "kernel.info", "--data-dir", dir, "--log-level", "error"])
        #expect(start.status == 2 && start.stderrText.contains("jwt-secret is gone"), "\(start.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/" + JWTSecret.fileName), "no new secret was written")
        // The configured secret, or a secret written on purpose, starts it.
        #expect(try runBinary(["call", "kernel.info", "--data-dir", dir, "--jwt-secret", String(repeating: "k", count: 40), "--log-level", "error"]).status == 0)
    }
}
