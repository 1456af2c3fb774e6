import Chrono
import Crypto
import DomainSupport
import Foundation
import JSON
import JSONParsing
import SwiftASN1
import Testing
import TestSupport
import X509
@testable import Subscriptions

/// The public App Store material in `../shared/testdata/appstore` (never copied into the repository):
/// Apple's real root and chain, Apple's test CA and mock signed data, and real Apple-signed JWS, each with
/// the verdict a correct verifier gives (its README).
enum AppStoreVectors {
    static let folder = testdataFolder("appstore")

    static func json(_ name: String) throws -> JSON {
        let folder = try #require(folder, "the App Store test vectors (shared/testdata/appstore) are not on this machine")
        return try JSON.parse(Array(try Data(contentsOf: folder.appendingPathComponent(name))))
    }

    static func certificate(_ base64: JSON?) throws -> Certificate {
        let der = try #require(base64?.stringValue.flatMap { Data(base64Encoded: $0) })
        return try Certificate(derEncoded: Array(der))
    }

    static var appleRoot: Certificate { get throws { try Certificate(pemEncoded: appleRootCAG3) } }
}

/// An instant as the vectors give it.
func ms(_ value: Int64) -> Timestamp { Timestamp(milliseconds: value) }

/// The reason a verification fails, or "accept".
func verdict(_ verifier: SignedDataVerifier, _ jws: String, at date: Timestamp) -> String {
    do {
        _ = try verifier.verify(jws, effectiveDate: { _ in date })
        return "accept"
    } catch {
        return error.reason
    }
}

@Suite struct SignedDataTests {
    @Test func theBundledRootIsApplesRootCAG3() throws {
        let root = try AppStoreVectors.appleRoot
        var der = DER.Serializer()
        try der.serialize(root)
        let digest = SHA256.hash(data: der.serializedBytes)
        #expect(digest.map { String(format: "%02X", $0) }.joined() == "63343ABFB89A6A03EBB57E9B3F5FA7BE7C4F5C756F3017B3A8C488C3653E9179")
        let shipped = try AppStoreVectors.json("apple-real-chain.json")["root"]?["derBase64"]
        #expect(try AppStoreVectors.certificate(shipped) == root)
    }

    /// Apple's real chain at the dates its tests use: valid inside every validity period, refused when
    /// the leaf has expired, and refused against another root.
    @Test func realChainVerdicts() throws {
        let vectors = try AppStoreVectors.json("apple-real-chain.json")
        let root = try AppStoreVectors.certificate(vectors["root"]?["derBase64"])
        let intermediate = try AppStoreVectors.certificate(vectors["intermediate"]?["derBase64"])
        let leaves = try (vectors["leaves"]?.arrayValue ?? []).map { try AppStoreVectors.certificate($0["derBase64"]) }
        let testRoot = try AppStoreVectors.certificate(try AppStoreVectors.json("apple-lib-test-material.json")["certs"]?["root"])
        let checks = vectors["chainChecks"]?.arrayValue ?? []
        #expect(checks.count == 6 && leaves.count == 3)
        for check in checks {
            let description = check["chain"]?.stringValue ?? ""
            let leaf = leaves[Int(String(description.dropFirst("leaves[".count).prefix(1)))!]
            let anchor = description.contains("TEST root") ? testRoot : root
            let verifier = SignedDataVerifier(roots: [anchor])
            var outcome = "valid"
            do {
                try verifier.validate([leaf, intermediate, anchor], at: ms(check["atMs"]!.intValue!))
            } catch {
                outcome = "reject"
            }
            #expect(check["expect"]?.stringValue?.hasPrefix(outcome) == true, "\(description) at \(check["at"] ?? .null)")
        }
    }

    /// Real Apple-signed JWS: each verifies at its own signedDate (or the date the README names), and
    /// is refused where its leaf has expired, against Apple's test root, or with its payload altered.
    @Test func realSignedJWS() throws {
        let entries = try AppStoreVectors.json("real-signed-jws.json")["entries"]?.arrayValue ?? []
        #expect(entries.count == 7)
        let apple = SignedDataVerifier(roots: [try AppStoreVectors.appleRoot])
        let testRoot = SignedDataVerifier(roots: [try AppStoreVectors.certificate(
            try AppStoreVectors.json("apple-lib-test-material.json")["certs"]?["root"])])
        let now = ms(1_795_392_000_000)  // 2026-11-23
        for entry in entries {
            let id = entry["id"]?.stringValue ?? "?"
            let jws = try #require(entry["jws"]?.stringValue)
            let payload = try SignedDataVerifier.object(jws.split(separator: ".")[1], "payload")
            // The one notification without a top-level signedDate: the date its README forces.
            let signed = payload["signedDate"]?.intValue ?? 1_646_387_008_254
            #expect(verdict(apple, jws, at: ms(signed)) == "accept", "\(id) at its signedDate")
            #expect(verdict(testRoot, jws, at: ms(signed)) == "untrusted_chain", "\(id) against Apple's test root")
            let stillValid = id.hasPrefix("session-")
            #expect(verdict(apple, jws, at: now) == (stillValid ? "accept" : "untrusted_chain"), "\(id) now")
            if stillValid { #expect(verdict(apple, jws, at: ms(1_823_558_400_000)) == "untrusted_chain", "\(id) after 2027-10-13") }
            // Nested JWS of a notification verify at their own signedDate.
            if case .object(let data)? = payload["data"] {
                for key in ["signedTransactionInfo", "signedRenewalInfo"] {
                    guard let nested = data[key]?.stringValue else { continue }
                    let inner = try SignedDataVerifier.object(nested.split(separator: ".")[1], "payload")
                    #expect(verdict(apple, nested, at: ms(inner["signedDate"]!.intValue!)) == "accept", "\(id) \(key)")
                }
            }
            // The payload re-encoded with one field changed, header and signature kept.
            var altered = payload
            altered["signedDate"] = .int(signed + 1)
            let parts = jws.split(separator: ".")
            let forged = parts[0] + "." + Base64URL.encode(JSON.object(altered).bytes) + "." + parts[2]
            #expect(verdict(apple, forged, at: ms(signed)) == "invalid_signature", "\(id) altered")
        }
    }

    /// Apple's test CA and mock signed data, with the configured root as Apple's tests configure it.
    @Test func appleTestMaterial() throws {
        let material = try AppStoreVectors.json("apple-lib-test-material.json")
        let certs = try #require(material["certs"])
        func cert(_ name: String) throws -> Certificate { try AppStoreVectors.certificate(certs[name]) }
        let root = try cert("root")
        let verifier = SignedDataVerifier(roots: [root])
        let effective = ms(material["dates"]!["effectiveDateMs"]!.intValue!)
        let expired = ms(material["dates"]!["expiredDateMs"]!.intValue!)
        func chainOutcome(_ chain: [Certificate], at date: Timestamp, _ v: SignedDataVerifier) -> String {
            do {
                try v.validate(chain, at: date)
                return "accept"
            } catch {
                return error.reason
            }
        }
        #expect(chainOutcome([try cert("leaf"), try cert("intermediate"), root], at: effective, verifier) == "accept")
        #expect(chainOutcome([try cert("leafForIntermediateWrongOid"), try cert("intermediateWrongOid"), root], at: effective, verifier) == "untrusted_chain")
        #expect(chainOutcome([try cert("leafWrongOid"), try cert("intermediate"), root], at: effective, verifier) == "untrusted_chain")
        #expect(chainOutcome([try cert("leaf"), try cert("intermediate"), root], at: expired, verifier) == "untrusted_chain")
        let real = SignedDataVerifier(roots: [try AppStoreVectors.appleRoot])
        #expect(chainOutcome([try cert("leaf"), try cert("intermediate"), root], at: effective, real) == "untrusted_chain")

        let mock = try #require(material["mockSignedData"])
        for name in ["testNotification", "transactionInfo", "renewalInfo", "wrongBundleId"] {
            let jws = try #require(mock[name]?["jws"]?.stringValue)
            #expect(verdict(verifier, jws, at: effective) == "accept", "\(name)")
            #expect(verdict(real, jws, at: effective) == "untrusted_chain", "\(name) against the real root")
        }
        #expect(verdict(verifier, try #require(mock["missingX5CHeaderClaim"]?["jws"]?.stringValue), at: effective) == "malformed_jws")
        for malformed in ["a.b.c.d", "a.b.c", "", "..", "e30.e30."] {
            #expect(verdict(verifier, malformed, at: effective) == "malformed_jws", "\(malformed)")
        }
        // The Xcode-signed transaction has a one-certificate chain: never accepted by a store verifier.
        let xcode = try #require(material["xcodeSignedData"]?["xcode-signed-transaction"]?["jws"]?.stringValue)
        #expect(verdict(verifier, xcode, at: effective) != "accept")
    }

    /// JWS signed here with Apple's published test keys: every way of getting the header, the chain or the
    /// signature wrong is refused with its reason.
    @Test func forgeriesAreRefused() throws {
        let material = try AppStoreVectors.json("apple-lib-test-material.json")
        let certs = try #require(material["certs"])
        let root = try AppStoreVectors.certificate(certs["root"])
        let verifier = SignedDataVerifier(roots: [root])
        let leafKey = try P256.Signing.PrivateKey(pemRepresentation: try #require(material["testKeys"]?["leafEcPrivateKeyPem"]?.stringValue))
        let at = ms(material["dates"]!["effectiveDateMs"]!.intValue!)
        let x5c: [JSON] = ["leaf", "intermediate", "root"].map { certs[$0]! }
        let payload: JSON = ["bundleId": "com.example", "environment": "Sandbox", "signedDate": .int(at.milliseconds)]

        func jws(_ header: JSON, key: P256.Signing.PrivateKey = leafKey, body: JSON = payload) throws -> String {
            let input = Base64URL.encode(header.bytes) + "." + Base64URL.encode(body.bytes)
            let signature = try key.signature(for: Array(input.utf8)).rawRepresentation
            return input + "." + Base64URL.encode(Array(signature))
        }
        #expect(verdict(verifier, try jws(["alg": "ES256", "x5c": .array(x5c)]), at: at) == "accept")
        // The signature of another key, or none at all.
        #expect(verdict(verifier, try jws(["alg": "ES256", "x5c": .array(x5c)], key: P256.Signing.PrivateKey()), at: at) == "invalid_signature")
        let unsigned = Base64URL.encode((["alg": "none", "x5c": .array(x5c)] as JSON).bytes) + "." + Base64URL.encode(payload.bytes) + "."
        #expect(verdict(verifier, unsigned, at: at) == "invalid_signature")
        // HS256 keyed with the leaf's public key (the classic algorithm confusion).
        let header = Base64URL.encode((["alg": "HS256", "x5c": .array(x5c)] as JSON).bytes) + "." + Base64URL.encode(payload.bytes)
        let leafSPKI = try AppStoreVectors.certificate(certs["leaf"]).publicKey.subjectPublicKeyInfoBytes
        let mac = HMAC<SHA256>.authenticationCode(for: Array(header.utf8), using: SymmetricKey(data: leafSPKI))
        #expect(verdict(verifier, header + "." + Base64URL.encode(Array(mac)), at: at) == "invalid_signature")
        // Chains of two and of four, and garbage in x5c.
        #expect(verdict(verifier, try jws(["alg": "ES256", "x5c": .array(Array(x5c.prefix(2)))]), at: at) == "untrusted_chain")
        #expect(verdict(verifier, try jws(["alg": "ES256", "x5c": .array(x5c + [x5c[2]])]), at: at) == "untrusted_chain")
        #expect(verdict(verifier, try jws(["alg": "ES256", "x5c": ["not base64!", x5c[1], x5c[2]]]), at: at) == "malformed_jws")
        #expect(verdict(verifier, try jws(["alg": "ES256", "x5c": "MIIB"]), at: at) == "malformed_jws")
        // A root in the header that is not the configured one (Apple's real root here).
        let realRoot = try AppStoreVectors.json("apple-real-chain.json")["root"]!["derBase64"]!
        #expect(verdict(verifier, try jws(["alg": "ES256", "x5c": [x5c[0], x5c[1], realRoot]]), at: at) == "untrusted_chain")
        // Outside the certificates' validity.
        #expect(verdict(verifier, try jws(["alg": "ES256", "x5c": .array(x5c)]), at: ms(2_280_946_846_000)) == "untrusted_chain")
        // Oversized.
        let huge = try jws(["alg": "ES256", "x5c": .array(x5c)], body: ["pad": .string(String(repeating: "x", count: 1 << 20))])
        #expect(verdict(verifier, huge, at: at) == "malformed_jws")
    }
}
