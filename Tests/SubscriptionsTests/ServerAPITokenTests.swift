import Chrono
import Crypto
import DomainSupport
import Foundation
import JSON
import JSONParsing
import Testing
@testable import Subscriptions

/// The App Store Server API's bearer token, checked the way Apple's server checks it.
@Suite struct ServerAPITokenTests {
    let key = P256.Signing.PrivateKey()

    func parts(_ token: String) throws -> (header: JSON, claims: JSON, signed: String, signature: [UInt8]) {
        let p = token.split(separator: ".").map(String.init)
        try #require(p.count == 3)
        let decode = { (s: String) throws -> [UInt8] in try #require(Base64URL.decode(Array(s.utf8))) }
        return (try JSON.parse(decode(p[0])), try JSON.parse(decode(p[1])), p[0] + "." + p[1], try decode(p[2]))
    }

    @Test func aTokenIsES256WithApplesClaimsAndVerifiesWithThePublicKey() throws {
        var signer = try ServerAPIToken(p8: key.pemRepresentation, keyId: "ABC123DEFG", issuerId: "57246542-96fe-1a63-e053-0824d011072a",
                                        bundleId: "com.example.app")
        let now = Timestamp(seconds: 1_800_000_000)
        let token = try signer.token(now: now)
        let (header, claims, signed, signature) = try parts(token)
        #expect(header == ["alg": "ES256", "kid": "ABC123DEFG", "typ": "JWT"])
        #expect(claims == ["iss": "57246542-96fe-1a63-e053-0824d011072a", "iat": 1_800_000_000, "exp": 1_800_003_600,
                           "aud": "appstoreconnect-v1", "bid": "com.example.app"])
        #expect(signature.count == 64, "r || s, as JWS wants")
        let sig = try P256.Signing.ECDSASignature(rawRepresentation: signature)
        #expect(key.publicKey.isValidSignature(sig, for: Array(signed.utf8)))
        #expect(!P256.Signing.PrivateKey().publicKey.isValidSignature(sig, for: Array(signed.utf8)))
    }

    @Test func aTokenIsReusedUntilFiveMinutesBeforeItExpires() throws {
        var signer = try ServerAPIToken(p8: key.pemRepresentation, keyId: "K", issuerId: "I", bundleId: "B")
        let first = try signer.token(now: Timestamp(seconds: 1_000_000))
        #expect(try signer.token(now: Timestamp(seconds: 1_000_000 + 3000)) == first)
        let second = try signer.token(now: Timestamp(seconds: 1_000_000 + 3301))
        #expect(second != first)
        #expect(try parts(second).claims["iat"] == .int(1_000_000 + 3301))
    }

    @Test func aKeyThatIsNotAP256PKCS8KeyIsRefusedWithoutQuotingIt() {
        let notAKey = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1tYXRlcmlhbA==\n-----END PRIVATE KEY-----\n"
        do {
            _ = try ServerAPIToken(p8: notAKey, keyId: "K", issuerId: "I", bundleId: "B")
            Issue.record("accepted a key that is not one")
        } catch {
            #expect(!error.description.contains("c2VjcmV0"))
        }
        #expect(throws: ServerAPIToken.KeyError.self) {
            try ServerAPIToken(p8: P256.Signing.PrivateKey().pemRepresentation, keyId: "K", issuerId: "I", bundleId: "B", ttlSeconds: 7200)
        }
    }
}
