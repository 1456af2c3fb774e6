import Foundation
import JSON
import Testing
import TestSupport
@testable import Auth
@testable import Kernel

/// #55 item 5: `auth.requireEmailVerification`. Sign-up answers the same for a free and a taken email,
/// and no account signs in before whoever holds the email proves it. On whichever store the run tests.
@Suite struct SignUpByMailTests {
    let h: MailHarness
    init() throws { h = try MailHarness(requireEmailVerification: true) }

    func reason(_ answer: JSON) -> String? { answer["error"]?["data"]?["reason"]?.stringValue }

    @Test func aNewAccountSignsInOnlyOnceItsEmailIsProven() throws {
        defer { h.kernel.shutdown() }
        #expect(h.signUp("eve@example.com", "first password") == ["accepted": true])
        let user = try #require(h.userId(of: "eve@example.com"))
        #expect(reason(h.signIn("eve@example.com", "first password")) == "email_not_verified")
        #expect(reason(h.signIn("eve@example.com", "wrong password")) == "invalid_credentials", "only the password's holder learns it waits")
        let mail = h.mailed(user).mail
        #expect(mail["kind"] == "email_verification" && mail["email"] == "eve@example.com", "\(mail)")
        let verified = h.client.call("auth.verifyEmail", ["token": mail["token"] ?? .null])
        #expect(verified["result"]?["identities"] == ["password"], "\(verified)")
        #expect(h.signIn("eve@example.com", "first password")["result"]?["accessToken"] != nil)
    }

    /// Whoever signs up first cannot keep an email they do not hold: the mail goes to the email, and the
    /// password that counts is the one of the sign-up whose mail is used.
    @Test func aSquattersPasswordNeverSignsIn() throws {
        defer { h.kernel.shutdown() }
        #expect(h.signUp("fay@example.com", "squatter password") == ["accepted": true])
        let user = try #require(h.userId(of: "fay@example.com"))
        let squatters = try #require(h.mailed(user).mail["token"]?.stringValue)
        #expect(h.signUp("fay@example.com", "owner's password") == ["accepted": true])
        let owners = try #require(h.mailed(user).mail["token"]?.stringValue)
        #expect(owners != squatters)
        #expect(reason(h.client.call("auth.verifyEmail", ["token": .string(squatters)])) == "invalid_token", "replaced by the newer mail")
        #expect(h.client.call("auth.verifyEmail", ["token": .string(owners)])["result"] != nil)
        #expect(reason(h.signIn("fay@example.com", "squatter password")) == "invalid_credentials")
        #expect(h.signIn("fay@example.com", "owner's password")["result"]?["accessToken"] != nil)
    }

    /// A sign-up with the email of a working account changes nothing of it and mails its owner, whose
    /// mail's token resets the password.
    @Test func aTakenEmailMailsItsOwner() throws {
        defer { h.kernel.shutdown() }
        _ = h.signUp("gus@example.com", "gus's password")
        let user = try #require(h.userId(of: "gus@example.com"))
        _ = h.client.call("auth.verifyEmail", ["token": h.mailed(user).mail["token"] ?? .null])
        #expect(h.signUp("gus@example.com", "an intruder's password") == ["accepted": true])
        let mail = h.mailed(user).mail
        #expect(mail["kind"] == "account_exists", "\(mail)")
        #expect(h.signIn("gus@example.com", "gus's password")["result"]?["accessToken"] != nil, "nothing changed")
        #expect(reason(h.signIn("gus@example.com", "an intruder's password")) == "invalid_credentials")
        let reset = h.client.call("auth.resetPassword", ["token": mail["token"] ?? .null, "password": "gus's new password"])
        #expect(reset["result"]?["revoked"] != nil, "\(reset)")
        #expect(h.signIn("gus@example.com", "gus's new password")["result"]?["accessToken"] != nil)
    }

    /// The answer, the mail-request limit and the time are alike for free and taken emails: both hash
    /// the password and commit one transaction. Times are compared as medians of interleaved runs, so
    /// a busy machine slows both alike; the bound is loose (a factor of 2) against a difference that
    /// would be a skipped hash (scrypt: tens of milliseconds against well under one).
    @Test func freeAndTakenEmailsAnswerAlikeInWordsAndTime() throws {
        defer { h.kernel.shutdown() }
        let taken = (0..<9).map { "taken\($0)@example.com" }
        for email in taken { _ = h.signUp(email) }
        var free: [Duration] = [], held: [Duration] = []
        let clock = ContinuousClock()
        for i in 0..<taken.count {
            var answers: [JSON] = []
            held.append(clock.measure { answers.append(h.client.call("auth.signUp", ["email": .string(taken[i]), "password": "another password"])) })
            free.append(clock.measure { answers.append(h.client.call("auth.signUp", ["email": .string("free\(i)@example.com"), "password": "another password"])) })
            #expect(answers[0]["result"] == ["accepted": true] && answers[0]["result"] == answers[1]["result"], "\(answers)")
        }
        let median = { (d: [Duration]) in d.sorted()[d.count / 2] }
        let ratio = median(held) / median(free)
        #expect(ratio > 0.5 && ratio < 2, "taken \(median(held)), free \(median(free))")
        // The per-email limit (3 mail requests an hour) counts every sign-up alike: taken0 has had two
        // (its account's and the timed one), a new email none.
        let limited = { (email: String, before: Int) -> Bool in
            for _ in before..<3 where h.signUp(email) != ["accepted": true] { return false }
            return h.client.call("auth.signUp", ["email": .string(email), "password": "another password"])["error"]?["code"]?.intValue == -32029
        }
        #expect(limited("taken0@example.com", 2))
        #expect(limited("never-seen@example.com", 0))
    }
}
