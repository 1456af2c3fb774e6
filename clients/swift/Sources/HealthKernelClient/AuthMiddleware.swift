import Foundation
import HTTPTypes
import OpenAPIRuntime

/// Sends the session's access token with every operation that takes one, and after a 401 (the token
/// expired or was revoked on the server) refreshes it once and sends the request again: a refused token
/// applied nothing, so sending again is safe.
struct AuthMiddleware: ClientMiddleware {
    /// Operations that take no token (`security: []` in the document, or an optional one the client does
    /// not send: signing in with Apple or Google makes a new session). A test holds this to
    /// protocol/rest-openapi.json.
    static let withoutToken: Set<String> = [
        "authSignUp", "authSignIn", "authRefresh", "authExchange", "googleSignIn", "authRequestPasswordReset",
        "authResetPassword", "authVerifyEmail", "subscriptionsNotify", "getHealthz", "getOpenapiJson", "events",
        "home", "getDashboard",
    ]

    let session: Session

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        guard !Self.withoutToken.contains(operationID) else { return try await next(request, body, baseURL) }
        guard let token = try await session.accessToken() else { throw HealthKernelError.signedOut }
        let response = try await next(authorized(request, token), body, baseURL)
        guard response.0.status == .unauthorized else { return response }
        // The generated client's bodies are bytes in memory, which can be sent twice.
        guard body == nil || body?.iterationBehavior == .multiple else { return response }
        let fresh = try await session.refreshed(replacing: token)
        return try await next(authorized(request, fresh), body, baseURL)
    }

    private func authorized(_ request: HTTPRequest, _ token: String) -> HTTPRequest {
        var request = request
        request.headerFields[.authorization] = "Bearer \(token)"
        return request
    }
}
