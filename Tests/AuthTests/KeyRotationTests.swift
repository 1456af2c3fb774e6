import Chrono
import Crypto
import DomainSupport
import Foundation
import JSON
import Logging
import Testing
import TestSupport
@testable import Auth

/// Identity providers rotate their signing keys; a kernel follows without a restart, and rotating the
/// kernel's own secret leaves tokens and cursors in flight valid for a grace period.
@Suite struct KeyRotationTests {
    let quiet: Logger = {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        return logger
    }()

    /// An id token from the fake provider for audience "web".
    func idToken(_ provider: FakeIdentityProvider, kid: String, key: P256.Signing.PrivateKey) throws -> String {
        try provider.idToken(kid: kid, key: key, audience: "web", issuedAt: t0.seconds)
    }

    func harness(_ keys: KeySource) throws -> AuthHarness {
        try AuthHarness({ $0.providers = [ProviderConfig(name: "google", jwksPath: nil, jwksUrl: "unused", audiences: ["web"])] },
                        providerKeys: ["google": keys])
    }

    func signsIn(_ h: AuthHarness, _ token: String) -> Bool {
        (try? h.service.exchange(provider: "google", idToken: token, now: t0)) != nil
    }

    @Test func aJWKSURLIsFollowedThroughARotationAndUnknownKeysFetchAtMostOnceAMinute() throws {
        let provider = FakeIdentityProvider()
        let (k1, k2, k3) = (P256.Signing.PrivateKey(), P256.Signing.PrivateKey(), P256.Signing.PrivateKey())
        provider.publish([("k1", k1.publicKey)])
        let source = KeySource.url(provider.jwksURL, logger: quiet)
        let h = try harness(source)
        #expect(provider.fetches == 1, "fetched once at start")
        #expect(signsIn(h, try idToken(provider, kid: "k1", key: k1)))
        #expect(provider.fetches == 1, "a known key needs no fetch")

        // The provider rotates: k1 retired, k2 signs. A token naming k2 makes the kernel fetch at once.
        provider.publish([("k2", k2.publicKey)])
        #expect(signsIn(h, try idToken(provider, kid: "k2", key: k2)))
        #expect(provider.fetches == 2)
        #expect(!signsIn(h, try idToken(provider, kid: "k1", key: k1)), "a retired key no longer verifies")

        // Made-up key ids cannot make the kernel call the provider again within the minute.
        for i in 0..<20 { #expect(!signsIn(h, try idToken(provider, kid: "forged-\(i)", key: k3))) }
        #expect(provider.fetches == 2)
        // A token signed with k2 under a known kid but by another key fails on its signature.
        #expect(!signsIn(h, try idToken(provider, kid: "k2", key: k3)))
    }

    @Test func aStaleSetIsFetchedAgainInTheBackground() throws {
        let provider = FakeIdentityProvider()
        let k1 = P256.Signing.PrivateKey(), k2 = P256.Signing.PrivateKey()
        provider.publish([("k1", k1.publicKey)])
        let source = KeySource.url(provider.jwksURL, logger: quiet)
        provider.publish([("k1", k1.publicKey), ("k2", k2.publicKey)])
        source.expireForTests()
        let deadline = Date().addingTimeInterval(10)
        while source.cachedKey("k2") == nil && Date() < deadline { usleep(50_000) }
        #expect(source.cachedKey("k2") != nil, "the background thread fetched the stale set, without any token asking for it")
        #expect(provider.fetches == 2)
    }

    @Test func aFailedFetchKeepsTheLastKeys() throws {
        let provider = FakeIdentityProvider()
        let k1 = P256.Signing.PrivateKey()
        provider.publish([("k1", k1.publicKey)])
        let source = KeySource.url(provider.jwksURL, logger: quiet)
        provider.serve("not json")
        source.expireForTests()
        source.refresh()
        #expect(source.cachedKey("k1") != nil)
    }

    @Test func cacheControlDecidesHowLongAFetchedSetIsUsed() {
        #expect(KeySource.maxAge("public, max-age=21600, must-revalidate, no-transform") == 21_600)  // Google's
        #expect(KeySource.maxAge("max-age=5") == 60, "at least a minute")
        #expect(KeySource.maxAge("max-age=9999999") == 86_400, "at most a day")
        #expect(KeySource.maxAge("no-cache") == 60)
        #expect(KeySource.maxAge("s-maxage=\"600\"") == 600)
        #expect(KeySource.maxAge(nil) == 3_600)
        #expect(KeySource.maxAge("private") == 3_600)
    }

    @Test func aJWKSFileIsReadAgainWhenItChanges() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("hk-jwks-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("google.json").path
        let provider = FakeIdentityProvider()  // signs the tokens; its JWKS URL is not used here
        let k1 = P256.Signing.PrivateKey(), k2 = P256.Signing.PrivateKey()
        try jwks(ec: ("k1", k1.publicKey)).write(toFile: path, atomically: true, encoding: .utf8)
        let source = try KeySource.file(path, logger: quiet)
        let h = try harness(source)
        #expect(signsIn(h, try idToken(provider, kid: "k1", key: k1)))

        try jwks(ec: ("k2", k2.publicKey)).write(toFile: path, atomically: true, encoding: .utf8)  // a new file renamed in
        usleep(1_100_000)
        #expect(signsIn(h, try idToken(provider, kid: "k2", key: k2)), "the new version is read within a second")
        #expect(!signsIn(h, try idToken(provider, kid: "k1", key: k1)))

        try "{ broken".write(toFile: path, atomically: true, encoding: .utf8)
        usleep(1_100_000)
        #expect(signsIn(h, try idToken(provider, kid: "k2", key: k2)), "a version that does not parse leaves the last good keys")
    }

    @Test func aProviderNamesExactlyOneOfAFileAndAURL() throws {
        func read(_ text: String) -> String? {
            guard case .object(let o)? = try? JSON.parse(Array(text.utf8)) else { return "not an object" }
            var reader = ObjectReader(o, path: "auth")
            do {
                var config = AuthConfig()
                try config.readStructured(&reader, resolve: { $0 })
                return nil
            } catch {
                return "\(error.field) \(error.reason)"
            }
        }
        #expect(read(#"{"providers":{"google":{"jwksUrl":"https://www.googleapis.com/oauth2/v3/certs","audiences":["web"]}}}"#) == nil)
        #expect(read(#"{"providers":{"google":{"jwksUrl":"http://127.0.0.1:9/jwks","audiences":["web"]}}}"#) == nil)
        #expect(read(#"{"providers":{"google":{"jwksUrl":"http://keys.example.com/jwks","audiences":["web"]}}}"#) == "auth.providers.google.jwksUrl out_of_range")
        #expect(read(#"{"providers":{"google":{"jwks":"g.json","jwksUrl":"https://example.com/jwks","audiences":["web"]}}}"#) != nil)
        #expect(read(#"{"providers":{"google":{"audiences":["web"]}}}"#) == "auth.providers.google.jwks missing_field")
        #expect(read(#"{"previousJwtSecrets":["short"]}"#) == "auth.previousJwtSecrets[0] out_of_range")
    }

    @Test func tokensAndCursorsOfAPreviousSecretStayValidDuringARotation() throws {
        let old = "the-old-secret-the-old-secret-0123456789"
        let before = try AuthHarness(secret: old)
        let token = hs256(claims(), key: old)
        #expect(before.refusal(token) == nil)

        let rotated = try AuthHarness({ $0.previousJwtSecrets = [old] })
        #expect(rotated.refusal(token) == nil, "a token the old secret signed verifies until it expires")
        #expect(rotated.refusal(hs256(claims(), key: "some-other-secret-some-other-secret-0123")) == "invalid_token")
        #expect(rotated.refusal(hs256(claims(exp: t0.seconds - 3600), key: old)) != nil, "expiry still applies")

        let oldCursor = CursorSeal(purpose: "sync", secrets: before.service.cursorSecrets).seal("42", user: alice)
        #expect(CursorSeal(purpose: "sync", secrets: rotated.service.cursorSecrets).open(oldCursor, user: alice) == "42")
        let afterGrace = try AuthHarness()  // another secret, the old one no longer listed
        #expect(CursorSeal(purpose: "sync", secrets: afterGrace.service.cursorSecrets).open(oldCursor, user: alice) == nil)
    }
}
