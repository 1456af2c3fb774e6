import DomainSupport
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

    public static let knownEnvironments = ["Production", "Sandbox"]

    public init() {}

    public static var sections: [String] { ["appStore"] }

    /// Reads `appStore: {bundleId, appAppleId, refreshIntervalSeconds, environments, rootCertificates}`. The App Store Server
    /// API (`serverApi`) comes with an issue of its own: until then it is an unknown key.
    public mutating func read(section name: String, _ r: inout ObjectReader, files: ConfigFiles) throws(FieldError) {
        if let v: String = try r.optional("bundleId") {
            guard !v.isEmpty, v.utf8.count <= 255 else { throw .outOfRange(r.path("bundleId"), "must be 1 to 255 bytes") }
            bundleId = v
        }
        if let v = try r.optional("appAppleId", in: 1...Int64.max) { appAppleId = v }
        if let v = try r.optional("refreshIntervalSeconds", in: 60...(7 * 86_400)) { refreshIntervalSeconds = v }
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
        try r.finish()
    }

    /// The verifier these roots make. The PEM was checked when the configuration was read.
    var verifier: SignedDataVerifier {
        SignedDataVerifier(roots: rootsPEM.flatMap { (try? SignedDataVerifier(pem: $0))?.roots ?? [] })
    }
}
