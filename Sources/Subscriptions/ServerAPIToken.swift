import Chrono
import Crypto
import DomainSupport
import JSON

/// The bearer token of calls to Apple's App Store Server API: an ES256 JWT signed with the app's
/// in-app purchase key (the `.p8` file App Store Connect hands out, PKCS#8 PEM), as Apple documents:
/// header `alg`, `kid`, `typ`; claims `iss` (the issuer id), `iat`, `exp` (at most an hour later),
/// `aud: "appstoreconnect-v1"`, `bid` (the bundle id). A token is reused until five minutes before it
/// expires, so a refresh of thousands of memberships signs a handful.
public struct ServerAPIToken {
    /// Why a key cannot sign.
    public struct KeyError: Error, CustomStringConvertible {
        public let description: String
    }

    let key: P256.Signing.PrivateKey
    let keyId: String
    let issuerId: String
    let bundleId: String
    /// Lifetime of a token (Apple refuses more than an hour).
    let ttlSeconds: Int64
    private var current: (token: String, expiresAt: Int64)?

    /// A signer from the `.p8` file's text. Throws when it is not a P-256 private key in PKCS#8 PEM
    /// (the message never quotes the key).
    public init(p8 pem: String, keyId: String, issuerId: String, bundleId: String, ttlSeconds: Int64 = 3600) throws(KeyError) {
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: pem)
        } catch {
            throw KeyError(description: "is not an App Store Connect in-app purchase key (a P-256 private key in PKCS#8 PEM)")
        }
        guard (60...3600).contains(ttlSeconds) else { throw KeyError(description: "token lifetime must be 60 to 3600 seconds") }
        (self.keyId, self.issuerId, self.bundleId, self.ttlSeconds) = (keyId, issuerId, bundleId, ttlSeconds)
    }

    /// A token valid at `now` for at least five more minutes: the last one while it is, else a new one.
    public mutating func token(now: Timestamp) throws(KeyError) -> String {
        if let current, current.expiresAt - now.seconds > 300 { return current.token }
        let fresh = try sign(now: now)
        current = (fresh, now.seconds + ttlSeconds)
        return fresh
    }

    /// A new token issued at `now`.
    func sign(now: Timestamp) throws(KeyError) -> String {
        let header: JSON = ["alg": "ES256", "kid": .string(keyId), "typ": "JWT"]
        let claims: JSON = ["iss": .string(issuerId), "iat": .int(now.seconds), "exp": .int(now.seconds + ttlSeconds),
                            "aud": "appstoreconnect-v1", "bid": .string(bundleId)]
        let input = Base64URL.encode(Array(header.serialized.utf8)) + "." + Base64URL.encode(Array(claims.serialized.utf8))
        do {
            // JWS wants the signature as r || s, 32 bytes each, which is the raw representation.
            let signature = try key.signature(for: Array(input.utf8))
            return input + "." + Base64URL.encode(Array(signature.rawRepresentation))
        } catch {
            throw KeyError(description: "signing failed")
        }
    }
}
