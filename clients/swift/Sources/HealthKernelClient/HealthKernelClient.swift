import Foundation
import OpenAPIRuntime
import OpenAPIURLSession

/// What an app does with its healthkernel backend, in a few calls: sign in and stay signed in, upload a
/// Screen Time day, verify a StoreKit 2 purchase, send HealthKit batches and keep their anchors, and
/// follow the user's change feed. Everything else is `api`, the client generated from
/// protocol/rest-openapi.json, which sends the same token and throws the same `HealthKernelError`.
public final class HealthKernelClient: Sendable {
    /// Every route of the server, generated from its OpenAPI document.
    public let api: Client
    let session: Session
    private let store: any ClientStore

    /// - Parameters:
    ///   - serverURL: where the server runs, such as `https://api.example.com`.
    ///   - store: where the session and sync positions are kept (the Keychain on an iPhone).
    ///   - transport: how requests travel; URLSession unless a test says otherwise.
    public init(serverURL: URL, store: any ClientStore = MemoryStore(), transport: any ClientTransport = URLSessionTransport()) {
        let configuration = Configuration(dateTranscoder: RFC3339Transcoder())
        // Refreshing goes through a client of its own, without the token middleware that calls it.
        let plain = Client(serverURL: serverURL, configuration: configuration, transport: transport, middlewares: [ErrorMiddleware()])
        let session = Session(store: store) { refreshToken in
            try await plain.authRefresh(body: .json(.init(refreshToken: refreshToken))).ok.body.json
        }
        self.session = session
        self.store = store
        api = Client(serverURL: serverURL, configuration: configuration, transport: transport,
                     middlewares: [ErrorMiddleware(), AuthMiddleware(session: session)])
    }

    // MARK: - Accounts

    /// The signed-in user's id, or `nil`.
    public var userId: String? {
        get async throws { try await session.current()?.userId }
    }

    /// Creates an account and signs in; or, when the server requires a verified email
    /// (`auth.requireEmailVerification`), answers `.verifyEmail` whether or not the email had an account:
    /// the link in the mail proves it, and `signIn` works from then on.
    @discardableResult
    public func signUp(email: String, password: String) async throws -> SignUpResult {
        switch try await call({ try await api.authSignUp(body: .json(.init(email: email, password: password))).ok.body.json }) {
        case .Session(let answer):
            try await session.set(SessionTokens(answer))
            return .signedIn(answer.user)
        case .case2:
            return .verifyEmail
        }
    }

    /// Signs in with an email and password.
    @discardableResult
    public func signIn(email: String, password: String) async throws -> User {
        try await keep { try await api.authSignIn(body: .json(.init(email: email, password: password))).ok.body.json }
    }

    /// Signs in with Sign in with Apple's or Google's id token (`provider`: "apple" or "google", as the
    /// server's kernel configures them).
    @discardableResult
    public func signIn(provider: String, idToken: String) async throws -> User {
        try await keep { try await api.authExchange(body: .json(.init(provider: provider, idToken: idToken))).ok.body.json }
    }

    /// Ends the session on the server and forgets it here. Forgotten here even when the server cannot be
    /// reached: the refresh token is then only in the server's list until it expires.
    public func signOut() async throws {
        defer { Task { [session] in try? await session.set(nil) } }
        guard try await session.current() != nil else { return }
        _ = try await call { try await api.authSignOut(body: nil).ok }
        try await session.set(nil)
    }

    // MARK: - Screen Time (seed 000)

    /// Turns Screen Time verification on for the user, with the time zone their days are counted in.
    @discardableResult
    public func enableScreenTimeVerification(timezone: String = TimeZone.current.identifier) async throws -> ScreenTimeConnection {
        try await call { try await api.screentimeUpdateConnection(body: .json(.init(enabled: true, timezone: timezone))).ok.body.json }
    }

    /// Uploads a day's verified minutes (`date`: YYYY-MM-DD in the user's time zone). Sending the same day
    /// again is safe: the same verdict, no second penalty.
    public func uploadScreenTimeDay(date: String, verifiedMinutes: Int) async throws -> ScreenTimeVerdict {
        try await call { try await api.screentimeUpload(body: .json(.init(date: date, verifiedMinutes: verifiedMinutes))).ok.body.json }
    }

    // MARK: - StoreKit 2 (seed 003)

    /// Verifies a StoreKit 2 transaction (`Transaction`'s `jwsRepresentation`) to Apple's root on the
    /// server and answers the user's membership.
    public func verifyPurchase(productId: String, signedTransaction: String) async throws -> Membership {
        try await call {
            try await api.subscriptionsVerify(body: .json(.init(provider: .apple, productId: productId, receiptOrToken: signedTransaction))).ok.body.json
        }
    }

    // MARK: - HealthKit (seed 001)

    /// Sends a batch of HealthKit items and then keeps `anchor` (an `HKQueryAnchor`, archived) under
    /// `anchorName`: the anchor moves only once the server has the batch, so a batch that failed is read
    /// again from the old anchor next time. Items are upserted by UUID, so sending one twice is harmless.
    public func sendHealthBatch(_ batch: HealthBatch, anchor: Data? = nil, anchorName: String = "default") async throws -> HealthBatchResult {
        let result = try await call { try await api.healthIngest(body: .json(batch)).ok.body.json }
        if let anchor { try await store.save(StoreKey.healthAnchor(anchorName), anchor) }
        return result
    }

    /// Deletes HealthKit items by UUID (an anchored query's `deletedObjects`), then keeps `anchor` as
    /// `sendHealthBatch` does.
    @discardableResult
    public func deleteHealthItems(_ uuids: [String], anchor: Data? = nil, anchorName: String = "default") async throws -> HealthDeletion {
        let result = try await call { try await api.healthDelete(body: .json(.init(uuids: uuids))).ok.body.json }
        if let anchor { try await store.save(StoreKey.healthAnchor(anchorName), anchor) }
        return result
    }

    /// The anchor kept by the last batch sent under `anchorName`: where the next anchored query starts.
    public func healthAnchor(_ anchorName: String = "default") async throws -> Data? {
        try await store.load(StoreKey.healthAnchor(anchorName))
    }

    // MARK: - The change feed

    /// Reads the user's changes since the kept cursor, page by page, handing each page to `apply` and
    /// keeping the cursor after it returns: a page whose `apply` threw (or whose process died) is read
    /// again next time, so `apply` must take a change twice (upserts and deletes by id do). Returns how
    /// many changes were applied.
    @discardableResult
    public func pullChanges(entities: [String]? = nil, pageSize: Int = 500,
                            apply: ([FeedChange]) async throws -> Void) async throws -> Int {
        let key = StoreKey.feedCursor(entities)
        var cursor = try await store.load(key).map { String(decoding: $0, as: UTF8.self) }
        var applied = 0
        while true {
            let page = try await call {
                try await api.syncChanges(query: .init(since: cursor, limit: pageSize, entities: entities, includeData: true)).ok.body.json
            }
            try await apply(page.changes)
            applied += page.changes.count
            cursor = page.cursor
            try await store.save(key, Data(page.cursor.utf8))
            if !page.hasMore { return applied }
        }
    }

    // MARK: -

    /// Keeps the session a sign-in answered and returns its user.
    private func keep(_ signIn: () async throws -> Components.Schemas.Session) async throws -> User {
        let answer = try await call(signIn)
        try await session.set(SessionTokens(answer))
        return answer.user
    }

    /// Runs an operation, throwing the `HealthKernelError` itself rather than the runtime's wrapper.
    private func call<T>(_ operation: () async throws -> T) async throws -> T {
        do { return try await operation() } catch { throw HealthKernelError.unwrap(error) }
    }
}

public typealias User = Components.Schemas.Session.UserPayload

/// What a sign-up did.
public enum SignUpResult: Sendable, Equatable {
    /// The account exists and is signed in.
    case signedIn(User)
    /// A mail went to the email: its link proves it, then the account signs in.
    case verifyEmail
}
public typealias ScreenTimeConnection = Operations.ScreentimeUpdateConnection.Output.Ok.Body.JsonPayload
public typealias ScreenTimeVerdict = Operations.ScreentimeUpload.Output.Ok.Body.JsonPayload
public typealias Membership = Operations.SubscriptionsVerify.Output.Ok.Body.JsonPayload
public typealias HealthBatch = Operations.HealthIngest.Input.Body.JsonPayload
public typealias HealthSample = HealthBatch.SamplesPayloadPayload
public typealias HealthBatchResult = Operations.HealthIngest.Output.Ok.Body.JsonPayload
public typealias HealthDeletion = Operations.HealthDelete.Output.Ok.Body.JsonPayload
public typealias FeedChange = Operations.SyncChanges.Output.Ok.Body.JsonPayload.ChangesPayloadPayload
