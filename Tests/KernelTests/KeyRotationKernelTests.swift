@testable import Auth
import Crypto
import Foundation
import JSON
import Testing
import TestSupport

/// A kernel configured with a provider's JWKS URL follows the provider's key rotation through
/// `auth.exchange` (verified on a worker thread, where the fetch happens), without a restart.
@Suite(.oneStoreOnly) struct KeyRotationKernelTests {
    @Test func aKernelFollowsAProvidersRotationThroughItsJWKSURL() throws {
        let provider = FakeIdentityProvider()
        let (k1, k2) = (P256.Signing.PrivateKey(), P256.Signing.PrivateKey())
        provider.publish([("k1", k1.publicKey)])
        let kernel = try makeKernel { config in
            config.auth.providers = [ProviderConfig(name: "google", jwksPath: nil, jwksUrl: provider.jwksURL, audiences: ["web"])]
        }
        defer { kernel.shutdown() }
        let client = InProcessClient(kernel)
        let now = Int64(Date().timeIntervalSince1970)
        let first = client.call("auth.exchange", ["provider": "google", "idToken": JSON.string(try provider.idToken(kid: "k1", key: k1, audience: "web", issuedAt: now))])
        #expect(first["result"]?["accessToken"] != nil, "\(first)")

        provider.publish([("k2", k2.publicKey)])
        let second = client.call("auth.exchange", ["provider": "google", "idToken": JSON.string(try provider.idToken(kid: "k2", key: k2, audience: "web", issuedAt: now))])
        #expect(second["result"]?["user"]?["id"] == first["result"]?["user"]?["id"], "the same Google account, signed in with the new key: \(second)")
        #expect(provider.fetches == 2)
        let retired = client.call("auth.exchange", ["provider": "google", "idToken": JSON.string(try provider.idToken(kid: "k1", key: k1, audience: "web", issuedAt: now))])
        #expect(retired["error"]?["code"] == -32010, "\(retired)")
    }
}
