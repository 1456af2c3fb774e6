import Foundation
import Testing
import TestSupport
import Kernel

/// The release is decided in Sources/Kernel/Version.swift; everything else that names it must agree
/// (scripts/set-version writes them), and the changelog's newest entry must be this release.
@Suite(.oneStoreOnly) struct VersionTests {
    @Test func theNodePackageAndTheChangelogNameTheKernelsVersion() throws {
        let version = KernelVersion.version
        #expect(version.wholeMatch(of: /(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?/) != nil,
                "\(version) is not a semantic version")
        let package = try JSONSerialization.jsonObject(with: Data(contentsOf: Paths.root.appendingPathComponent("clients/node/package.json")))
        #expect((package as? [String: Any])?["version"] as? String == version, "clients/node/package.json: run scripts/set-version \(version)")
        let changelog = try String(contentsOf: Paths.root.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        let newest = changelog.split(separator: "\n").first { $0.hasPrefix("## ") && $0.dropFirst(3).first?.isNumber == true }
        #expect(newest?.hasPrefix("## \(version) ") == true, "CHANGELOG.md's newest entry is \(newest ?? "missing"), not \(version)")
    }
}
