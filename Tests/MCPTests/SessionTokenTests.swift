import Foundation
import JSON
import Testing
@testable import MCP

/// #55 item 6: `healthkernel mcp --refresh-token` keeps its session alive past the access token's hour.
@Suite struct SessionTokenTests {
    /// A refresh that rotates: refresh token `r<n>` gives access `a<n+1>` and refresh `r<n+1>`, for an hour.
    final class Issuer: @unchecked Sendable {
        var calls: [String] = []
        var refuse = false
        func refresh(_ token: String) -> JSON {
            calls.append(token)
            if refuse { return ["error": ["code": -32001, "message": "The refresh token is not valid"]] }
            let n = (Int(token.dropFirst()) ?? 0) + 1
            return ["result": ["accessToken": .string("a\(n)"), "refreshToken": .string("r\(n)"), "expiresIn": 3600]]
        }
    }

    func file() -> RefreshTokenFile {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("hk-refresh-\(UUID().uuidString)").path
        FileManager.default.createFile(atPath: path, contents: Data("r0\n".utf8))
        return RefreshTokenFile(path: path)
    }

    @Test func theAccessTokenIsRefreshedAMinuteBeforeItExpiresAndEachRotationIsSaved() throws {
        let issuer = Issuer(), store = file()
        defer { try? FileManager.default.removeItem(atPath: store.path) }
        let session = try SessionToken(refreshingFrom: store, now: 1000, refresh: issuer.refresh)
        #expect(try session.current(now: 1000) == "a1")
        #expect(try store.read() == "r1", "the rotated token is saved at once")
        #expect(try session.current(now: 1000 + 3600 - 61) == "a1", "not yet due")
        #expect(try session.current(now: 1000 + 3600 - 60) == "a2", "a minute before it expires")
        #expect(try store.read() == "r2")
        #expect(issuer.calls == ["r0", "r1"])
        let attributes = try FileManager.default.attributesOfItem(atPath: store.path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        // A session that cannot be refreshed says why.
        issuer.refuse = true
        #expect(throws: SessionTokenError.self) { try session.current(now: 1000 + 7200) }
    }

    @Test func aFixedTokenIsNeverRefreshedAndAMissingFileIsNamed() throws {
        #expect(try SessionToken(fixed: "t").current(now: .max) == "t")
        let missing = RefreshTokenFile(path: "/nonexistent/healthkernel/mcp-refresh-token")
        #expect { try missing.read() } throws: { "\($0)".contains("/nonexistent/healthkernel/mcp-refresh-token") }
        #expect(RefreshTokenFile.defaultPath(environment: ["HOME": "/home/ann"]) == "/home/ann/.local/state/healthkernel/mcp-refresh-token")
        #expect(RefreshTokenFile.defaultPath(environment: ["XDG_STATE_HOME": "/s", "HOME": "/home/ann"]) == "/s/healthkernel/mcp-refresh-token")
    }
}
