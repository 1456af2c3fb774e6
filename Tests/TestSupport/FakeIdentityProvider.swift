import Crypto
import Foundation
import JSON

/// An OpenID Connect provider ("google") on a loopback port for tests: its JWKS at `jwksURL`, which the
/// test changes to rotate keys, with a Cache-Control the test picks; it counts the fetches and signs id
/// tokens (ES256) with keys of its own.
public final class FakeIdentityProvider: @unchecked Sendable {
    public let issuer = "https://accounts.google.com"
    private let lock = NSLock()
    private var document = #"{"keys":[]}"#
    private var cacheControl = "public, max-age=3600"
    private var served = 0
    private var server: LoopbackHTTPServer!

    public init() {
        // Held strongly, as the listener's threads hold the server: a call may still be answering (a slow
        // answer's delay) after the test let go of it.
        server = LoopbackHTTPServer { [self] request in
            lock.withLock {
                served += 1
                return request.path == "/jwks" ? .init(headers: [("Cache-Control", cacheControl)], body: Array(document.utf8)) : .init(status: 404)
            }
        }
    }

    public var jwksURL: String { server.baseURL + "/jwks" }
    /// Fetches of the JWKS so far.
    public var fetches: Int { lock.withLock { served } }

    /// Serves these public keys (by kid) from now on.
    public func publish(_ keys: [(kid: String, key: P256.Signing.PublicKey)]) {
        let text = Self.jwks(keys)
        lock.withLock { document = text }
    }

    /// Serves `text` as the JWKS document from now on (a broken one, say).
    public func serve(_ text: String) { lock.withLock { document = text } }

    /// A JWKS document with these EC P-256 keys.
    public static func jwks(_ keys: [(kid: String, key: P256.Signing.PublicKey)]) -> String {
        let items: [JSON] = keys.map { kid, key in
            let raw = Array(key.x963Representation)
            return ["kty": "EC", "crv": "P-256", "kid": .string(kid), "alg": "ES256", "use": "sig",
                    "x": .string(base64URL(raw[1..<33])), "y": .string(base64URL(raw[33..<65]))]
        }
        return JSON.object(JSONObject([("keys", .array(items))])).serialized
    }

    /// An id token for `audience` about `subject`, signed by `key` and naming `kid`, valid from `issuedAt` for 10 minutes.
    public func idToken(kid: String, key: P256.Signing.PrivateKey, audience: String, subject: String = "g-1", issuedAt: Int64) throws -> String {
        let header = Self.base64URL(Array(#"{"alg":"ES256","kid":"\#(kid)","typ":"JWT"}"#.utf8))
        let payload = Self.base64URL(Array(#"{"iss":"\#(issuer)","aud":"\#(audience)","sub":"\#(subject)","iat":\#(issuedAt),"exp":\#(issuedAt + 600)}"#.utf8))
        let signature = try key.signature(for: Array("\(header).\(payload)".utf8)).rawRepresentation
        return "\(header).\(payload).\(Self.base64URL(Array(signature)))"
    }

    static func base64URL<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
