/// Version numbers reported by `kernel.info`, `version` and the OpenRPC document. The release is set
/// here and nowhere else: `scripts/set-version` writes it here and copies it to the Node package and
/// protocol/openrpc.json, and VersionTests fail when those differ from it (CHANGELOG.md says what
/// each version promises).
public enum KernelVersion {
    /// The kernel's release, a semantic version.
    public static let version = "0.2.0"
    /// The version of the wire contract (protocol/openrpc.json).
    public static let protocolVersion = "1.0"
}
