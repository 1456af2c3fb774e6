import Chrono
import DomainSupport
import Crypto
import CryptoExtras
import FoundationEssentials
import JSON
import JSONParsing

/// Why a token was refused; `reason` is the `data.reason` slug.
public struct TokenError: Error, Equatable, Sendable {
    public let reason: String
    public let message: String

    static func invalid(_ message: String) -> TokenError { TokenError(reason: "invalid_token", message: message) }
    static let expired = TokenError(reason: "expired_token", message: "The token has expired")
}

/// A JWT split and decoded, before its signature is checked. Parsing is strict: three base64url parts,
/// header and payload JSON objects without duplicate keys (jansson rejects them), only the header
/// fields `alg`, `typ` and `kid`, and a bounded size.
public struct JWT: Sendable {
    /// Longest token accepted, in bytes.
    public static let maxBytes = 8192
    /// Header fields accepted; `jwk`, `jku`, `x5u`, `x5c`, `crit` and anything else are refused,
    /// because a token must never choose its own verification key.
    static let headerFields: Set<String> = ["alg", "typ", "kid"]

    public let header: JSONObject
    public let payload: JSONObject
    /// The `alg` header.
    public let algorithm: String
    /// The `kid` header, checked to be a short plain identifier.
    public let keyID: String?
    /// `header.payload`, the bytes the signature covers.
    let signingInput: [UInt8]
    let signature: [UInt8]

    /// Splits and decodes `token`.
    public init(_ token: String) throws(TokenError) {
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maxBytes else { throw .invalid("The token is too long") }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else { throw .invalid("The token is not a JWT") }
        guard !parts[2].isEmpty else { throw .invalid("The token has no signature") }
        guard let headerBytes = Base64URL.decode(parts[0]), let payloadBytes = Base64URL.decode(parts[1]),
              let signature = Base64URL.decode(parts[2]) else { throw .invalid("The token is not valid base64url") }
        guard case .object(let header)? = try? JSON.parse(headerBytes, maxDepth: 4) else {
            throw .invalid("The token header is not a JSON object")
        }
        guard case .object(let payload)? = try? JSON.parse(payloadBytes, maxDepth: 8) else {
            throw .invalid("The token payload is not a JSON object")
        }
        if let field = header.keys.first(where: { !Self.headerFields.contains($0) }) {
            throw .invalid("The token header field \(field) is not accepted")
        }
        guard case .string(let alg)? = header["alg"] else { throw .invalid("The token header has no alg") }
        if let typ = header["typ"] {
            guard let t = typ.stringValue, t.uppercased() == "JWT" else { throw .invalid("The token type is not JWT") }
        }
        var kid: String?
        if let k = header["kid"] {
            guard let s = k.stringValue, (1...128).contains(s.utf8.count),
                  s.utf8.allSatisfy({ $0 < 0x80 && (isAlphanumeric($0) || $0 == 0x2D || $0 == 0x5F || $0 == 0x2E) }),
                  !s.contains("..") else { throw .invalid("The token key id is not acceptable") }
            kid = s
        }
        self.header = header
        self.payload = payload
        self.algorithm = alg
        self.keyID = kid
        self.signingInput = Array(bytes[0..<(parts[0].count + 1 + parts[1].count)])
        self.signature = signature
    }

    /// Checks the signature with `key`, which must be for exactly this token's `alg`.
    func verify(with key: VerificationKey) throws(TokenError) {
        guard key.algorithm == algorithm else { throw .invalid("The token algorithm does not match its key") }
        guard key.verify(signature, signingInput) else { throw .invalid("The token signature does not verify") }
    }

    /// Checks `exp` (required), `nbf` and `iat` against `now` with `leeway` seconds either way.
    /// Time claims must be JSON numbers: a quoted number is refused.
    public func checkTimes(now: Timestamp, leeway: Int64 = 60) throws(TokenError) -> Int64 {
        let nowSeconds = Double(now.milliseconds) / 1000
        guard let exp = try timeClaim("exp") else { throw .invalid("The token has no exp") }
        guard nowSeconds <= exp + Double(leeway) else { throw .expired }
        if let nbf = try timeClaim("nbf"), nbf > nowSeconds + Double(leeway) { throw .invalid("The token is not valid yet") }
        if let iat = try timeClaim("iat"), iat > nowSeconds + Double(leeway) { throw .invalid("The token was issued in the future") }
        return Int64(exp.rounded(.down))
    }

    /// The latest time claim accepted: 9999-12-31. A provider's bug or a leaked key may sign `exp` 1e19,
    /// which no Int64 holds; such a token is `invalid_token`, never a trap.
    static let latestTime: Double = 253_402_300_799

    /// A time claim (seconds since 1970) within 0...`latestTime`, or nil when absent.
    func timeClaim(_ name: String) throws(TokenError) -> Double? {
        guard let value = try numericClaim(name) else { return nil }
        guard value >= 0, value <= Self.latestTime else { throw .invalid("The token claim \(name) is out of range") }
        return value
    }

    /// A numeric claim, or nil when absent.
    func numericClaim(_ name: String) throws(TokenError) -> Double? {
        switch payload[name] {
        case nil: return nil
        case .int(let i)?: return Double(i)
        case .double(let d)? where d.isFinite: return d
        default: throw .invalid("The token claim \(name) is not a number")
        }
    }

    /// A string claim, or nil when absent; any other type is refused.
    func stringClaim(_ name: String) throws(TokenError) -> String? {
        switch payload[name] {
        case nil: return nil
        case .string(let s)?: return s
        default: throw .invalid("The token claim \(name) is not a string")
        }
    }

    /// The `aud` claim as a list (a single string or an array of strings).
    func audiences() throws(TokenError) -> [String] {
        switch payload["aud"] {
        case nil: return []
        case .string(let s)?: return [s]
        case .array(let items)?:
            var out: [String] = []
            for item in items {
                guard let s = item.stringValue else { throw .invalid("The token audience is malformed") }
                out.append(s)
            }
            return out
        default: throw .invalid("The token audience is malformed")
        }
    }

    /// Builds and signs a token with `key` (HS256 for the kernel's own tokens).
    static func sign(claims: JSON, with key: VerificationKey, keyID: String? = nil) -> String {
        var header: JSON = ["alg": .string(key.algorithm), "typ": "JWT"]
        if let keyID { header = ["alg": .string(key.algorithm), "typ": "JWT", "kid": .string(keyID)] }
        let input = Base64URL.encode(header.bytes) + "." + Base64URL.encode(claims.bytes)
        let signature = key.sign?(Array(input.utf8)) ?? []
        return input + "." + Base64URL.encode(signature)
    }
}

private func isAlphanumeric(_ c: UInt8) -> Bool {
    (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
}

/// A key bound to exactly one algorithm, so a token can never pick how it is checked
/// (an HS256 token is never checked against an RSA key, whatever its header says).
/// Signatures are checked with swift-crypto, synchronously.
public struct VerificationKey: Sendable {
    /// `HS256`, `ES256` or `RS256`.
    public let algorithm: String
    /// Whether a signature is valid for the signing input.
    let verify: @Sendable (_ signature: [UInt8], _ input: [UInt8]) -> Bool
    /// Signs (HS256 only: the kernel signs its own tokens with its secret).
    let sign: (@Sendable ([UInt8]) -> [UInt8])?

    /// The HS256 key for `secret`.
    public static func hmac(_ secret: [UInt8]) -> VerificationKey {
        let key = SymmetricKey(data: secret)
        return VerificationKey(
            algorithm: "HS256",
            verify: { signature, input in HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: input, using: key) },
            sign: { input in Array(HMAC<SHA256>.authenticationCode(for: input, using: key)) }
        )
    }

    /// An ES256 key from a JWK's `x` and `y` (P-256 coordinates).
    static func es256(x: [UInt8], y: [UInt8]) throws -> VerificationKey {
        let key = try P256.Signing.PublicKey(x963Representation: [0x04] + x + y)
        return VerificationKey(algorithm: "ES256", verify: { signature, input in
            guard signature.count == 64, let s = try? P256.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.isValidSignature(s, for: input)
        }, sign: nil)
    }

    /// An RS256 key from a JWK's modulus `n` and exponent `e` (2048 bits or more).
    static func rs256(n: [UInt8], e: [UInt8]) throws -> VerificationKey {
        let key = try _RSA.Signing.PublicKey(n: n, e: e)
        return VerificationKey(algorithm: "RS256", verify: { signature, input in
            key.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: input, padding: .insecurePKCS1v1_5)
        }, sign: nil)
    }
}

/// Keys by id, loaded from a JWKS document.
public struct KeySet: Sendable {
    /// Keys by `kid`.
    public let keys: [String: VerificationKey]

    /// Algorithms accepted from JWKS documents.
    static let asymmetric: Set<String> = ["ES256", "RS256"]

    /// No keys.
    public init(keys: [String: VerificationKey] = [:]) { self.keys = keys }

    /// Loads every signing key with a `kid` from a JWKS document: EC keys on P-256 as ES256, RSA keys as
    /// RS256. A key with another curve, algorithm or use is skipped; a malformed one is an error.
    public static func load(jwks bytes: [UInt8]) throws -> KeySet {
        guard case .object(let root) = try JSON.parse(bytes), case .array(let items)? = root["keys"] else {
            throw AuthSetupError("a JWKS document must be an object with a keys array")
        }
        var keys: [String: VerificationKey] = [:]
        for item in items {
            guard let kid = item["kid"]?.stringValue, item["use"] == nil || item["use"] == "sig" else { continue }
            func field(_ name: String) throws -> [UInt8] {
                guard let s = item[name]?.stringValue, let b = Base64URL.decode(Array(s.utf8)) else {
                    throw AuthSetupError("key \(kid) has no valid \(name)")
                }
                return b
            }
            switch (item["kty"]?.stringValue, item["alg"]?.stringValue) {
            case ("EC", "ES256"?), ("EC", nil):
                guard item["crv"] == "P-256" else { continue }
                keys[kid] = try VerificationKey.es256(x: try field("x"), y: try field("y"))
            case ("RSA", "RS256"?), ("RSA", nil):
                keys[kid] = try VerificationKey.rs256(n: try field("n"), e: try field("e"))
            default:
                continue
            }
        }
        return KeySet(keys: keys)
    }
}

/// A problem with the auth configuration that stops start-up.
public struct AuthSetupError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
