import Chrono
import Crypto
import DomainSupport
import FoundationEssentials
import Dispatch
import JSON
import JSONParsing
import SwiftASN1
import Threads
@_spi(FixedExpiryValidationTime) import X509

/// Apple's marker extensions: an App Store signing leaf and the Apple Worldwide Developer Relations
/// intermediate that issues it.
enum AppleOID {
    static let leaf: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    static let intermediate: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
}

/// Why App Store signed data does not verify; `reason` is the `data.reason` of the -32010 answer.
public enum SignedDataFailure: Error, Equatable, CustomStringConvertible {
    /// Not three base64url segments of JSON, or an undecodable certificate.
    case malformed(String)
    /// The certificates do not chain to a trusted root at the effective date, or lack Apple's markers.
    case untrustedChain(String)
    /// Not an ES256 signature by the leaf's key over the header and payload.
    case invalidSignature(String)

    public var reason: String {
        switch self {
        case .malformed: return "malformed_jws"
        case .untrustedChain: return "untrusted_chain"
        case .invalidSignature: return "invalid_signature"
        }
    }

    public var description: String {
        switch self {
        case .malformed(let m), .untrustedChain(let m), .invalidSignature(let m): return m
        }
    }
}

/// Verifies App Store signed data (StoreKit 2 transactions, renewal info, Server Notifications V2): a JWS
/// whose `x5c` header carries leaf, intermediate and root. The checks follow Apple's
/// `SignedDataVerifier` in its order: the JWS shape, the chain (leaf -> intermediate -> a configured
/// root, RFC 5280 at the effective date, Apple's marker extensions), then the ES256 signature with the
/// leaf's key. Bundle, environment and product are the caller's checks, on the returned payload.
public struct SignedDataVerifier: Sendable {
    /// The trusted roots.
    let roots: [Certificate]
    /// Chains that validated, and when they are valid.
    let validated = ValidatedChains()

    /// A verifier trusting `roots`.
    public init(roots: [Certificate]) {
        self.roots = roots
    }

    /// A verifier trusting the roots in `pem` (one or more PEM certificates).
    public init(pem: String) throws {
        roots = try PEMDocument.parseMultiple(pemString: pem).map { try Certificate(pemDocument: $0) }
    }

    /// The longest JWS accepted; real ones are 3-6 KiB.
    public static let maxBytes = 64 * 1024

    /// The payload of `jws` once it verifies, with certificate validity judged at the instant
    /// `effectiveDate` picks from the payload (Apple, offline: the payload's `signedDate`).
    public func verify(_ jws: String, effectiveDate: (JSONObject) -> Timestamp) throws(SignedDataFailure) -> JSONObject {
        guard jws.utf8.count <= Self.maxBytes else { throw .malformed("the JWS is longer than \(Self.maxBytes) bytes") }
        // Bytes, not Characters: splitting a 16 KiB notification by grapheme cost more than its signatures.
        let bytes = Array(jws.utf8)
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("a JWS has three segments, not \(parts.count)") }
        let header = try Self.object(parts[0], "header")
        let payload = try Self.object(parts[1], "payload")
        guard let signature = Base64URL.decode(parts[2]) else { throw .malformed("the signature is not base64url") }
        let date = effectiveDate(payload)
        // Apple signs with one leaf for months: a chain that validated once is valid at any date within
        // all three certificates' validity, since every other check of it is independent of the date.
        let known = Self.chainKey(header).flatMap { validated.leafKey(for: $0, at: date) }
        let leafKey: P256.Signing.PublicKey?
        if let known {
            leafKey = known
        } else {
            let chain = try Self.certificates(header)
            let root = try validate(chain, at: date)
            leafKey = P256.Signing.PublicKey(chain[0].publicKey)
            if let chainKey = Self.chainKey(header) { validated.insert(chainKey, chain: [chain[0], chain[1], root], leafKey: leafKey) }
        }
        // Only ES256 is accepted, whatever the header claims: `none` or HS256 keyed with the leaf's
        // public key must never verify.
        guard header["alg"] == .string("ES256") else { throw .invalidSignature("alg must be ES256") }
        guard let key = leafKey else {
            throw .invalidSignature("the leaf's key is not a P-256 key")
        }
        guard let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
              key.isValidSignature(ecdsa, for: bytes[..<parts[1].endIndex]) else {
            throw .invalidSignature("the signature does not verify with the leaf's key")
        }
        return payload
    }

    /// A segment decoded from base64url and parsed as a JSON object.
    static func object(_ segment: Substring, _ what: String) throws(SignedDataFailure) -> JSONObject {
        try object(ArraySlice(segment.utf8), what)
    }

    static func object(_ segment: ArraySlice<UInt8>, _ what: String) throws(SignedDataFailure) -> JSONObject {
        guard let bytes = Base64URL.decode(segment) else { throw .malformed("the \(what) is not base64url") }
        guard case .object(let object)? = try? JSON.parse(bytes) else { throw .malformed("the \(what) is not a JSON object") }
        return object
    }

    /// The header's chain as the cache of validated chains knows it: its three entries as sent.
    static func chainKey(_ header: JSONObject) -> String? {
        guard case .array(let items)? = header["x5c"], items.count == 3 else { return nil }
        let texts = items.compactMap(\.stringValue)
        return texts.count == 3 ? texts.joined(separator: ".") : nil
    }

    /// The `x5c` certificates: exactly leaf, intermediate and root, each base64 DER.
    static func certificates(_ header: JSONObject) throws(SignedDataFailure) -> [Certificate] {
        guard case .array(let items)? = header["x5c"] else { throw .malformed("the header has no x5c certificate chain") }
        guard items.count == 3 else {
            throw .untrustedChain("x5c must hold 3 certificates (leaf, intermediate, root), not \(items.count)")
        }
        var out: [Certificate] = []
        for (i, item) in items.enumerated() {
            guard case .string(let text) = item, let der = Data(base64Encoded: text),
                  let certificate = try? Certificate(derEncoded: Array(der)) else {
                throw .malformed("x5c[\(i)] is not a base64 DER certificate")
            }
            out.append(certificate)
        }
        return out
    }

    /// Checks the chain at `date`: the header's root must be a trusted one (the same certificate, or a
    /// re-issue with the same subject and key), and leaf -> intermediate must validate up to the
    /// configured root, never up to the header's copy. Returns that configured root.
    @discardableResult
    func validate(_ chain: [Certificate], at date: Timestamp) throws(SignedDataFailure) -> Certificate {
        guard roots.contains(where: { $0 == chain[2] || ($0.subject == chain[2].subject && $0.publicKey == chain[2].publicKey) }) else {
            throw .untrustedChain("the root in x5c is not a trusted root")
        }
        let when = Date(timeIntervalSince1970: Double(date.milliseconds) / 1000)
        let roots = self.roots
        let (leaf, intermediate) = (chain[0], chain[1])
        let result = blocking {
            var verifier = Verifier(rootCertificates: CertificateStore(roots)) {
                RFC5280Policy(fixedExpiryValidationTime: when)
                AppleMarkerPolicy()
            }
            return await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate]))
        }
        switch result {
        case .validCertificate(let path):
            // Exactly leaf, the given intermediate, a configured root: no other path is accepted.
            guard path.count == 3, path[1] == intermediate else { throw .untrustedChain("the chain does not run through the given intermediate") }
            return path[2]
        case .couldNotValidate(let failures):
            let why = failures.first.map { "\($0.policyFailureReason)" } ?? "no path to a trusted root"
            throw .untrustedChain("the certificate chain does not validate at \(date): \(why)")
        }
    }
}

/// Chains that validated up to a trusted root, by their `x5c` entries as sent: the interval in which all
/// three certificates are valid, and the leaf's key. Validating is the costly part of verifying (two
/// P-384 signatures, parsing three certificates, the policy walk); with a known chain a JWS costs its
/// own signature. Bounded: cleared when full.
final class ValidatedChains: Sendable {
    private let known = Locked<[String: (window: ClosedRange<Date>, leafKey: P256.Signing.PublicKey?)]>([:])
    static let capacity = 64

    /// The leaf key of chain `key` if it validated before and `date` is within its validity.
    func leafKey(for key: String, at date: Timestamp) -> P256.Signing.PublicKey?? {
        let when = Date(timeIntervalSince1970: Double(date.milliseconds) / 1000)
        return known.withLock { known in
            guard let entry = known[key], entry.window.contains(when) else { return nil }
            return .some(entry.leafKey)
        }
    }

    /// Remembers that `chain` (leaf, intermediate, the configured root) validated.
    func insert(_ key: String, chain: [Certificate], leafKey: P256.Signing.PublicKey?) {
        guard let from = chain.map(\.notValidBefore).max(), let to = chain.map(\.notValidAfter).min(), from <= to else { return }
        known.withLock { known in
            if known.count >= Self.capacity { known.removeAll() }
            known[key] = (from...to, leafKey)
        }
    }
}

/// Apple's marker extensions on the leaf and the intermediate.
struct AppleMarkerPolicy: VerifierPolicy {
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = [AppleOID.leaf, AppleOID.intermediate]

    mutating func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        guard chain.count == 3 else { return .failsToMeetPolicy(reason: "the chain is not leaf, intermediate, root") }
        guard chain[0].extensions[oid: AppleOID.leaf] != nil else {
            return .failsToMeetPolicy(reason: "the leaf lacks Apple's App Store marker 1.2.840.113635.100.6.11.1")
        }
        guard chain[1].extensions[oid: AppleOID.intermediate] != nil else {
            return .failsToMeetPolicy(reason: "the intermediate lacks Apple's marker 1.2.840.113635.100.6.2.1")
        }
        return .meetsPolicy
    }
}

/// Runs `work` (swift-certificates' verifier is async, the kernel's serving thread is not) and waits
/// for its result. The work's jobs run on a queue of their own (`VerificationExecutor`), never on the
/// cooperative pool, whose few threads a synchronous caller may be one of: waiting for the pool from the
/// pool could deadlock.
func blocking<T: Sendable>(_ work: @escaping @Sendable () async -> T) -> T {
    let result = Locked<T?>(nil)
    Task.detached(executorPreference: VerificationExecutor.shared) {
        let value = await work()
        result.withLock { $0 = value }
        result.wake()
    }
    let value = result.withLock(waitingUntil: { $0 != nil }, releasedOutside: true) { $0 }
    guard let value else { preconditionFailure("woken without a result") }
    return value
}

/// A task executor on one serial dispatch queue.
final class VerificationExecutor: TaskExecutor, @unchecked Sendable {
    static let shared = VerificationExecutor()
    private let queue = DispatchQueue(label: "healthkernel.appstore.verify")

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// Carries a result from the task to the waiting thread (the semaphore orders the two accesses).

/// Apple Root CA - G3, the default trusted root (SHA-256 63343ABF…9179, valid 2014-04-30 to 2039-04-30),
/// as Apple publishes it at https://www.apple.com/certificateauthority/.
public let appleRootCAG3 = """
-----BEGIN CERTIFICATE-----
MIICQzCCAcmgAwIBAgIILcX8iNLFS5UwCgYIKoZIzj0EAwMwZzEbMBkGA1UEAwwS
QXBwbGUgUm9vdCBDQSAtIEczMSYwJAYDVQQLDB1BcHBsZSBDZXJ0aWZpY2F0aW9u
IEF1dGhvcml0eTETMBEGA1UECgwKQXBwbGUgSW5jLjELMAkGA1UEBhMCVVMwHhcN
MTQwNDMwMTgxOTA2WhcNMzkwNDMwMTgxOTA2WjBnMRswGQYDVQQDDBJBcHBsZSBS
b290IENBIC0gRzMxJjAkBgNVBAsMHUFwcGxlIENlcnRpZmljYXRpb24gQXV0aG9y
aXR5MRMwEQYDVQQKDApBcHBsZSBJbmMuMQswCQYDVQQGEwJVUzB2MBAGByqGSM49
AgEGBSuBBAAiA2IABJjpLz1AcqTtkyJygRMc3RCV8cWjTnHcFBbZDuWmBSp3ZHtf
TjjTuxxEtX/1H7YyYl3J6YRbTzBPEVoA/VhYDKX1DyxNB0cTddqXl5dvMVztK517
IDvYuVTZXpmkOlEKMaNCMEAwHQYDVR0OBBYEFLuw3qFYM4iapIqZ3r6966/ayySr
MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoGCCqGSM49BAMDA2gA
MGUCMQCD6cHEFl4aXTQY2e3v9GwOAEZLuN+yRhHFD/3meoyhpmvOwgPUnPWTxnS4
at+qIxUCMG1mihDK1A3UT82NQz60imOlM27jbdoXt2QfyFMm+YhidDkLF1vLUagM
6BgD56KyKA==
-----END CERTIFICATE-----
"""
