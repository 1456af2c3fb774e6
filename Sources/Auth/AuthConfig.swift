import HTTPClient
import JSON

/// An OpenID Connect provider whose id tokens `auth.exchange` accepts.
public struct ProviderConfig: Sendable, Equatable {
    /// `google`, `auth0`, `apple`, or another name with an explicit `issuer`.
    public var name: String
    /// JWKS file with the provider's signing keys, re-read when it changes...
    public var jwksPath: String?
    /// ...or the provider's JWKS URL, fetched and kept fresh (exactly one of the two is given).
    public var jwksUrl: String?
    /// Client ids the id token must be issued to (`aud`).
    public var audiences: [String]
    /// Auth0 tenant domain; the issuer is then `https://<domain>/`.
    public var domain: String?
    /// The issuer, for providers other than google, auth0 and apple.
    public var issuer: String?

    /// The `iss` values accepted from this provider.
    public var issuers: [String] {
        switch name {
        case "google": return ["https://accounts.google.com", "accounts.google.com"]
        case "apple": return ["https://appleid.apple.com"]
        case "auth0": return domain.map { ["https://\($0)/"] } ?? []
        default: return issuer.map { [$0] } ?? []
        }
    }
}

/// The `auth` section of the configuration.
public struct AuthConfig: Sendable, Equatable {
    /// HS256 secret (at least 32 bytes); nil: generated once and kept in the data dir.
    public var jwtSecret: String?
    /// Secrets used before `jwtSecret`: tokens and cursors they signed are still accepted (a rotation's
    /// grace period); nothing new is signed with them.
    public var previousJwtSecrets: [String] = []
    /// When not empty, tokens must carry one of these `iss` values (or the kernel's own).
    public var acceptedIssuers: [String] = []
    public var accessTokenTtlSeconds = 3600
    public var refreshTokenTtlSeconds = 30 * 86_400
    /// A spent refresh token presented again within this many seconds answers the session its first use
    /// created (concurrent refreshes of two tabs); later, or with 0, it revokes the session.
    public var refreshReuseIntervalSeconds = 10
    /// Sign-ups an hour from one client address (the host's `clientAddress`), and from requests that
    /// name none (all of them together); 0: no limit.
    public var signUpsPerHourPerAddress = 30
    public var signUpsPerHourWithoutAddress = 1000
    /// Sign-up proves the email before the account can sign in, and answers `{accepted: true}` whether or
    /// not the email has an account (a new one gets a verification mail, its owner an `account_exists`
    /// mail): sign-up no longer tells anyone which emails have accounts.
    public var requireEmailVerification = false
    /// Sign-in sessions kept per user: a new one ends the oldest past it; 0: no limit.
    public var sessionsPerUser = 100
    /// JWKS file with extra ES256/RS256 keys for access tokens signed elsewhere.
    public var jwksPath: String?
    public var providers: [ProviderConfig] = []

    /// The defaults.
    public init() {}

    /// Reads the members of the `auth` object that are not single values: the secret lists and the
    /// providers (the kernel's settings table reads the rest from the same object, and finishes it, so an
    /// unknown key is refused once). Paths are resolved with `resolve`.
    public mutating func readStructured(_ r: inout ObjectReader, resolve: (String) -> String) throws(FieldError) {
        var c = self
        c.previousJwtSecrets = try r.optional("previousJwtSecrets") ?? []
        for (i, secret) in c.previousJwtSecrets.enumerated() where secret.utf8.count < 32 {
            throw .outOfRange(r.path("previousJwtSecrets") + "[\(i)]", "must be at least 32 bytes")
        }
        c.acceptedIssuers = try r.optional("acceptedIssuers") ?? []
        if r.has("providers") {
            var providers = try r.object("providers")
            for name in providers.object.keys {
                var p = try providers.object(name)
                let path: String? = try p.optional("jwks"), url: String? = try p.optional("jwksUrl")
                guard (path == nil) != (url == nil) else {
                    throw FieldError(field: p.path("jwks"), reason: path == nil ? "missing_field" : "invalid_params",
                                     message: "\(p.path) needs exactly one of jwks (a file) and jwksUrl")
                }
                if let url, !HTTPClient.allowed(url) {
                    throw .outOfRange(p.path("jwksUrl"), "must be an https:// URL (or http:// to this machine)")
                }
                var provider = ProviderConfig(name: name, jwksPath: path.map(resolve), jwksUrl: url,
                                              audiences: try p.required("audiences"))
                guard !provider.audiences.isEmpty else { throw .outOfRange(p.path("audiences"), "must name at least one client id") }
                provider.domain = try p.optional("domain")
                provider.issuer = try p.optional("issuer")
                if name == "auth0" && provider.domain == nil {
                    throw FieldError(field: p.path("domain"), reason: "missing_field", message: "\(p.path("domain")) is required")
                }
                if !["google", "auth0", "apple"].contains(name) && provider.issuer == nil {
                    throw FieldError(field: p.path("issuer"), reason: "missing_field", message: "\(p.path("issuer")) is required")
                }
                try p.finish()
                c.providers.append(provider)
            }
            try providers.finish()
        }
        self = c
    }
}
