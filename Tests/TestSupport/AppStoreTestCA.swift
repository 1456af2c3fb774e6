import Crypto
import Foundation
import JSON
import SwiftASN1
import X509

/// A certificate authority made in the tests, shaped like Apple's App Store signing chain: a root, an
/// intermediate carrying 1.2.840.113635.100.6.2.1 and a leaf carrying 1.2.840.113635.100.6.11.1. It
/// signs transactions, renewal info and notifications as Apple would, and makes the broken variants
/// (no marker, expired, another root) the verifier must refuse.
public final class AppStoreTestCA: @unchecked Sendable {
    public static let leafOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    public static let intermediateOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    /// 2020-01-01 and 2040-01-01: the default validity.
    public static let start = Date(timeIntervalSince1970: 1_577_836_800)
    public static let end = Date(timeIntervalSince1970: 2_208_988_800)

    public let rootKey = P256.Signing.PrivateKey()
    public let root: Certificate
    public let intermediateKey = P256.Signing.PrivateKey()
    public let intermediate: Certificate
    public let leafKey = P256.Signing.PrivateKey()
    public let leaf: Certificate

    /// A new CA named `name` (two CAs never trust each other).
    public init(name: String = "healthkernel test root") {
        let rootName = Self.name(name)
        let rootKey = rootKey
        root = Self.uniform { try! Certificate(
            version: .v3, serialNumber: $0, publicKey: .init(rootKey.publicKey), notValidBefore: Self.start, notValidAfter: Self.end,
            issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try! Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(rootKey)) }
        intermediate = Self.intermediate(key: intermediateKey, marker: true, rootName: rootName, rootKey: rootKey)
        leaf = Self.leaf(key: leafKey, marker: true, from: Self.start, to: Self.end, issuer: intermediate.subject, issuerKey: intermediateKey)
    }

    static func name(_ cn: String) -> DistinguishedName {
        try! DistinguishedName {
            CommonName(cn)
            OrganizationName("healthkernel tests")
        }
    }

    static func intermediate(key: P256.Signing.PrivateKey, marker: Bool, rootName: DistinguishedName,
                             rootKey: P256.Signing.PrivateKey) -> Certificate {
        uniform { try! Certificate(
            version: .v3, serialNumber: $0, publicKey: .init(key.publicKey), notValidBefore: start, notValidAfter: end,
            issuer: rootName, subject: name("test App Store intermediate"), signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try! Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                if marker { Certificate.Extension(oid: intermediateOID, critical: false, value: [0x05, 0x00]) }
            },
            issuerPrivateKey: .init(rootKey)) }
    }

    static func leaf(key: P256.Signing.PrivateKey, marker: Bool, from: Date, to: Date, issuer: DistinguishedName,
                     issuerKey: P256.Signing.PrivateKey) -> Certificate {
        uniform { try! Certificate(
            version: .v3, serialNumber: $0, publicKey: .init(key.publicKey), notValidBefore: from, notValidAfter: to,
            issuer: issuer, subject: name("test App Store signing"), signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try! Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                if marker { Certificate.Extension(oid: leafOID, critical: false, value: [0x05, 0x00]) }
            },
            issuerPrivateKey: .init(issuerKey)) }
    }

    /// A certificate whose length depends on nothing random: a serial number of 20 bytes and a signature
    /// of 72 (ECDSA's are 70 to 72 bytes of DER). The simulation cuts what clients send at lengths drawn
    /// from its seed, so a receipt must have the same length in every run.
    static func uniform(_ make: (Certificate.SerialNumber) -> Certificate) -> Certificate {
        while true {
            let serial = Certificate.SerialNumber()
            guard serial.bytes.count == 20 else { continue }
            let c = make(serial)
            if c.signature.rawRepresentation.count == 72 { return c }
        }
    }

    /// The root, PEM: what a kernel's `appStore.rootCertificates` file holds.
    public var rootPEM: String { try! root.serializeAsPEM().pemString }

    /// A certificate as an `x5c` entry: base64 DER.
    public static func x5c(_ c: Certificate) -> String {
        var s = DER.Serializer()
        try! s.serialize(c)
        return Data(s.serializedBytes).base64EncodedString()
    }

    /// The chain leaf, intermediate, root as an `x5c` header holds it.
    public var chain: [String] { [leaf, intermediate, root].map(Self.x5c) }

    /// A leaf of this CA's intermediate with its own key: without the marker, or valid only from `from` to `to`.
    public func otherLeaf(marker: Bool = true, from: Date = start, to: Date = end) -> (Certificate, P256.Signing.PrivateKey) {
        let key = P256.Signing.PrivateKey()
        return (Self.leaf(key: key, marker: marker, from: from, to: to, issuer: intermediate.subject, issuerKey: intermediateKey), key)
    }

    /// An intermediate of this root without Apple's marker, with a marked leaf under it.
    public func unmarkedIntermediateChain() -> ([String], P256.Signing.PrivateKey) {
        let iKey = P256.Signing.PrivateKey(), lKey = P256.Signing.PrivateKey()
        let i = Self.intermediate(key: iKey, marker: false, rootName: root.subject, rootKey: rootKey)
        let l = Self.leaf(key: lKey, marker: true, from: Self.start, to: Self.end, issuer: i.subject, issuerKey: iKey)
        return ([l, i, root].map(Self.x5c), lKey)
    }

    /// `payload` signed as a JWS: ES256 by the leaf with the chain in `x5c`, unless told otherwise.
    public func sign(_ payload: JSON, alg: String = "ES256", x5c: [String]? = nil, key: P256.Signing.PrivateKey? = nil) -> String {
        let header: JSON = ["alg": .string(alg), "x5c": .array((x5c ?? chain).map(JSON.string))]
        let signingInput = Self.base64URL(Array(header.serialized.utf8)) + "." + Self.base64URL(Array(payload.serialized.utf8))
        let signature = try! (key ?? leafKey).signature(for: Array(signingInput.utf8))
        return signingInput + "." + Self.base64URL(Array(signature.rawRepresentation))
    }

    public static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// App Store payloads as Apple signs them, for tests: the fields a membership reads, dates in milliseconds.
public enum AppStorePayloads {
    public static let bundleId = "com.example.healthkernel"

    /// A subscription transaction.
    public static func transaction(id: String, original: String, product: String = "premium.monthly", purchase: Int64, expires: Int64?,
                                   signed: Int64, environment: String = "Sandbox", bundleId: String = bundleId,
                                   revoked: Int64? = nil, appAccountToken: String? = nil, type: String = "Auto-Renewable Subscription") -> JSON {
        var o = JSONObject([
            ("transactionId", .string(id)), ("originalTransactionId", .string(original)), ("bundleId", .string(bundleId)),
            ("productId", .string(product)), ("purchaseDate", .int(purchase)), ("originalPurchaseDate", .int(purchase)),
            ("quantity", 1), ("type", .string(type)), ("inAppOwnershipType", "PURCHASED"), ("signedDate", .int(signed)),
            ("environment", .string(environment)), ("transactionReason", "PURCHASE"), ("storefront", "USA"),
        ])
        if let expires { o["expiresDate"] = .int(expires) }
        if let revoked { o["revocationDate"] = .int(revoked); o["revocationReason"] = 0 }
        if let appAccountToken { o["appAccountToken"] = .string(appAccountToken) }
        return .object(o)
    }

    /// Renewal info.
    public static func renewal(original: String, product: String = "premium.monthly", autoRenew: Int64 = 1, grace: Int64? = nil,
                               signed: Int64, environment: String = "Sandbox") -> JSON {
        var o = JSONObject([
            ("originalTransactionId", .string(original)), ("autoRenewProductId", .string(product)), ("productId", .string(product)),
            ("autoRenewStatus", .int(autoRenew)), ("signedDate", .int(signed)), ("environment", .string(environment)),
            ("recentSubscriptionStartDate", .int(signed)), ("renewalDate", .int(signed)),
        ])
        if let grace { o["gracePeriodExpiresDate"] = .int(grace) }
        return .object(o)
    }

    /// A notification V2 payload around signed transaction and renewal info.
    public static func notification(uuid: String, type: String, subtype: String? = nil, signed: Int64, transaction: String?,
                                    renewal: String? = nil, status: Int64? = nil, environment: String = "Sandbox",
                                    bundleId: String = bundleId, appAppleId: Int64? = nil) -> JSON {
        var data = JSONObject([("bundleId", .string(bundleId)), ("bundleVersion", "1"), ("environment", .string(environment))])
        if let appAppleId { data["appAppleId"] = .int(appAppleId) }
        if let transaction { data["signedTransactionInfo"] = .string(transaction) }
        if let renewal { data["signedRenewalInfo"] = .string(renewal) }
        if let status { data["status"] = .int(status) }
        var o = JSONObject([("notificationType", .string(type)), ("notificationUUID", .string(uuid)), ("data", .object(data)),
                            ("version", "2.0"), ("signedDate", .int(signed))])
        if let subtype { o["subtype"] = .string(subtype) }
        return .object(o)
    }
}
