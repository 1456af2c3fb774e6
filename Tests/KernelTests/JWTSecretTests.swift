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
}
