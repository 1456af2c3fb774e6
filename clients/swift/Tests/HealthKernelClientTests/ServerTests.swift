import Foundation
import Testing
@testable import HealthKernelClient

// Each flow of the client against a running example server and kernel, started by
// clients/swift/test-against-server.mjs (which sets HK_SERVER_URL and the signed test material).

/// The server to test against; a run without one fails rather than passing without having tried.
func server() throws -> URL {
    let url = try #require(ProcessInfo.processInfo.environment["HK_SERVER_URL"].flatMap(URL.init(string:)),
                           "HK_SERVER_URL is not set: run node clients/swift/test-against-server.mjs")
    return url
}

/// A client signed up as a new user with a random email.
func signedUp(store: any ClientStore = MemoryStore()) async throws -> (HealthKernelClient, email: String) {
    let client = HealthKernelClient(serverURL: try server(), store: store)
    let email = "swift-\(UUID().uuidString.lowercased())@example.com"
    let result = try await client.signUp(email: email, password: "correct horse battery")
    guard case .signedIn = result else { throw HealthKernelError(status: 0, message: "sign-up answered \(result)") }
    return (client, email)
}

/// YYYY-MM-DD of `days` from today in UTC.
func utcDay(_ days: Int) -> String {
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = TimeZone(identifier: "UTC")!
    let date = calendar.date(byAdding: .day, value: days, to: Date())!
    let c = calendar.dateComponents([.year, .month, .day], from: date)
    return String(format: "%04d-%02d-%02d", c.year!, c.month!, c.day!)
}

@Suite struct AccountTests {
    @Test func signUpSignOutSignInAndAWrongPassword() async throws {
        let (client, email) = try await signedUp()
        let id = try #require(try await client.userId)
        // A generated operation through `api` carries the session's token.
        let user = try await client.api.authUser().ok.body.json
        #expect(user.id == id)
        #expect(user.email == email)

        try await client.signOut()
        #expect(try await client.userId == nil)
        await #expect(throws: HealthKernelError.signedOut) { try await client.uploadScreenTimeDay(date: utcDay(-1), verifiedMinutes: 1) }

        let again = try await client.signIn(email: email, password: "correct horse battery")
        #expect(again.id == id)
        let wrong = HealthKernelClient(serverURL: try server())
        let error = await #expect(throws: HealthKernelError.self) { try await wrong.signIn(email: email, password: "wrong horse battery") }
        #expect(error?.status == 401)
        #expect(try await wrong.userId == nil)
    }

    @Test func aTakenEmailAndABadBodyNameTheirReasonAndField() async throws {
        let (_, email) = try await signedUp()
        let other = HealthKernelClient(serverURL: try server())
        let taken = await #expect(throws: HealthKernelError.self) { try await other.signUp(email: email, password: "another password") }
        #expect(taken?.status == 409)
        #expect(taken?.reason == "email_taken")
        let short = await #expect(throws: HealthKernelError.self) { try await other.signUp(email: "x-\(UUID())@example.com", password: "short") }
        #expect(short?.status == 400)
        #expect(short?.field == "password")
    }

    @Test func theSessionOutlivesTheClientInItsStore() async throws {
        let store = MemoryStore()
        let (first, _) = try await signedUp(store: store)
        let id = try await first.userId
        let second = HealthKernelClient(serverURL: try server(), store: store)
        #expect(try await second.userId == id)
        #expect(try await second.api.authUser().ok.body.json.id == id)
    }

    /// Against a server that requires a verified email: sign-up says so (for a free and a taken email
    /// alike), and the account does not sign in before the mail's link is used.
    @Test func signUpWhereTheEmailMustBeVerified() async throws {
        let url = try #require(ProcessInfo.processInfo.environment["HK_VERIFYING_SERVER_URL"].flatMap(URL.init(string:)))
        let client = HealthKernelClient(serverURL: url)
        let email = "verify-\(UUID().uuidString.lowercased())@example.com"
        #expect(try await client.signUp(email: email, password: "correct horse battery") == .verifyEmail)
        #expect(try await client.signUp(email: email, password: "correct horse battery") == .verifyEmail, "taken: the same answer")
        let waiting = await #expect(throws: HealthKernelError.self) { try await client.signIn(email: email, password: "correct horse battery") }
        #expect(waiting?.status == 403)
        #expect(waiting?.reason == "email_not_verified")
        #expect(try await client.userId == nil)
    }

    @Test func googleSignIn() async throws {
        let idToken = try #require(ProcessInfo.processInfo.environment["HK_GOOGLE_ID_TOKEN"])
        let client = HealthKernelClient(serverURL: try server())
        let user = try await client.signIn(provider: "google", idToken: idToken)
        #expect(user.identities.contains("google"))
        #expect(try await client.userId == user.id)
    }
}

@Suite struct RefreshTests {
    /// Many requests finding the access token refused at once make one refresh between them (a second
    /// with the same single-use refresh token would end the session), and all of them then succeed.
    @Test func concurrentRequestsWithAStaleTokenShareOneRefresh() async throws {
        let (client, _) = try await signedUp()
        let before = try #require(try await client.session.current())
        try await client.session.spoil()
        let ids = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<8 { group.addTask { try await client.api.authUser().ok.body.json.id } }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(ids == Array(repeating: before.userId, count: 8))
        #expect(await client.session.refreshes == 1)
        let after = try #require(try await client.session.current())
        #expect(after.refreshToken != before.refreshToken, "the server rotated the refresh token")
    }

    /// A token close to its end is refreshed before it is sent.
    @Test func anExpiringTokenIsRefreshedBeforeUse() async throws {
        let (client, _) = try await signedUp()
        var tokens = try #require(try await client.session.current())
        tokens.expiresAt = Date().addingTimeInterval(Session.refreshMargin / 2)
        try await client.session.set(tokens)
        _ = try await client.api.authUser().ok
        #expect(await client.session.refreshes == 1)
        // (The access token may come out the same within one second: the refresh token is new each time.)
        #expect(try #require(try await client.session.current()).refreshToken != tokens.refreshToken)
    }

    /// A refresh token the server refuses ends the session here too: the app is told to sign in.
    @Test func aRefusedRefreshSignsOut() async throws {
        let (client, _) = try await signedUp()
        var tokens = try #require(try await client.session.current())
        tokens.accessToken = "expired"
        tokens.refreshToken = "not-a-refresh-token"
        try await client.session.set(tokens)
        let error = await #expect(throws: (any Error).self) { _ = try await client.api.authUser().ok }
        #expect(error?.healthKernelError?.isSignedOut == true)
        #expect(try await client.userId == nil)
    }
}

@Suite struct FlowTests {
    @Test func screenTimeDay() async throws {
        let (client, _) = try await signedUp()
        let off = await #expect(throws: HealthKernelError.self) { try await client.uploadScreenTimeDay(date: utcDay(-1), verifiedMinutes: 42) }
        #expect(off?.reason == "connection_disabled")
        let connection = try await client.enableScreenTimeVerification(timezone: "UTC")
        #expect(connection.enabled)
        let verdict = try await client.uploadScreenTimeDay(date: utcDay(-1), verifiedMinutes: 42)
        #expect(verdict.date == utcDay(-1))
        #expect(verdict.status == .unclaimed)
        let bad = await #expect(throws: HealthKernelError.self) { try await client.uploadScreenTimeDay(date: utcDay(-1), verifiedMinutes: 2000) }
        #expect(bad?.field == "verifiedMinutes")
    }

    /// A route without a flow of its own, through the generated `api` with the session's token.
    @Test func meditationSessionThroughTheGeneratedClient() async throws {
        let (client, _) = try await signedUp()
        let start = Date().addingTimeInterval(-900)
        let id = UUID().uuidString
        let saved = try await client.api.sessionsRecord(body: .json(.init(sessionStartTime: start, durationSeconds: 600, clientSessionId: id)))
        let again = try await client.api.sessionsRecord(body: .json(.init(sessionStartTime: start, durationSeconds: 600, clientSessionId: id)))
        #expect(try saved.created.body.json.sessionId == again.created.body.json.sessionId, "the same clientSessionId is the same session")
    }

    @Test func storeKitPurchase() async throws {
        let (client, _) = try await signedUp()
        let forged = await #expect(throws: HealthKernelError.self) { try await client.verifyPurchase(productId: "premium", signedTransaction: "a.b.c") }
        #expect(forged?.status == 422)
        guard let signed = ProcessInfo.processInfo.environment["HK_SIGNED_TRANSACTION"] else { return }
        let membership = try await client.verifyPurchase(productId: "premium", signedTransaction: signed)
        #expect(membership.status == .active)
        #expect(membership.productId == "premium")
    }

    /// A HealthKit batch moves its anchor only once the server has it; the feed's cursor moves past what
    /// was applied, so a second pull reads only what is new.
    @Test func healthBatchAnchorAndChangeFeed() async throws {
        let (client, _) = try await signedUp()
        let start = Date().addingTimeInterval(-3600)
        let uuids = [UUID().uuidString, UUID().uuidString]
        let samples = uuids.enumerated().map { i, uuid in
            HealthSample(uuid: uuid, start: start.addingTimeInterval(Double(i) * 60), end: start.addingTimeInterval(Double(i) * 60 + 30),
                         _type: "HKQuantityTypeIdentifierStepCount", value: 100, unit: "count")
        }
        let result = try await client.sendHealthBatch(HealthBatch(deviceId: "iphone", timezone: "UTC", samples: samples), anchor: Data("a1".utf8))
        #expect(result.accepted.samples == 2)
        #expect(try await client.healthAnchor() == Data("a1".utf8))

        var refused = samples[0]
        refused.end = refused.start.addingTimeInterval(-60)
        let error = await #expect(throws: HealthKernelError.self) {
            try await client.sendHealthBatch(HealthBatch(deviceId: "iphone", samples: [refused]), anchor: Data("a2".utf8))
        }
        #expect(error?.status == 400)
        #expect(error?.field == "samples[0].end")
        #expect(try await client.healthAnchor() == Data("a1".utf8), "a refused batch keeps the old anchor")

        var seen: [FeedChange] = []
        let first = try await client.pullChanges(pageSize: 1) { seen += $0 }
        #expect(first == seen.count)
        #expect(Set(seen.filter { $0.op == .upsert }.map(\.id)).isSuperset(of: uuids.map { $0.lowercased() }) ||
                Set(seen.filter { $0.op == .upsert }.map(\.id)).isSuperset(of: uuids))
        #expect(try await client.pullChanges { _ in } == 0, "the cursor was kept")

        try await client.deleteHealthItems([uuids[0]])
        var deleted: [FeedChange] = []
        try await client.pullChanges { deleted += $0 }
        #expect(deleted.contains { $0.op == .delete })

        // An `apply` that throws keeps the cursor where it was: the page is read again.
        await #expect(throws: CancellationError.self) {
            var later = samples[1]
            later.uuid = UUID().uuidString
            try await client.sendHealthBatch(HealthBatch(deviceId: "iphone", samples: [later]))
            try await client.pullChanges { _ in throw CancellationError() }
        }
        #expect(try await client.pullChanges { _ in } >= 1)
    }
}
