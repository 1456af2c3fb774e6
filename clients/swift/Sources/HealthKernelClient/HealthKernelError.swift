import Foundation
import HTTPTypes
import OpenAPIRuntime

/// A refusal from the server: its status and the body every route fails with (`ErrorReply`:
/// protocol/rest-routes.md). `reason` is the kernel's machine-readable word (`email_taken`,
/// `connection_disabled`, ...), `field` the body member or query parameter concerned.
public struct HealthKernelError: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: Int
    public var message: String
    public var reason: String?
    public var field: String?
    /// How long to wait before trying again (429 and 503 say).
    public var retryAfter: Duration?

    public var description: String {
        "HTTP \(status): \(message)" + (reason.map { " (\($0))" } ?? "") + (field.map { " [field \($0)]" } ?? "")
    }

    /// Whether the session is gone: the app should sign in again.
    public var isSignedOut: Bool { status == 401 }

    /// The error a failed response carries; any body that is not an `ErrorReply` still gives its status.
    init(status: HTTPResponse.Status, body: Data?) {
        self.status = status.code
        let reply = body.flatMap { try? JSONDecoder().decode(Components.Schemas.ErrorReply.self, from: $0) }
        message = reply?.error ?? status.reasonPhrase
        reason = reply?.reason
        field = reply?.field
        retryAfter = reply?.retryAfterMs.map { .milliseconds($0) }
    }

    /// The `HealthKernelError` inside an error the generated client threw (it wraps middleware errors).
    static func unwrap(_ error: any Error) -> any Error {
        if let client = error as? ClientError { return client.underlyingError }
        return error
    }
}

extension Error {
    /// The server's refusal inside an error thrown by `HealthKernelClient.api` (the generated client wraps
    /// what its middleware throws in its own `ClientError`); `nil` for a network or decoding failure.
    public var healthKernelError: HealthKernelError? { HealthKernelError.unwrap(self) as? HealthKernelError }
}

/// Turns every answer of 400 or more into a thrown `HealthKernelError`, so a caller handles one error type
/// whatever the operation, and an operation's result is always its success.
struct ErrorMiddleware: ClientMiddleware {
    /// An error body longer than this is not an `ErrorReply`: its status is enough.
    static let bodyLimit = 64 << 10

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        let (response, responseBody) = try await next(request, body, baseURL)
        guard response.status.code >= 400 else { return (response, responseBody) }
        var data: Data?
        if let responseBody { data = try? await Data(collecting: responseBody, upTo: Self.bodyLimit) }
        throw HealthKernelError(status: response.status, body: data)
    }
}
