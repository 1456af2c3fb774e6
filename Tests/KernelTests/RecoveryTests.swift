import Chrono
import Foundation
import JSON
import Synchronization
import Testing
import TestSupport
@testable import Auth
@testable import Kernel

/// A clock a test moves by hand.
final class SettableClock: Clock {
    private let ms = Mutex<Int64>(1_763_769_600_000)
    private let micros = Mutex<UInt64>(0)
    func now() -> Timestamp { Timestamp(milliseconds: ms.withLock { $0 }) }
    func monotonicMicros() -> UInt64 { micros.withLock { $0 += 10; return $0 } }
    func advance(seconds: Int64) { ms.withLock { $0 += seconds * 1000 } }
}

/// A kernel with a service token, and what tests of mailed tokens do with it.
struct MailHarness {
    let clock = SettableClock()
    let kernel: Kernel
    let client: InProcessClient
    let service: String

    init(requireEmailVerification: Bool = false) throws {
        kernel = try makeKernel(clock: clock) {
            $0.limits.requestsPerSecond = 0
            $0.auth.requireEmailVerification = requireEmailVerification
        }
        client = InProcessClient(kernel)
        service = kernel.auth.mint(sub: nil, role: "service_role", ttl: 86_400 * 30, now: clock.now())
    }

    func signUp(_ email: String, _ password: String = "correct horse battery") -> JSON {
        client.call("auth.signUp", ["email": .string(email), "password": .string(password)])["result"] ?? .null
    }

    func signIn(_ email: String, _ password: String) -> JSON {
        client.call("auth.signIn", ["email": .string(email), "password": .string(password)])
    }

    /// The token of the user's newest mail, as a host finds it: the feed names the mail (its
    /// `events.changed` notification does the same), `auth.mail` gives it.
    func mailed(_ user: String) -> (mail: JSON, answer: JSON) {
        let feed = client.call("sync.changes", ["auth": .string(service), "userId": .string(user), "entities": ["auth.mail"]])
        let id = feed["result"]?["changes"]?.arrayValue?.last { $0["op"]?.stringValue == "upsert" }?["id"] ?? .null
        let answer = client.call("auth.mail", ["auth": .string(service), "userId": .string(user), "id": id])
        return (answer["result"] ?? .null, ["feed": feed, "mail": answer])
    }

    /// The id of the account holding `email`, read as a host's backend would (a service token).
    func userId(of email: String) -> String? {
        try? kernel.auth.userID(forEmail: email)
    }
}

/// #55 item 5: accounts that recover, by mail the host sends. On whichever store the run tests.
@Suite struct RecoveryTests {
    let h: MailHarness
    var clock: SettableClock { h.clock }
    var kernel: Kernel { h.kernel }
    var client: InProcessClient { h.client }
    var service: String { h.service }

    init() throws { h = try MailHarness() }

    func signUp(_ email: String, _ password: String = "correct horse battery") -> JSON { h.signUp(email, password) }
    func mailed(_ user: String) -> (mail: JSON, answer: JSON) { h.mailed(user) }

    @Test func aPasswordIsResetOnceWithTheMailedTokenAndEverySessionEnds() throws {
        defer { kernel.shutdown() }
        let ann = signUp("ann@example.com")
        let user = try #require(ann["user"]?["id"]?.stringValue)
        // The same answer whether or not the email has an account.
        let asked = client.call("auth.requestPasswordReset", ["email": "Ann@Example.com"])
        let nobody = client.call("auth.requestPasswordReset", ["email": "nobody@example.com"])
        #expect(asked["result"] == nobody["result"] && asked["result"] == ["accepted": true], "\(asked) \(nobody)")
        let (mail, answer) = mailed(user)
        #expect(mail["kind"] == "password_reset" && mail["email"] == "ann@example.com", "\(answer)")
        let token = try #require(mail["token"]?.stringValue)
        // Only a service token reads mails.
        let byUser = client.call("auth.mail", ["auth": ann["accessToken"] ?? .null, "userId": .string(user), "id": mail["id"] ?? .null])
        #expect(byUser["error"]?["code"]?.intValue == -32003, "\(byUser)")
        // A tampered token, and a reset without one, change nothing.
        let tampered = String(token.dropLast()) + (token.hasSuffix("A") ? "B" : "A")
        #expect(client.call("auth.resetPassword", ["token": .string(tampered), "password": "a new long password"])["error"]?["data"]?["reason"] == "invalid_token")
        #expect(client.call("auth.resetPassword", ["token": .string(token), "password": "short"])["error"]?["data"]?["field"] == "params.password")
        let reset = client.call("auth.resetPassword", ["token": .string(token), "password": "a new long password"])
        #expect(reset["result"] == ["revoked": 1], "\(reset)")
        #expect(client.call("auth.user", ["auth": ann["accessToken"] ?? .null])["error"]?["code"]?.intValue == -32001, "the old session ended")
        #expect(client.call("auth.signIn", ["email": "ann@example.com", "password": "correct horse battery"])["error"]?["code"]?.intValue == -32001)
        #expect(client.call("auth.signIn", ["email": "ann@example.com", "password": "a new long password"])["result"]?["accessToken"] != nil)
        // Once only; and the mail is gone for the host too.
        #expect(client.call("auth.resetPassword", ["token": .string(token), "password": "yet another password"])["error"]?["data"]?["reason"] == "invalid_token")
        #expect(client.call("auth.mail", ["auth": .string(service), "userId": .string(user), "id": mail["id"] ?? .null])["error"]?["code"]?.intValue == -32004)
    }

    @Test func aResetTokenExpiresAndANewMailReplacesTheLast() throws {
        defer { kernel.shutdown() }
        let user = try #require(signUp("bea@example.com")["user"]?["id"]?.stringValue)
        _ = client.call("auth.requestPasswordReset", ["email": "bea@example.com"])
        let first = try #require(mailed(user).mail["token"]?.stringValue)
        _ = client.call("auth.requestPasswordReset", ["email": "bea@example.com"])
        let second = try #require(mailed(user).mail["token"]?.stringValue)
        #expect(first != second)
        #expect(client.call("auth.resetPassword", ["token": .string(first), "password": "a new long password"])["error"]?["data"]?["reason"] == "invalid_token",
                "replaced by the second")
        clock.advance(seconds: 3601)
        #expect(client.call("auth.resetPassword", ["token": .string(second), "password": "a new long password"])["error"]?["data"]?["reason"] == "invalid_token",
                "an hour later")
    }

    @Test func requestsAreLimitedPerEmailAlikeWhetherItHasAnAccountOrNot() throws {
        defer { kernel.shutdown() }
        _ = signUp("cat@example.com")
        for email in ["cat@example.com", "nobody-at-all@example.com"] {
            for _ in 0..<3 { #expect(client.call("auth.requestPasswordReset", ["email": .string(email)])["result"] != nil) }
            let fourth = client.call("auth.requestPasswordReset", ["email": .string(email)])
            #expect(fourth["error"]?["code"]?.intValue == -32029 && fourth["error"]?["data"]?["retryAfterMs"] != nil, "\(email): \(fourth)")
        }
        let bad = client.call("auth.requestPasswordReset", ["email": "not an email"])
        #expect(bad["error"]?["data"]?["field"] == "params.email")
        clock.advance(seconds: 3601)
        #expect(client.call("auth.requestPasswordReset", ["email": "cat@example.com"])["result"] != nil, "an hour later")
    }

    @Test func anEmailIsVerifiedOnceWithTheMailedToken() throws {
        defer { kernel.shutdown() }
        let dan = signUp("dan@example.com")
        let (user, access) = (try #require(dan["user"]?["id"]?.stringValue), dan["accessToken"] ?? .null)
        let asked = client.call("auth.requestEmailVerification", ["auth": access])
        #expect(asked["result"] == ["accepted": true, "mailed": true], "\(asked)")
        let mail = mailed(user).mail
        #expect(mail["kind"] == "email_verification", "\(mail)")
        let token = try #require(mail["token"]?.stringValue)
        #expect(client.call("auth.resetPassword", ["token": .string(token), "password": "a new long password"])["error"]?["data"]?["reason"] == "invalid_token",
                "a verification token resets no password")
        let verified = client.call("auth.verifyEmail", ["token": .string(token)])
        #expect(verified["result"]?["id"]?.stringValue == user, "\(verified)")
        #expect(client.call("auth.verifyEmail", ["token": .string(token)])["error"]?["data"]?["reason"] == "invalid_token", "once")
        #expect(client.call("auth.requestEmailVerification", ["auth": access])["result"] == ["accepted": true, "mailed": false], "nothing left to verify")
        #expect(client.call("auth.requestEmailVerification", [:])["error"]?["code"]?.intValue == -32001)
    }

    /// The token never rests in the store as it is: the row keeps its digest and a sealed copy.
    @Test func aMailTokenIsNotStoredAsItIs() throws {
        let secret = (0..<32).map { UInt8($0) }
        let token = MailTokens.token(user: "u", mailId: String(repeating: "ab", count: 16), secret: secret)
        let parsed = try #require(MailTokens.parse(token))
        #expect(parsed.user == "u" && parsed.secret == secret)
        #expect(MailTokens.matches(secret, digest: MailTokens.digest(secret)))
        #expect(!MailTokens.matches(secret.reversed(), digest: MailTokens.digest(secret)))
        #expect(MailTokens.parse(token + "x") == nil && MailTokens.parse("hkm1.a.b.c") == nil)
        let sealed = try #require(AuthService.sealMail(token, secret: Array("k1".utf8)))
        #expect(!sealed.contains(token))
        #expect(AuthService.openMail(sealed, secrets: [Array("k2".utf8), Array("k1".utf8)]) == token)
        #expect(AuthService.openMail(sealed, secrets: [Array("k2".utf8)]) == nil)
        kernel.shutdown()
    }
}
