import DomainSupport
import HTTPClient
import JSON

/// The `appStore` section: which app's purchases the kernel accepts, and whose signatures it trusts.
public struct AppStoreConfig: DomainConfig {
    /// The app's bundle id; until it is set, no receipt verifies (`bundle_mismatch`).
    public var bundleId: String?
    /// The app's Apple id, checked on Production notifications when set.
    public var appAppleId: Int64?
    /// The environments whose receipts count.
    public var environments: [String] = ["Production", "Sandbox"]
    /// The trusted roots, PEM; Apple Root CA - G3 unless the file names others.
    public var rootsPEM: [String] = [appleRootCAG3]
    /// How long after `subscriptions.refresh` looked at a membership it is due again.
    public var refreshIntervalSeconds: Int64 = MembershipRules.defaultRefreshIntervalMs / 1000
    /// The App Store Server API, when the deployment gives it a key: refresh then asks Apple.
    public var serverApi: ServerAPISettings?
    /// What becomes of Apple's consumption requests.
    public var consumptionRequests = ConsumptionPolicy()

    public static let knownEnvironments = ["Production", "Sandbox"]

    public init() {}

    public static var sections: [String] { ["appStore"] }

    /// Reads the members of `appStore` that are not single values: `environments`, `rootCertificates`,
    /// `serverApi`, `consumptionRequests`. The kernel's settings table reads `bundleId`, `appAppleId` and
    /// `refreshIntervalSeconds` from the same object first, and finishes it.
    public mutating func read(section name: String, _ r: inout ObjectReader, files: ConfigFiles) throws(FieldError) {
        if let v: [String] = try r.optional("environments") {
            guard !v.isEmpty, v.allSatisfy(Self.knownEnvironments.contains) else {
                throw .outOfRange(r.path("environments"), "must list one or more of Production, Sandbox")
            }
            environments = v
        }
        if let paths: [String] = try r.optional("rootCertificates") {
            guard !paths.isEmpty else { throw .outOfRange(r.path("rootCertificates"), "must name at least one PEM file") }
            var pems: [String] = []
            for (i, path) in paths.enumerated() {
                let field = r.path("rootCertificates[\(i)]")
                guard let bytes = files.read(path) else { throw .outOfRange(field, "names a file that cannot be read: \(files.resolve(path))") }
                let pem = String(decoding: bytes, as: UTF8.self)
                guard (try? SignedDataVerifier(pem: pem)).map({ !$0.roots.isEmpty }) == true else {
                    throw .outOfRange(field, "is not a PEM certificate: \(files.resolve(path))")
                }
                pems.append(pem)
            }
            rootsPEM = pems
        }
        if r.has("serverApi") {
            var api = try r.object("serverApi")
            serverApi = try ServerAPISettings(&api, files: files)
            try api.finish()
            guard bundleId != nil else { throw .outOfRange(r.path("serverApi"), "needs appStore.bundleId (the token names the app)") }
        }
        if r.has("consumptionRequests") {
            var c = try r.object("consumptionRequests")
            consumptionRequests = try ConsumptionPolicy(&c)
            guard !consumptionRequests.answer || serverApi != nil else {
                throw .outOfRange(r.path("consumptionRequests.answer"), "needs appStore.serverApi (answers go through the App Store Server API)")
            }
        }
    }

    /// The check of `appStore.bundleId`: the message when `id` is refused.
    public static func checkBundleId(_ id: String) -> String? {
        !id.isEmpty && id.utf8.count <= 255 ? nil : "must be 1 to 255 bytes"
    }

    /// `HEALTHKERNEL_APPSTORE_KEY`: the key's PEM text, or the path of its file; it wins over the file's
    /// `privateKey`. Set without a `serverApi` block, it is refused rather than silently unused. Then the
    /// key, from wherever it came, must sign: else start-up stops naming its source (never quoting it).
    public mutating func read(environment: [String: String], readFile: (String) -> [UInt8]?) throws(FieldError) {
        let name = "HEALTHKERNEL_APPSTORE_KEY"
        let value = environment[name].flatMap { $0.isEmpty ? nil : $0 }
        guard var settings = serverApi, let bundleId else {
            if value != nil { throw FieldError(field: name, reason: "out_of_range", message: "\(name) is set but appStore.serverApi is not configured") }
            return
        }
        var source = "appStore.serverApi.privateKey"
        if let value {
            source = name
            if value.contains("-----BEGIN") {
                settings.privateKeyPEM = value
            } else {
                guard let bytes = readFile(value) else {
                    throw FieldError(field: name, reason: "out_of_range", message: "\(name) names a file that cannot be read: \(value)")
                }
                settings.privateKeyPEM = String(decoding: bytes, as: UTF8.self)
            }
        }
        guard !settings.privateKeyPEM.isEmpty else {
            throw FieldError(field: source, reason: "missing_field", message: "\(source) is missing (name the .p8 file, or set \(name))")
        }
        do {
            _ = try ServerAPIToken(p8: settings.privateKeyPEM, keyId: settings.keyId, issuerId: settings.issuerId, bundleId: bundleId)
        } catch {
            throw .outOfRange(source, error.description)
        }
        serverApi = settings
    }

    /// The verifier these roots make. The PEM was checked when the configuration was read.
    var verifier: SignedDataVerifier {
        SignedDataVerifier(roots: rootsPEM.flatMap { (try? SignedDataVerifier(pem: $0))?.roots ?? [] })
    }
}

/// `appStore.serverApi`: the App Store Server API's credentials and how it is called.
public struct ServerAPISettings: Sendable, Equatable {
    public var issuerId: String
    public var keyId: String
    /// The in-app purchase key, PKCS#8 PEM. A secret: never logged, never in `kernel.info`.
    var privateKeyPEM: String
    /// Both environments' base URL instead of Apple's (tests, a proxy): Sandbox calls go under `/sandbox`.
    public var baseURL: String?
    /// The most one call may take, connecting included.
    public var timeoutSeconds = 10
    /// Calls in flight at once during one refresh.
    public var maxConcurrentCalls = 8

    public init(issuerId: String, keyId: String, privateKeyPEM: String, baseURL: String? = nil) {
        (self.issuerId, self.keyId, self.privateKeyPEM, self.baseURL) = (issuerId, keyId, privateKeyPEM, baseURL)
    }

    /// Reads `{issuerId, keyId, privateKey, baseUrl, timeoutSeconds, maxConcurrentCalls}`; the key file is read
    /// now, and checked with the environment (`AppStoreConfig.read(environment:readFile:)`), which may replace it.
    init(_ r: inout ObjectReader, files: ConfigFiles) throws(FieldError) {
        func token(_ key: String) throws(FieldError) -> String {
            let v: String = try r.required(key)
            guard !v.isEmpty, v.utf8.count <= 100, v.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f && $0 != 0x22 && $0 != 0x5c }) else {
                throw .outOfRange(r.path(key), "must be 1 to 100 printable ASCII characters")
            }
            return v
        }
        self.init(issuerId: try token("issuerId"), keyId: try token("keyId"), privateKeyPEM: "")
        if let path: String = try r.optional("privateKey") {
            guard let bytes = files.read(path) else { throw .outOfRange(r.path("privateKey"), "names a file that cannot be read: \(files.resolve(path))") }
            privateKeyPEM = String(decoding: bytes, as: UTF8.self)
        }
        if case .some(.some(let url)) = try r.nullable("baseUrl", as: String.self) {
            guard HTTPClient.allowed(url), url.utf8.count <= 2048 else {
                throw .outOfRange(r.path("baseUrl"), "must be an https:// URL (plain http:// only to localhost or 127.x.x.x)")
            }
            baseURL = url
        }
        if let v = try r.optional("timeoutSeconds", in: 1...60) { timeoutSeconds = Int(v) }
        if let v = try r.optional("maxConcurrentCalls", in: 1...64) { maxConcurrentCalls = Int(v) }
    }
}
