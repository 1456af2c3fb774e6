import Foundation

/// The tokens of a signed-in user, as the client stores them.
public struct SessionTokens: Codable, Sendable, Equatable {
    public var accessToken: String
    public var refreshToken: String
    /// When the access token stops working (the server's `expiresIn` from when it answered).
    public var expiresAt: Date
    public var userId: String

    init(_ session: Components.Schemas.Session, receivedAt: Date = Date()) {
        accessToken = session.accessToken
        refreshToken = session.refreshToken
        expiresAt = receivedAt.addingTimeInterval(TimeInterval(session.expiresIn))
        userId = session.user.id
    }
}

/// The one owner of the session's tokens: hands out an access token that is fresh, and refreshes it
/// once however many requests find it stale at the same time. A refresh token is single-use (the
/// server rotates it), so two refreshes with one token would end the session: hence one at a time.
actor Session {
    /// An access token this close to its end is refreshed before use rather than sent to fail.
    static let refreshMargin: TimeInterval = 60

    private let store: any ClientStore
    private let refresh: @Sendable (String) async throws -> Components.Schemas.Session
    private var tokens: SessionTokens?
    private var loaded = false
    private var refreshing: Task<SessionTokens, any Error>?
    /// Refreshes made, for tests that prove concurrent requests share one.
    private(set) var refreshes = 0

    init(store: any ClientStore, refresh: @escaping @Sendable (String) async throws -> Components.Schemas.Session) {
        self.store = store
        self.refresh = refresh
    }

    /// The tokens, read from the store the first time.
    func current() async throws -> SessionTokens? {
        if !loaded {
            tokens = try await store.load(StoreKey.session).flatMap { try? JSONDecoder().decode(SessionTokens.self, from: $0) }
            loaded = true
        }
        return tokens
    }

    /// Keeps a session the server just gave (sign-up, sign-in, exchange, refresh), or forgets it (`nil`).
    func set(_ new: SessionTokens?) async throws {
        refreshing?.cancel()
        refreshing = nil
        tokens = new
        loaded = true
        try await store.save(StoreKey.session, try new.map { try JSONEncoder().encode($0) })
    }

    /// An access token to send: the current one, or a refreshed one when it is about to expire. `nil`:
    /// not signed in.
    func accessToken(now: Date = Date()) async throws -> String? {
        guard let tokens = try await current() else { return nil }
        if tokens.expiresAt.timeIntervalSince(now) > Self.refreshMargin { return tokens.accessToken }
        return try await refreshed(replacing: tokens.accessToken)
    }

    /// A new access token after the server refused `stale`: refreshed once, whoever asks, or the one a
    /// refresh already made since `stale` was handed out.
    func refreshed(replacing stale: String) async throws -> String {
        if let task = refreshing { return try await task.value.accessToken }
        guard let tokens = try await current() else { throw HealthKernelError.signedOut }
        if tokens.accessToken != stale { return tokens.accessToken }
        let refresh = self.refresh
        let task = Task { SessionTokens(try await refresh(tokens.refreshToken)) }
        refreshing = task
        refreshes += 1
        do {
            let new = try await task.value
            if refreshing == task { try await set(new) }
            return new.accessToken
        } catch {
            if refreshing == task { refreshing = nil }
            // A refused refresh token ends the session; a network failure keeps it for the next try.
            if let refused = HealthKernelError.unwrap(error) as? HealthKernelError, refused.status == 401 {
                try await set(nil)
            }
            throw HealthKernelError.unwrap(error)
        }
    }

    /// For tests: replaces the access token as if it had expired on the server.
    func spoil() async throws {
        guard var tokens = try await current() else { return }
        tokens.accessToken = "expired." + tokens.accessToken
        try await set(tokens)
    }
}

extension HealthKernelError {
    /// Asked for a token while signed out.
    static let signedOut = HealthKernelError(status: 401, message: "Not signed in", reason: "signed_out")

    init(status: Int, message: String, reason: String? = nil, field: String? = nil) {
        self.status = status
        self.message = message
        self.reason = reason
        self.field = field
        retryAfter = nil
    }
}
