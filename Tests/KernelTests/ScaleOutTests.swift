import Foundation
import JSON
import JSONRPC
import Testing
import Threads
import TestSupport
@testable import Kernel

/// Two kernels on one PostgreSQL database serving the same users at once, each on its own thread, as two
/// web-app instances behind a load balancer would: the per-user lock, the retry of lost races and the
/// unique constraints must leave exactly what one kernel would.
@Suite(.oneStoreOnly) struct ScaleOutTests {
    /// Two kernels on one fresh schema.
    func pair() throws -> (Kernel, Kernel) {
        let (a, b, _) = try pairOnSchema()
        return (a, b)
    }

    /// Signs up `count` users through `client`; returns their access tokens.
    func signUp(_ client: InProcessClient, _ prefix: String, _ count: Int) throws -> [JSON] {
        try (0..<count).map { i in
            let up = client.call("auth.signUp", ["email": .string("\(prefix)\(i)@example.com"), "password": "correct horse battery"])
            return try #require(up["result"]?["accessToken"])
        }
    }

    /// Runs `a` and `b` at the same time on two threads and waits for both.
    func together(_ a: @escaping @Sendable () -> Void, _ b: @escaping @Sendable () -> Void) {
        let done = DispatchGroup()
        for body in [a, b] {
            done.enter()
            Thread.detachNewThread {
                body()
                done.leave()
            }
        }
        done.wait()
    }

    @Test func oneEmailSignedUpOnBothKernelsGetsOneAccount() throws {
        let (a, b) = try pair()
        let ca = InProcessClient(a), cb = InProcessClient(b)
        let results = Locked<[JSON]>([])
        for i in 0..<20 {
            let params: JSON = ["email": .string("race\(i)@example.com"), "password": "correct horse battery"]
            together({ results.append(ca.call("auth.signUp", params)) }, { results.append(cb.call("auth.signUp", params)) })
        }
        let answers = results.value
        #expect(answers.filter { $0["result"] != nil }.count == 20, "one account per email")
        // The loser saw the account, or raced it to the unique constraint and ran again: email_taken either way.
        #expect(answers.filter { $0["error"]?["data"]?["reason"] == "email_taken" }.count == 20,
                "\(answers.compactMap { $0["error"] }.filter { $0["data"]?["reason"] != "email_taken" }.prefix(3))")
    }

    @Test func aTimerStartedFromBothKernelsRunsOnce() throws {
        let (a, b) = try pair()
        let ca = InProcessClient(a), cb = InProcessClient(b)
        let tokens = try signUp(ca, "timer", 20)
        let results = Locked<[JSON]>([])
        for token in tokens {
            together({ results.append(ca.call("sessions.start", ["auth": token, "clientSessionId": "a"])) },
                     { results.append(cb.call("sessions.start", ["auth": token, "clientSessionId": "b"])) })
        }
        let answers = results.value
        #expect(answers.filter { $0["result"] != nil }.count == 20, "exactly one timer per user")
        #expect(answers.filter { $0["error"]?["data"]?["reason"] == "session_active" }.count == 20)
    }
}

extension ScaleOutTests {
    @Test func failedSignInsCountOnEveryKernel() throws {
        let (a, b) = try pair()
        let ca = InProcessClient(a), cb = InProcessClient(b)
        #expect(ca.call("auth.signUp", ["email": "throttle@example.com", "password": "correct horse battery"])["result"] != nil)
        let wrong: JSON = ["email": "throttle@example.com", "password": "wrong horse battery"]
        for i in 0..<5 {
            #expect((i % 2 == 0 ? ca : cb).call("auth.signIn", wrong)["error"]?["code"] == -32001)
        }
        // Five failures spread over two kernels: both refuse the sixth, even with the right password.
        let right: JSON = ["email": "throttle@example.com", "password": "correct horse battery"]
        #expect(ca.call("auth.signIn", right)["error"]?["code"] == -32029)
        #expect(cb.call("auth.signIn", right)["error"]?["code"] == -32029)
    }
}

extension ScaleOutTests {
    /// Per user, from both kernels at once: one earn key, a redeem and a spend each worth more than half
    /// the balance. Exactly one of each pair applies; the balance ends where one kernel alone would leave it.
    @Test func racingForOneBalanceNeverOverspends() throws {
        let (a, b) = try pair()
        let ca = InProcessClient(a), cb = InProcessClient(b)
        let tokens = try signUp(ca, "balance", 10)
        let earned = Locked<[JSON]>([]), redeemed = Locked<[JSON]>([]), spent = Locked<[JSON]>([])
        for token in tokens {
            let earn: JSON = ["auth": token, "xp": 100, "reason": "walk", "key": "day-1"]
            together({ earned.append(ca.call("rewards.earn", earn)) }, { earned.append(cb.call("rewards.earn", earn)) })
            let redeem: JSON = ["auth": token, "xp": 80]
            together({ redeemed.append(ca.call("rewards.redeem", redeem)) }, { redeemed.append(cb.call("rewards.redeem", redeem)) })
            let spend: JSON = ["auth": token, "minutes": 5]
            together({ spent.append(ca.call("rewards.spend", spend)) }, { spent.append(cb.call("rewards.spend", spend)) })
        }
        #expect(earned.value.allSatisfy { $0["result"]?["xp"] == 100 }, "the key credits once; both see the same balance")
        #expect(redeemed.value.filter { $0["result"] != nil }.count == 10)
        #expect(redeemed.value.filter { $0["error"]?["data"]?["reason"] == "insufficient_balance" }.count == 10)
        #expect(spent.value.filter { $0["result"] != nil }.count == 10)
        #expect(spent.value.filter { $0["error"]?["data"]?["reason"] == "insufficient_balance" }.count == 10)
        for (i, token) in tokens.enumerated() {
            let balance = (i % 2 == 0 ? ca : cb).call("rewards.balance", ["auth": token])["result"]
            #expect(balance == ["xp": 20, "minutes": 3], "user \(i): \(String(describing: balance))")
        }
    }
}

extension ScaleOutTests {
    /// One App Store purchase verified at once by two users on two kernels: one of them owns it.
    @Test func aPurchaseVerifiedByTwoUsersHasOneOwner() throws {
        let (a, b) = try pair()
        let ca = InProcessClient(a), cb = InProcessClient(b)
        let first = try signUp(ca, "buyer-a", 10), second = try signUp(cb, "buyer-b", 10)
        let results = Locked<[JSON]>([])
        for i in 0..<10 {
            let receipt = JSON.string(AppStoreSetup.receipt(original: "81000\(i)"))
            together({ results.append(ca.call("subscriptions.verify", ["auth": first[i], "provider": "apple", "productId": "premium.yearly", "receipt": receipt])) },
                     { results.append(cb.call("subscriptions.verify", ["auth": second[i], "provider": "apple", "productId": "premium.yearly", "receipt": receipt])) })
        }
        let answers = results.value
        #expect(answers.filter { $0["result"] != nil }.count == 10, "one owner per purchase: \(answers.filter { $0["result"] == nil }.prefix(2))")
        #expect(answers.filter { $0["error"]?["data"]?["reason"] == "transaction_owned_by_other_user" }.count == 10)
    }
}

extension ScaleOutTests {
    /// Claims and uploads of the same days from both kernels at once: one penalty per user and date,
    /// the points one kernel alone would give.
    @Test func claimsAndUploadsRacedOnTwoKernelsLeaveOnePenaltyPerDay() throws {
        let (a, b) = try pair()
        let ca = InProcessClient(a), cb = InProcessClient(b)
        let tokens = try signUp(ca, "penalty", 5)
        for token in tokens {
            #expect(ca.call("screentime.updateConnection", ["auth": token, "enabled": true])["result"] != nil)
        }
        let dates = ["2025-06-01", "2025-06-02", "2025-06-03"]
        for token in tokens {
            for date in dates {
                // 30 minutes claimed, 50 seen: 20 over, less the default tolerance of 5 = 15 points, whoever comes first.
                together({ _ = ca.call("screentime.claim", ["auth": token, "date": .string(date), "minutes": 30]) },
                         { _ = cb.call("screentime.upload", ["auth": token, "date": .string(date), "verifiedMinutes": 50]) })
                together({ _ = ca.call("screentime.upload", ["auth": token, "date": .string(date), "verifiedMinutes": 50]) },
                         { _ = cb.call("screentime.claim", ["auth": token, "date": .string(date), "minutes": 30]) })
            }
        }
        for (i, token) in tokens.enumerated() {
            let penalties = (i % 2 == 0 ? ca : cb).call("screentime.penalties", ["auth": token])["result"]
            #expect(penalties?["entries"]?.arrayValue?.count == 3, "\(String(describing: penalties))")
            #expect(penalties?["totalPoints"] == 45, "\(String(describing: penalties))")
        }
    }
}

/// What test threads append to and read.
extension Locked {
    var value: Value { withLock { $0 } }
    func append<T>(_ element: T) where Value == [T] { withLock { $0.append(element) } }
}

/// Races forced to the unique constraint: a session of its own holds the schema's unique keys table
/// (`EXCLUSIVE`: reads go on, inserts wait), so both kernels' checks find the key free and both claims
/// queue behind the lock; the loser meets the winner's row at commit. It must get the answer it would
/// have had with the other request first, never -32050 or a store-level reason.
extension ScaleOutTests {
    /// Holds `schema.unique_keys` for `seconds` from a psql session started now (returns once it holds it).
    func holdUniqueKeys(_ schema: String, seconds: Double) -> Thread {
        let held = DispatchSemaphore(value: 0)
        let thread = Thread {
            let psql = Process()
            psql.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
            // One -c each: psql prints a -c's output when it ends, and a string of several at the end of all.
            psql.arguments = [TestPostgres.url, "-q", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", "BEGIN",
                              "-c", "LOCK TABLE \(schema).unique_keys IN EXCLUSIVE MODE", "-c", "SELECT 'held'",
                              "-c", "SELECT pg_sleep(\(seconds))", "-c", "COMMIT"]
            let out = Pipe()
            psql.standardOutput = out
            try? psql.run()
            var seen = Data()
            while !String(decoding: seen, as: UTF8.self).contains("held") {
                let chunk = out.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                seen += chunk
            }
            held.signal()
            psql.waitUntilExit()
        }
        thread.start()
        held.wait()
        return thread
    }

    /// Two kernels on one fresh schema, and its name.
    func pairOnSchema() throws -> (Kernel, Kernel, String) {
        let schema = TestPostgres.freshSchema()
        func one() throws -> Kernel {
            try makeKernel { config in
                config.memoryOnly = false
                config.storeURL = TestPostgres.url
                config.storeSchema = schema
                AppStoreSetup.configure(&config)
            }
        }
        return (try one(), try one(), schema)
    }

    @Test func aSignUpThatLosesTheRaceForItsEmailAnswersEmailTaken() throws {
        let (a, b, schema) = try pairOnSchema()
        let ca = InProcessClient(a), cb = InProcessClient(b)
        let results = Locked<[JSON]>([])
        let params: JSON = ["email": "forced-race@example.com", "password": "correct horse battery"]
        _ = holdUniqueKeys(schema, seconds: 1.5)
        together({ results.append(ca.call("auth.signUp", params)) }, { results.append(cb.call("auth.signUp", params)) })
        let answers = results.value
        #expect(answers.filter { $0["result"] != nil }.count == 1, "\(answers)")
        #expect(answers.filter { $0["error"]?["data"]?["reason"] == "email_taken" }.count == 1, "\(answers)")
    }

    @Test func aVerifyThatLosesTheRaceForItsPurchaseAnswersOwnedByOtherUser() throws {
        let (a, b, schema) = try pairOnSchema()
        let ca = InProcessClient(a), cb = InProcessClient(b)
        let first = try signUp(ca, "forced-a", 1)[0], second = try signUp(cb, "forced-b", 1)[0]
        let receipt = JSON.string(AppStoreSetup.receipt(original: "820001"))
        let results = Locked<[JSON]>([])
        _ = holdUniqueKeys(schema, seconds: 1.5)
        together({ results.append(ca.call("subscriptions.verify", ["auth": first, "provider": "apple", "productId": "premium.yearly", "receipt": receipt])) },
                 { results.append(cb.call("subscriptions.verify", ["auth": second, "provider": "apple", "productId": "premium.yearly", "receipt": receipt])) })
        let answers = results.value
        #expect(answers.filter { $0["result"] != nil }.count == 1, "\(answers)")
        #expect(answers.filter { $0["error"]?["data"]?["reason"] == "transaction_owned_by_other_user" }.count == 1, "\(answers)")
    }
}
