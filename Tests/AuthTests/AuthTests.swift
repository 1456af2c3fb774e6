import Chrono
import Crypto
import DomainSupport
import CryptoExtras
import Foundation
import JSON
import JSONRPC
import JWTKit
import Testing
import Storage
import TestSupport
@testable import Auth
@testable import Store

let secret = "unit-test-secret-unit-test-secret-0123"
let alice = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
let t0 = Timestamp(seconds: 1_800_000_000)

func b64(_ s: String) -> String { Base64URL.encode(Array(s.utf8)) }

/// Signs `header.payload` (given as JSON text) with HS256 and `key`.
func hs256(header: String = #"{"alg":"HS256","typ":"JWT"}"#, _ payload: String, key: String = secret) -> String {
    let input = b64(header) + "." + b64(payload)
    let mac = HMAC<SHA256>.authenticationCode(for: Array(input.utf8), using: SymmetricKey(data: Array(key.utf8)))
    return input + "." + Base64URL.encode(Array(mac))
}

func claims(sub: String = alice, exp: Int64 = t0.seconds + 3600, extra: String = "") -> String {
    #"{"sub":"\#(sub)","aud":"authenticated","role":"authenticated","iat":\#(t0.seconds),"exp":\#(exp)\#(extra)}"#
}

/// An auth service over a memory-only store.
final class AuthHarness {
    let store: any Storage
    let service: AuthService
    let tables: AuthTables

    init(_ configure: (inout AuthConfig) -> Void = { _ in }, secret current: String = secret, issuerKeys: KeySet = KeySet(),
         providerKeys: [String: KeySource] = [:]) throws {
        var config = AuthConfig()
        configure(&config)
        (store, tables) = try testStore { AuthTables($0) }
        service = try AuthService(config: config, secret: Array(current.utf8), issuerKeys: .fixed(issuerKeys),
                                  providerKeys: providerKeys, store: store, tables: tables)
    }

    /// The `data.reason` of refusing `token` for a user method, or nil when it is accepted.
    func refusal(_ token: String, at now: Timestamp = t0, requirement: AuthRequirement = .user) -> String? {
        do {
            _ = try service.authenticate(token: token, requirement: requirement, now: now)
            return nil
        } catch {
            return error.code == .unauthorized || error.code == .forbidden ? error.reason : "unexpected \(error.code)"
        }
    }
}

@Suite struct TokenAttackTests {
    @Test func aValidTokenPasses() throws {
        let h = try AuthHarness()
        #expect(h.refusal(hs256(claims())) == nil)
    }

    /// #54 item 1 (in part): a request that does not write does not look the account of a trusted
    /// token's user up (a database round trip it would not use): `needsAccount` is then "may have none",
    /// and `auth.user` still answers the stored account, made once. A request that writes gets the truth.
    @Test func onlyARequestThatWritesLooksTheAccountUp() throws {
        let h = try AuthHarness()
        let token = hs256(claims())
        func identity(writes: Bool) throws -> Identity? {
            defer { h.store.endRequest() }
            return try h.service.authenticate(token: token, requirement: .user, writes: writes, now: t0)
        }
        #expect(try identity(writes: true)?.needsAccount == true, "no account yet")
        let made = try h.service.user(try #require(try identity(writes: false)), now: t0)
        h.store.endRequest()
        #expect(try identity(writes: true)?.needsAccount == false, "looked up: there")
        #expect(try identity(writes: false)?.needsAccount == true, "not looked up")
        let again = try h.service.user(try #require(try identity(writes: false)), now: Timestamp(milliseconds: t0.milliseconds + 5000))
        h.store.endRequest()
        #expect(again.createdAt == made.createdAt, "the stored account, not a new one")
    }

    @Test func everyAttackIsRefusedAndChangesNothing() throws {
        let h = try AuthHarness({ $0.acceptedIssuers = ["https://good.example/auth/v1"] })
        let good = claims(extra: #","iss":"https://good.example/auth/v1""#)
        #expect(h.refusal(hs256(good)) == nil)
        let seqBefore = commitCount(h.store)
        let rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        var attacks: [String: String] = [
            "empty signature": b64(#"{"alg":"HS256","typ":"JWT"}"#) + "." + b64(good) + ".",
            "HS256 signed with an RSA public key as the secret": hs256(good, key: rsa.publicKey.pemRepresentation),
            "embedded jwk": hs256(header: #"{"alg":"HS256","jwk":{"kty":"oct","k":"AAAA"}}"#, good),
            "jku": hs256(header: #"{"alg":"HS256","jku":"https://evil.example/jwks"}"#, good),
            "x5u": hs256(header: #"{"alg":"HS256","x5u":"https://evil.example/cert"}"#, good),
            "x5c": hs256(header: #"{"alg":"HS256","x5c":["MIIB"]}"#, good),
            "kid path traversal": hs256(header: #"{"alg":"HS256","kid":"../../etc/passwd"}"#, good),
            "kid with NUL": hs256(header: #"{"alg":"HS256","kid":"a\u0000b"}"#, good),
            "expired": hs256(claims(exp: t0.seconds - 61, extra: #","iss":"https://good.example/auth/v1""#)),
            "nbf in the future": hs256(claims(extra: #","iss":"https://good.example/auth/v1","nbf":\#(t0.seconds + 120)"#)),
            "iat in the future": hs256(#"{"sub":"\#(alice)","aud":"authenticated","iss":"https://good.example/auth/v1","iat":\#(t0.seconds + 300),"exp":\#(t0.seconds + 3600)}"#),
            "wrong iss": hs256(claims(extra: #","iss":"https://evil.example/auth/v1""#)),
            "missing iss": hs256(claims()),
            "missing aud": hs256(#"{"sub":"\#(alice)","iss":"https://good.example/auth/v1","exp":\#(t0.seconds + 3600)}"#),
            "wrong aud": hs256(#"{"sub":"\#(alice)","aud":"anon","iss":"https://good.example/auth/v1","exp":\#(t0.seconds + 3600)}"#),
            "HS512": hs256(header: #"{"alg":"HS512","typ":"JWT"}"#, good),
            "malformed base64url": hs256(good).replacingOccurrences(of: ".", with: "+.", options: [], range: nil),
            "padding": hs256(good) + "=",
            "duplicate alg": hs256(header: #"{"alg":"HS256","alg":"none"}"#, good),
            "duplicate sub": hs256(#"{"sub":"\#(alice)","sub":"bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb","aud":"authenticated","iss":"https://good.example/auth/v1","exp":\#(t0.seconds + 3600)}"#),
            "100 KB token": hs256(claims(extra: #","iss":"https://good.example/auth/v1","pad":"\#(String(repeating: "x", count: 100_000))""#)),
            "header array": hs256(header: "[1]", good),
            "header string": hs256(header: #""HS256""#, good),
            "exp as a string": hs256(#"{"sub":"\#(alice)","aud":"authenticated","iss":"https://good.example/auth/v1","exp":"\#(t0.seconds + 3600)"}"#),
            "iat as a string": hs256(#"{"sub":"\#(alice)","aud":"authenticated","iss":"https://good.example/auth/v1","iat":"1","exp":\#(t0.seconds + 3600)}"#),
            "signed with another secret": hs256(good, key: "another-secret-another-secret-another"),
            "sub not a UUID": hs256(claims(sub: "admin", extra: #","iss":"https://good.example/auth/v1""#)),
            "not a JWT": "hello",
            "two parts": b64(#"{"alg":"HS256"}"#) + "." + b64(good),
            "payload not JSON": b64(#"{"alg":"HS256"}"#) + "." + b64("nope") + ".c2ln",
            // Correctly signed, absurd times (a provider's bug, a leaked key): refused, never a trap.
            "exp 1e19": hs256(#"{"sub":"\#(alice)","aud":"authenticated","iss":"https://good.example/auth/v1","exp":1e19}"#),
            "exp past Int64": hs256(#"{"sub":"\#(alice)","aud":"authenticated","iss":"https://good.example/auth/v1","exp":18446744073709551615}"#),
            "exp Int64.max": hs256(#"{"sub":"\#(alice)","aud":"authenticated","iss":"https://good.example/auth/v1","exp":9223372036854775807}"#),
            "negative iat": hs256(#"{"sub":"\#(alice)","aud":"authenticated","iss":"https://good.example/auth/v1","iat":-1e300,"exp":\#(t0.seconds + 3600)}"#),
            "nbf 1e308": hs256(#"{"sub":"\#(alice)","aud":"authenticated","iss":"https://good.example/auth/v1","nbf":1e308,"exp":\#(t0.seconds + 3600)}"#),
        ]
        for casing in ["none", "None", "NONE", "nOnE"] {
            attacks["alg \(casing)"] = b64(#"{"alg":"\#(casing)","typ":"JWT"}"#) + "." + b64(good) + "."
            attacks["alg \(casing), signed"] = hs256(header: #"{"alg":"\#(casing)","typ":"JWT"}"#, good)
        }
        for (name, token) in attacks.sorted(by: { $0.key < $1.key }) {
            #expect(h.refusal(token) != nil, "accepted: \(name)")
            #expect(h.refusal(token)?.hasSuffix("_token") == true, "\(name): \(String(describing: h.refusal(token)))")
        }
        #expect(commitCount(h.store) == seqBefore, "a refused token changed something")
    }

    @Test func leewayIsSixtySeconds() throws {
        let h = try AuthHarness()
        #expect(h.refusal(hs256(claims(exp: t0.seconds - 59))) == nil)
        #expect(h.refusal(hs256(claims(exp: t0.seconds - 61))) == "expired_token")
        #expect(h.refusal(hs256(claims(extra: #","nbf":\#(t0.seconds + 59)"#))) == nil)
        #expect(h.refusal(hs256(claims(extra: #","nbf":\#(t0.seconds + 61)"#))) == "invalid_token")
    }

    @Test func cachedTokensStillExpire() throws {
        let h = try AuthHarness()
        let token = hs256(claims(exp: t0.seconds + 10))
        #expect(h.refusal(token) == nil)
        #expect(h.refusal(token, at: t0.adding(seconds: 60)) == nil)
        #expect(h.refusal(token, at: t0.adding(seconds: 71)) == "expired_token")
    }

    @Test func serviceRole() throws {
        let h = try AuthHarness()
        let service = hs256(#"{"role":"service_role","exp":\#(t0.seconds + 60)}"#)
        #expect(h.refusal(service, requirement: .service) == nil)
        #expect(h.refusal(service, requirement: .user) == "user_token_required")
        #expect(h.refusal(hs256(claims()), requirement: .service) == "service_role_required")
        #expect(h.refusal(hs256(#"{"role":"service_role"}"#), requirement: .service) == "invalid_token")  // exp is required
    }

    @Test func asymmetricIssuerKeysFromJWKS() throws {
        let ec = P256.Signing.PrivateKey()
        let rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let keys = try KeySet.load(jwks: Array(jwks(ec: ("ec1", ec.publicKey), rsa: ("rsa1", rsa.publicKey)).utf8))
        #expect(Set(keys.keys.keys) == ["ec1", "rsa1"])
        let h = try AuthHarness(issuerKeys: keys)
        func signEC(_ header: String) -> String {
            let input = b64(header) + "." + b64(claims())
            return input + "." + Base64URL.encode(Array(try! ec.signature(for: Array(input.utf8)).rawRepresentation))
        }
        func signRSA(_ header: String) -> String {
            let input = b64(header) + "." + b64(claims())
            return input + "." + Base64URL.encode(Array(try! rsa.signature(for: Array(input.utf8), padding: .insecurePKCS1v1_5).rawRepresentation))
        }
        #expect(h.refusal(signEC(#"{"alg":"ES256","kid":"ec1"}"#)) == nil)
        #expect(h.refusal(signRSA(#"{"alg":"RS256","kid":"rsa1"}"#)) == nil)
        #expect(h.refusal(signEC(#"{"alg":"ES256","kid":"unknown"}"#)) == "invalid_token")
        #expect(h.refusal(signEC(#"{"alg":"ES256"}"#)) == "invalid_token")
        #expect(h.refusal(signRSA(#"{"alg":"RS256","kid":"ec1"}"#)) == "invalid_token")  // the key decides the algorithm
        #expect(h.refusal(signEC(#"{"alg":"RS256","kid":"ec1"}"#)) == "invalid_token")
    }
}

/// A JWKS document for the given public keys.
func jwks(ec: (String, P256.Signing.PublicKey)? = nil, rsa: (String, _RSA.Signing.PublicKey)? = nil) throws -> String {
    var keys: [JSON] = []
    if let (kid, key) = ec {
        let raw = Array(key.x963Representation)
        keys.append(["kty": "EC", "crv": "P-256", "kid": .string(kid), "alg": "ES256", "use": "sig",
                     "x": .string(Base64URL.encode(Array(raw[1..<33]))), "y": .string(Base64URL.encode(Array(raw[33..<65])))])
    }
    if let (kid, key) = rsa {
        let p = try key.getKeyPrimitives()
        keys.append(["kty": "RSA", "kid": .string(kid), "alg": "RS256", "use": "sig",
                     "n": .string(Base64URL.encode(Array(p.modulus))), "e": .string(Base64URL.encode(Array(p.publicExponent)))])
    }
    return JSON.object(JSONObject([("keys", .array(keys))])).serialized
}

/// OpenID Connect id token claims, signed by jwt-kit in these tests: an independent implementation.
struct IDClaims: JWTPayload {
    var iss: String
    var sub: String
    var aud: [String]
    var exp: Int
    var iat: Int
    var email: String?
    var email_verified: Bool?
    var azp: String?
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

@Suite struct AccountTests {
    @Test func throttlesAfterFiveFailures() throws {
        let h = try AuthHarness()
        _ = try h.service.signUp(email: "ann@example.com", password: "right password", now: t0)
        for i in 0..<5 {
            #expect(throws: AuthError.invalidCredentials) {
                _ = try h.service.signIn(email: "ann@example.com", password: "wrong \(i)", now: t0)
            }
        }
        #expect(throws: AuthError.tooManyAttempts) {
            _ = try h.service.signIn(email: "ann@example.com", password: "right password", now: t0.adding(seconds: 60))
        }
        // Other emails are not affected, and the window passes.
        #expect(throws: AuthError.invalidCredentials) {
            _ = try h.service.signIn(email: "bob@example.com", password: "whatever1", now: t0)
        }
        _ = try h.service.signIn(email: "ann@example.com", password: "right password", now: t0.adding(seconds: 15 * 60 + 1))
    }

    @Test func passwordsAreHashedSaltedAndCheckedInFull() throws {
        let a = Passwords.hash("same password"), b = Passwords.hash("same password")
        #expect(a != b)
        #expect(a.hasPrefix("scrypt$16384$8$1$"))
        #expect(!a.contains("same password"))
        #expect(Passwords.verify("same password", against: a))
        #expect(!Passwords.verify("same passwore", against: a))
        #expect(!Passwords.verify("same password", against: "garbage"))
        #expect(Passwords.acceptable("12345678") && !Passwords.acceptable("1234567"))
        #expect(Passwords.acceptable(String(repeating: "é", count: 256)) && !Passwords.acceptable(String(repeating: "x", count: 257)))
    }

    @Test func emailsAreTrimmedAndLowercased() {
        #expect(AuthService.normalizeEmail("  Ann@Example.COM\t") == "ann@example.com")
        for bad in ["", "ann", "@example.com", "ann@", "ann@example", "a b@example.com", "ann@@example.com", "ann@.com"] {
            #expect(AuthService.normalizeEmail(bad) == nil, "\(bad)")
        }
    }

    /// Security round 2, item 5: one address in its composed and decomposed forms is one key (on
    /// PostgreSQL, which compares bytes, they were two accounts), and characters that make look-alikes
    /// are refused: zero-width, bidi and other format characters, controls, fullwidth letters.
    @Test func emailsAreNFCAndLookAlikeCharactersAreRefused() throws {
        let composed = "jos\u{e9}@example.com", decomposed = "jose\u{301}@example.com"
        let key = try #require(AuthService.normalizeEmail(decomposed))
        #expect(Array(key.utf8) == Array(composed.utf8), "the key is the NFC form, byte for byte")
        #expect(AuthService.normalizeEmail("JOSE\u{301}@EXAMPLE.COM").map { Array($0.utf8) } == Array(composed.utf8))
        for bad in ["ann\u{200b}@example.com", "ann\u{202e}@example.com", "ann\u{2066}@example.com", "ann\u{feff}@example.com",
                    "ann\u{7f}@example.com", "ann\u{85}@example.com", "ann\u{1b}@example.com", "\u{ff41}nn@example.com", "ann@ex\u{ff41}mple.com"] {
            #expect(AuthService.normalizeEmail(bad) == nil, "\(bad.unicodeScalars.map { String($0.value, radix: 16) })")
        }
        let h = try AuthHarness()
        _ = try h.service.signUp(email: try #require(AuthService.normalizeEmail(composed)), password: "right password", now: t0)
        #expect(throws: AuthError.emailTaken) {
            try h.service.signUp(email: try #require(AuthService.normalizeEmail(decomposed)), password: "right password", now: t0)
        }
    }

    @Test func aReuseWithinTheIntervalAnswersTheSessionItsFirstUseCreated() throws {
        let h = try AuthHarness()
        let session = try h.service.signUp(email: "ann@example.com", password: "right password", now: t0)
        let first = try h.service.refresh(session.refreshToken, now: t0.adding(seconds: 1))
        // Two tabs: the second refresh of the same token, 3 s later, gets the token the first one got.
        let second = try h.service.refresh(session.refreshToken, now: t0.adding(seconds: 4))
        #expect(second.refreshToken == first.refreshToken)
        #expect(try h.service.authenticate(token: second.accessToken, requirement: .user, now: t0.adding(seconds: 4))?.userId
            == session.user.id)
        // The chain moved on meanwhile: a reuse still within the interval follows it to the current token.
        let third = try h.service.refresh(first.refreshToken, now: t0.adding(seconds: 5))
        #expect(try h.service.refresh(session.refreshToken, now: t0.adding(seconds: 6)).refreshToken == third.refreshToken)
        // After the interval, a reuse means the token leaked: the whole session ends.
        #expect(throws: AuthError.refreshTokenReused) {
            _ = try h.service.refresh(session.refreshToken, now: t0.adding(seconds: 12))
        }
        #expect(throws: AuthError.invalidRefreshToken) { _ = try h.service.refresh(third.refreshToken, now: t0.adding(seconds: 13)) }
    }

    @Test func aReuseIntervalOfZeroRevokesOnAnyReuse() throws {
        let h = try AuthHarness({ $0.refreshReuseIntervalSeconds = 0 })
        let session = try h.service.signUp(email: "ann@example.com", password: "right password", now: t0)
        let first = try h.service.refresh(session.refreshToken, now: t0)
        #expect(throws: AuthError.refreshTokenReused) { _ = try h.service.refresh(session.refreshToken, now: t0) }
        #expect(throws: AuthError.invalidRefreshToken) { _ = try h.service.refresh(first.refreshToken, now: t0) }
    }

    /// #38 item 7: five wrong passwords typed by a stranger locked the owner out wherever they were.
    @Test func failuresCountPerClientAddressAndFiftyFromEverywhere() throws {
        let h = try AuthHarness()
        _ = try h.service.signUp(email: "ann@example.com", password: "right password", now: t0)
        let stranger = try #require(Throttle.addressKey("203.0.113.9")), owner = try #require(Throttle.addressKey("198.51.100.7"))
        for _ in 0..<5 { _ = try h.service.beginSignIn(email: "ann@example.com", from: stranger, now: t0) }
        #expect(throws: AuthError.tooManyAttempts) { _ = try h.service.beginSignIn(email: "ann@example.com", from: stranger, now: t0) }
        // The owner, from their own address, still signs in, and that forgives only their address.
        _ = try h.service.signIn(email: "ann@example.com", password: "right password", from: owner, now: t0)
        #expect(throws: AuthError.tooManyAttempts) { _ = try h.service.beginSignIn(email: "ann@example.com", from: stranger, now: t0) }
        // Guessing spread over many addresses stops at 50 for the email (the 5 above are not among them:
        // the owner's success cleared the email's count).
        // An address that has failed itself is then refused by the total; one that has not gets its own
        // attempt (#51 item 8: otherwise strangers lock the owner out from wherever they are).
        for i in 0..<50 { _ = try h.service.beginSignIn(email: "ann@example.com", from: "v4:192.0.2.\(i)", now: t0) }
        #expect(throws: AuthError.tooManyAttempts) { _ = try h.service.beginSignIn(email: "ann@example.com", from: "v4:192.0.2.7", now: t0) }
        _ = try h.service.beginSignIn(email: "ann@example.com", from: "v4:192.0.2.200", now: t0)
        #expect(throws: AuthError.tooManyAttempts) { _ = try h.service.beginSignIn(email: "ann@example.com", from: "v4:192.0.2.200", now: t0) }
        // A host that names no address keeps the email's own limit of 5.
        let other = try AuthHarness()
        for _ in 0..<5 { _ = try other.service.beginSignIn(email: "bob@example.com", now: t0) }
        #expect(throws: AuthError.tooManyAttempts) { _ = try other.service.beginSignIn(email: "bob@example.com", now: t0) }
    }

    /// #51 item 8: five failures from each of ten /64s of one /56 locked the owner out everywhere, and
    /// one address could try any number of emails.
    @Test func strangersSpreadOverAddressesNeverLockTheOwnerOut() throws {
        let h = try AuthHarness()
        _ = try h.service.signUp(email: "ann@example.com", password: "right password", now: t0)
        // Ten /64s of one customer's /56 are one address: five failures in all, then refused.
        for i in 0..<5 { _ = try h.service.beginSignIn(email: "ann@example.com", from: try #require(Throttle.addressKey("2001:db8:0:1\(i)::1")), now: t0) }
        for i in 5..<10 {
            #expect(throws: AuthError.tooManyAttempts) {
                _ = try h.service.beginSignIn(email: "ann@example.com", from: try #require(Throttle.addressKey("2001:db8:0:1\(i)::1")), now: t0)
            }
        }
        // Nine more whole /56s fill the email's total of 50: each is then refused, the owner's address never.
        for n in 1...9 {
            for _ in 0..<5 { _ = try h.service.beginSignIn(email: "ann@example.com", from: try #require(Throttle.addressKey("2001:db8:\(n):100::1")), now: t0) }
        }
        #expect(throws: AuthError.tooManyAttempts) {
            _ = try h.service.beginSignIn(email: "ann@example.com", from: try #require(Throttle.addressKey("2001:db8:3:100::9")), now: t0)
        }
        let owner = try #require(Throttle.addressKey("198.51.100.7"))
        _ = try h.service.signIn(email: "ann@example.com", password: "right password", from: owner, now: t0.adding(seconds: 1))
        // The owner's address is known to the account now: even after a typo there, with the total full
        // again, it is not refused by the total.
        for n in 11...20 {
            for _ in 0..<5 { _ = try h.service.beginSignIn(email: "ann@example.com", from: try #require(Throttle.addressKey("2001:db8:\(n):100::1")), now: t0.adding(seconds: 2)) }
        }
        #expect(throws: AuthError.invalidCredentials) {
            _ = try h.service.signIn(email: "ann@example.com", password: "typo password", from: owner, now: t0.adding(seconds: 3))
        }
        _ = try h.service.signIn(email: "ann@example.com", password: "right password", from: owner, now: t0.adding(seconds: 4))
        // One address across many emails: 30 failures in the window, then every email is refused there.
        let guesser = try #require(Throttle.addressKey("203.0.113.50"))
        for i in 0..<Throttle.failuresPerAddressAllEmails {
            #expect(throws: AuthError.invalidCredentials) {
                _ = try h.service.signIn(email: "user\(i)@example.com", password: "guess password", from: guesser, now: t0)
            }
        }
        #expect(throws: AuthError.tooManyAttempts) {
            _ = try h.service.signIn(email: "user99@example.com", password: "guess password", from: guesser, now: t0)
        }
        _ = try h.service.beginSignIn(email: "user99@example.com", from: guesser, now: t0.adding(seconds: 15 * 60 + 1))
    }

    /// #51 item 9: failed sign-ins with random emails left their rows for ever (2,400 sign-ins, 4,800
    /// rows). Each attempt now removes up to `pruneBatch` spent rows with its own write.
    @Test func spentThrottleRowsArePruned() throws {
        let h = try AuthHarness()
        let address = try #require(Throttle.addressKey("203.0.113.9"))
        func rows() throws -> Int { try h.tables.throttle.scanAllOrdered(through: "~", limit: 100_000).total }
        for i in 0..<200 { _ = try? h.service.beginSignIn(email: "random\(i)@example.com", from: i % 2 == 0 ? address : nil, now: t0) }
        let before = try rows()
        #expect(before > 150, "\(before)")
        // An hour and a bit later every one of them is spent; later attempts take them away.
        let later = t0.adding(seconds: 3601 + 60)
        for i in 0..<(before / AuthService.pruneBatch + 1) {
            _ = try h.service.beginSignIn(email: "later\(i)@example.com", now: later.adding(seconds: Int64(i)))
        }
        let after = try rows()
        #expect(after <= before / AuthService.pruneBatch + 2, "only the later attempts' own rows are left: \(after)")
        // A row still counting is never pruned.
        for _ in 0..<5 { _ = try h.service.beginSignIn(email: "ann@example.com", now: later) }
        for i in 0..<20 { _ = try h.service.beginSignIn(email: "more\(i)@example.com", now: later.adding(seconds: 60)) }
        #expect(throws: AuthError.tooManyAttempts) { _ = try h.service.beginSignIn(email: "ann@example.com", now: later.adding(seconds: 60)) }
    }

    /// #38 item 6: every sign-in and every refresh added rows that nothing ever removed.
    @Test func sessionsAndRefreshTokensPerUserAreBounded() throws {
        let h = try AuthHarness({ $0.sessionsPerUser = 3; $0.refreshReuseIntervalSeconds = 0 })
        let first = try h.service.signUp(email: "ann@example.com", password: "right password", now: t0)
        let userId = first.user.id
        var sessions: [SignedIn] = [first]
        for i in 1..<5 {
            sessions.append(try h.service.signIn(email: "ann@example.com", password: "right password", now: t0.adding(seconds: Int64(i))))
        }
        #expect(try h.tables.sessions.rows(of: userId).count == 3)
        // The oldest two went, with their tokens; the newest three still work.
        #expect(h.refusal(sessions[0].accessToken, at: t0.adding(seconds: 10)) == "invalid_token")
        #expect(h.refusal(sessions[1].accessToken, at: t0.adding(seconds: 10)) == "invalid_token")
        #expect(h.refusal(sessions[4].accessToken, at: t0.adding(seconds: 10)) == nil)
        #expect(throws: AuthError.invalidRefreshToken) { _ = try h.service.refresh(sessions[0].refreshToken, now: t0.adding(seconds: 10)) }
        // A session refreshed 40 times keeps its current token and the 16 spent before it.
        var token = sessions[4].refreshToken
        var spent: [String] = []
        for i in 0..<40 {
            spent.append(token)
            token = try h.service.refresh(token, now: t0.adding(seconds: 20 + Int64(i))).refreshToken
        }
        #expect(try h.tables.refresh.rows(of: userId).count == 17 + 2 * 1, "17 for the refreshed session, 1 each for the other two")
        #expect(throws: AuthError.invalidRefreshToken) { _ = try h.service.refresh(spent[0], now: t0.adding(seconds: 100)) }
        // The last spent one is still told apart: its reuse ends the session.
        #expect(throws: AuthError.refreshTokenReused) { _ = try h.service.refresh(spent[39], now: t0.adding(seconds: 100)) }
    }

    @Test func addressesAreCountedByHostOrIPv6Slash56() {
        #expect(Throttle.addressKey("203.0.113.9") == "v4:203.0.113.9")
        #expect(Throttle.addressKey("::ffff:203.0.113.9") == "v4:203.0.113.9")
        #expect(Throttle.addressKey("2001:db8:1:2:aaaa::1") == Throttle.addressKey("2001:db8:1:2:bbbb::7"))
        #expect(Throttle.addressKey("2001:db8:1:3::1") == Throttle.addressKey("2001:db8:1:2::1"), "one /56, two /64s")
        #expect(Throttle.addressKey("2001:db8:1:ff::1") == "v6:20010db8000100/56")
        #expect(Throttle.addressKey("2001:db8:1:100::1") != Throttle.addressKey("2001:db8:1:ff::1"), "the next /56")
        for bad in ["", "localhost", "203.0.113.9:80", "1.2.3", "v4:1.2.3.4", String(repeating: "1", count: 70)] {
            #expect(Throttle.addressKey(bad) == nil, "\(bad)")
        }
        #expect(Throttle.wait([1, 2, 3], limit: 3, now: 10, window: 100) == 91)
        #expect(Throttle.wait([1, 2], limit: 3, now: 10, window: 100) == nil)
        #expect(Throttle.wait([1, 2, 3], limit: 0, now: 10, window: 100) == nil)
        #expect(Throttle.recent([1, 50, 200], now: 120, window: 100) == [50])
    }

    /// #38 item 7: sign-ups were unlimited (52/s from one stream).
    @Test func signUpsAreLimitedPerAddressAndWithoutOne() throws {
        let h = try AuthHarness({ $0.signUpsPerHourPerAddress = 3; $0.signUpsPerHourWithoutAddress = 4 })
        let here = try #require(Throttle.addressKey("203.0.113.9"))
        for i in 0..<3 { try h.service.beginSignUp(email: "u\(i)@example.com", from: here, now: t0.adding(seconds: Int64(i))) }
        #expect(throws: AuthError.tooManySignUps(retryAfterMs: 3_600_000 - 3000)) {
            try h.service.beginSignUp(email: "u9@example.com", from: here, now: t0.adding(seconds: 3))
        }
        // Another address, and requests naming none, have their own allowance.
        try h.service.beginSignUp(email: "u9@example.com", from: "v4:198.51.100.7", now: t0)
        for i in 0..<4 { try h.service.beginSignUp(email: "n\(i)@example.com", from: nil, now: t0) }
        #expect(throws: AuthError.tooManySignUps(retryAfterMs: 3_600_000)) { try h.service.beginSignUp(email: "n9@example.com", from: nil, now: t0) }
        // An hour after the first, one more is allowed.
        try h.service.beginSignUp(email: "u9@example.com", from: here, now: t0.adding(seconds: 3600))
        // A taken email is not refused before the hash: the answer costs what a free one costs.
        _ = try h.service.signUp(email: "taken@example.com", password: "right password", from: "v4:192.0.2.1", now: t0)
        try h.service.beginSignUp(email: "taken@example.com", from: "v4:192.0.2.1", now: t0)
        #expect(throws: AuthError.emailTaken) {
            try h.service.finishSignUp(email: "taken@example.com", passwordHash: "unused", now: t0)
        }
    }

    @Test func concurrentSignInsCannotPassTheThrottle() throws {
        let h = try AuthHarness()
        _ = try h.service.signUp(email: "ann@example.com", password: "right password", now: t0)
        // Five attempts in flight at once (their hashes not yet checked) use up the allowance.
        let attempts = try (0..<5).map { _ in try h.service.beginSignIn(email: "ann@example.com", now: t0) }
        #expect(throws: AuthError.tooManyAttempts) { _ = try h.service.beginSignIn(email: "ann@example.com", now: t0) }
        // One of them succeeds: the failures are forgiven, as after any successful sign-in.
        _ = try h.service.finishSignIn(attempts[0], passwordMatches: true, now: t0)
        _ = try h.service.beginSignIn(email: "ann@example.com", now: t0)
    }

    @Test func expiredRefreshTokenIsRefused() throws {
        let h = try AuthHarness({ $0.refreshTokenTtlSeconds = 3600 })
        let session = try h.service.signUp(email: "ann@example.com", password: "right password", now: t0)
        let refresh = session.refreshToken
        #expect(throws: AuthError.refreshTokenExpired) {
            _ = try h.service.refresh(refresh, now: t0.adding(seconds: 3601))
        }
        #expect(throws: AuthError.invalidRefreshToken) { _ = try h.service.refresh(refresh + "x", now: t0) }
        #expect(throws: AuthError.invalidRefreshToken) { _ = try h.service.refresh("not-a-token", now: t0) }
    }
}

@Suite struct ExchangeTests {
    let ec = P256.Signing.PrivateKey()
    let rsa = try! _RSA.Signing.PrivateKey(keySize: .bits2048)

    func harness() throws -> AuthHarness {
        let google = try KeySet.load(jwks: Array(jwks(rsa: ("g1", rsa.publicKey)).utf8))
        let auth0 = try KeySet.load(jwks: Array(jwks(ec: ("a1", ec.publicKey)).utf8))
        return try AuthHarness({
            $0.providers = [
                ProviderConfig(name: "google", jwksPath: "", jwksUrl: nil, audiences: ["web-client"]),
                ProviderConfig(name: "auth0", jwksPath: "", jwksUrl: nil, audiences: ["spa-client", "api"], domain: "tenant.eu.auth0.com"),
            ]
        }, providerKeys: ["google": .fixed(google), "auth0": .fixed(auth0)])
    }

    func sign(_ c: IDClaims, google: Bool = true, kid: String? = nil) async throws -> String {
        let keys = JWTKeyCollection()
        if google {
            await keys.add(rsa: try Insecure.RSA.PrivateKey(pem: rsa.pemRepresentation), digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid ?? "g1"))
        } else {
            await keys.add(ecdsa: try ES256PrivateKey(pem: ec.pemRepresentation), kid: JWKIdentifier(string: kid ?? "a1"))
        }
        return try await keys.sign(c, kid: JWKIdentifier(string: kid ?? (google ? "g1" : "a1")))
    }

    func googleClaims(sub: String = "g-123", iss: String = "https://accounts.google.com", aud: [String] = ["web-client"],
                      exp: Int64 = t0.seconds + 600, email: String? = "ann@example.com", verified: Bool? = true) -> IDClaims {
        IDClaims(iss: iss, sub: sub, aud: aud, exp: Int(exp), iat: Int(t0.seconds), email: email, email_verified: verified, azp: nil)
    }

    func refusal(_ h: AuthHarness, _ provider: String, _ token: String) -> String? {
        do {
            _ = try h.service.exchange(provider: provider, idToken: token, now: t0)
            return nil
        } catch {
            return "\(error.rpc.code.rawValue) \(error.rpc.reason)"
        }
    }

    @Test func googleSignInCreatesThenFindsTheUser() async throws {
        let h = try harness()
        let first = try h.service.exchange(provider: "google", idToken: try await sign(googleClaims()), now: t0)
        let again = try h.service.exchange(provider: "google", idToken: try await sign(googleClaims()), now: t0)
        #expect(first.user.id == again.user.id)
        #expect(first.user.identities == ["google"])
        #expect(first.user.email == "ann@example.com")
        #expect(try h.service.userCount() == 1)
    }

    /// Account pre-hijacking: anyone can sign up with a victim's address and a password of their own.
    /// The victim's later Google sign-in must not land in that account: it gets an account of its own
    /// with the (now proven) email, and the unproven password and every session of the old one end.
    @Test func aProvenIdentityTakesOverAnUnprovenEmailInsteadOfLinkingToIt() async throws {
        let h = try harness()
        let attacker = try h.service.signUp(email: "ann@example.com", password: "attacker password", now: t0)
        let victim = try h.service.exchange(provider: "google", idToken: try await sign(googleClaims()), now: t0)
        #expect(victim.user.id != attacker.user.id, "the victim landed in the attacker's account")
        #expect(victim.user.email == "ann@example.com" && victim.user.identities == ["google"])
        // The attacker is out: the password is gone, the earlier token no longer works.
        #expect(throws: AuthError.invalidCredentials) { try h.service.signIn(email: "ann@example.com", password: "attacker password", now: t0) }
        #expect(throws: RPCError.self) { try h.service.authenticate(token: attacker.accessToken, requirement: .user, now: t0) }
        #expect(try h.service.account(attacker.user.id)?.email == nil)
        // The victim signs in with Google again into the same account.
        #expect(try h.service.exchange(provider: "google", idToken: try await sign(googleClaims()), now: t0).user.id == victim.user.id)
        // An unverified email creates a separate account, taking nothing.
        let other = try h.service.exchange(provider: "google", idToken: try await sign(googleClaims(sub: "g-999", verified: false)), now: t0)
        #expect(other.user.id != victim.user.id && other.user.email == nil)
    }

    /// A proven email links a second provider; a signed-in user links an identity explicitly.
    @Test func identitiesLinkToProvenEmailsAndToTheSignedInUser() async throws {
        let h = try harness()
        let google = try h.service.exchange(provider: "google", idToken: try await sign(googleClaims()), now: t0)
        let (auth0, keys) = try h.service.provider("auth0")
        let auth0Token = try await sign(IDClaims(iss: "https://tenant.eu.auth0.com/", sub: "auth0|1", aud: ["spa-client"], exp: Int(t0.seconds + 600),
                                                 iat: Int(t0.seconds), email: "ann@example.com", email_verified: true, azp: nil), google: false)
        let viaAuth0 = try h.service.exchange(AuthService.prove(auth0Token, provider: auth0, keys: keys, now: t0).get(), now: t0)
        #expect(viaAuth0.user.id == google.user.id && viaAuth0.user.identities == ["google", "auth0"])

        // A password account links Google only while signed in to it.
        let bob = try h.service.signUp(email: "bob@example.com", password: "bob's password", now: t0)
        let (googleConfig, googleKeys) = try h.service.provider("google")
        let bobGoogle = try await sign(googleClaims(sub: "g-bob", email: "bob@example.com"))
        let linked = try h.service.exchange(AuthService.prove(bobGoogle, provider: googleConfig, keys: googleKeys, now: t0).get(),
                                            signedIn: Identity(userId: bob.user.id, role: "authenticated"), now: t0)
        #expect(linked.user.id == bob.user.id && linked.user.identities == ["password", "google"])
        #expect(try h.service.signIn(email: "bob@example.com", password: "bob's password", now: t0).user.id == bob.user.id)
        // An identity linked elsewhere cannot be linked to the signed-in account.
        #expect(throws: AuthError.identityTaken) {
            try h.service.exchange(AuthService.prove(bobGoogle, provider: googleConfig, keys: googleKeys, now: t0).get(), signedIn: Identity(userId: google.user.id, role: "authenticated"), now: t0)
        }
    }

    @Test func tokensThatDoNotVerifyAreRefused() async throws {
        let h = try harness()
        let seq = commitCount(h.store)
        #expect(refusal(h, "google", try await sign(googleClaims(iss: "https://evil.example"))) == "-32010 invalid_signature")
        #expect(refusal(h, "google", try await sign(googleClaims(aud: ["someone-else"]))) == "-32010 invalid_signature")
        #expect(refusal(h, "google", try await sign(googleClaims(exp: t0.seconds - 120))) == "-32010 invalid_signature")
        #expect(refusal(h, "google", try await sign(googleClaims(), kid: "unknown")) == "-32010 invalid_signature")
        #expect(refusal(h, "google", try await sign(googleClaims(), google: false, kid: "a1")) == "-32010 invalid_signature")
        #expect(refusal(h, "google", "a.b") == "-32010 malformed_jws")
        let forged = try await sign(googleClaims())
        #expect(refusal(h, "google", String(forged.dropLast(3)) + "AAA") == "-32010 invalid_signature")
        #expect(refusal(h, "apple", forged) == "-32602 out_of_range")
        #expect(commitCount(h.store) == seq)
    }

    @Test func auth0IssuerAndAuthorizedParty() async throws {
        let h = try harness()
        func claims(iss: String = "https://tenant.eu.auth0.com/", aud: [String], azp: String?) -> IDClaims {
            IDClaims(iss: iss, sub: "auth0|1", aud: aud, exp: Int(t0.seconds + 600), iat: Int(t0.seconds), email: nil, email_verified: nil, azp: azp)
        }
        #expect(refusal(h, "auth0", try await sign(claims(aud: ["spa-client"], azp: nil), google: false)) == nil)
        #expect(refusal(h, "auth0", try await sign(claims(aud: ["spa-client", "api"], azp: "spa-client"), google: false)) == nil)
        #expect(refusal(h, "auth0", try await sign(claims(aud: ["spa-client", "api"], azp: nil), google: false)) == "-32010 invalid_signature")
        #expect(refusal(h, "auth0", try await sign(claims(aud: ["spa-client"], azp: "other"), google: false)) == "-32010 invalid_signature")
        #expect(refusal(h, "auth0", try await sign(claims(iss: "https://tenant.eu.auth0.com", aud: ["spa-client"], azp: nil), google: false)) == "-32010 invalid_signature")
    }

    @Test func ourTokensVerifyWithJWTKit() async throws {
        // Cross-check: a token the kernel signs verifies with jwt-kit and the same secret.
        let h = try AuthHarness()
        let token = h.service.mint(sub: alice, role: "authenticated", ttl: 3_000_000_000, now: Timestamp(seconds: Int64(Date().timeIntervalSince1970)))
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        struct Access: JWTPayload {
            var sub: SubjectClaim
            var exp: ExpirationClaim
            func verify(using algorithm: some JWTAlgorithm) async throws { try exp.verifyNotExpired() }
        }
        let payload = try await keys.verify(token, as: Access.self)
        #expect(payload.sub.value == alice)
    }
}

/// Lookups of releases before 0.2 (rows in a shared `*` partition) move into unique keys at start-up.
@Suite struct LegacyIndexTests {
    @Test func emailAndIdentityLookupsMoveToUniqueKeysAndDeletedUsersAreDropped() throws {
        let h = try AuthHarness()
        let kept = "11111111-1111-4111-8111-111111111111", gone = "22222222-2222-4222-8222-222222222222"
        var tx = Transaction()
        tx.put(h.tables.users, user: kept, key: AuthService.profileKey,
               UserRow(id: kept, email: "kept@example.com", createdAt: 0, identities: ["password", "google"], passwordHash: nil))
        for (key, user) in [("email:kept@example.com", kept), ("identity:google:g-123", kept), ("email:gone@example.com", gone)] {
            tx.put(h.tables.legacyIndex, user: AuthService.legacyShared, key: key, IndexRow(userId: user))
        }
        try h.store.commit(tx)
        try h.service.upgradeLegacyIndex()
        #expect(try h.store.holder(of: .email("kept@example.com")) == kept)
        #expect(try h.store.holder(of: .identity("google", "g-123")) == kept)
        #expect(try h.store.holder(of: .email("gone@example.com")) == nil)
        #expect(try h.tables.legacyIndex.rows(of: AuthService.legacyShared).isEmpty)
        #expect(try h.service.userID(forEmail: "Kept@Example.com") == kept)
        try h.service.upgradeLegacyIndex()  // a second start changes nothing
        #expect(try h.store.holder(of: .email("kept@example.com")) == kept)
    }
}
