import Foundation
import JSON
import Testing
import TestSupport

/// libpq and libcurl are opened on first use (CLibPQ's and CCurl's loaders): a kernel that uses neither
/// has neither mapped, and a kernel on PostgreSQL has libpq.
@Suite(.oneStoreOnly) struct LoadedLibrariesTests {
    /// The shared objects process `pid` has mapped.
    static func mapped(_ pid: Int32) throws -> Set<String> {
        // Read to the end by hand: procfs files report size 0, and Foundation stops early on them.
        let fd = open("/proc/\(pid)/maps", O_RDONLY)
        guard fd >= 0 else { throw CocoaError(.fileReadNoSuchFile) }
        defer { close(fd) }
        var bytes: [UInt8] = [], chunk = [UInt8](repeating: 0, count: 65_536)
        while case let n = read(fd, &chunk, chunk.count), n > 0 { bytes += chunk[..<n] }
        let maps = String(decoding: bytes, as: UTF8.self)
        return Set(maps.split(separator: "\n").compactMap { line in
            line.split(separator: " ", omittingEmptySubsequences: true).last.map(String.init)
        }.filter { $0.contains(".so") }.map { ($0 as NSString).lastPathComponent })
    }

    @Test func aDataDirKernelMapsNeitherLibpqNorLibcurl() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("hk-libs-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let kernel = try LiveKernel(["serve", "--data-dir", dir, "--log-level", "error"])
        #expect(kernel.call("kernel.info")?["result"]?["name"] == "healthkernel")
        let libraries = try Self.mapped(kernel.process.processIdentifier)
        #expect(libraries.contains { $0.hasPrefix("libjansson") }, "the check sees the libraries it should: \(libraries.sorted())")
        #expect(!libraries.contains { $0.hasPrefix("libpq") || $0.hasPrefix("libcurl") || $0.hasPrefix("libssl") }, "\(libraries.sorted())")
        kernel.closeInput()
        #expect(kernel.finish() == 0)
    }

    @Test func aKernelOnPostgresOpensLibpq() throws {
        let url = TestPostgres.url
        let schema = "libs_\(UInt32.random(in: 0...UInt32.max))"
        let kernel = try LiveKernel(["serve", "--store", url, "--store-schema", schema, "--log-level", "error"])
        #expect(kernel.call("kernel.info")?["result"]?["name"] == "healthkernel")
        let libraries = try Self.mapped(kernel.process.processIdentifier)
        #expect(libraries.contains { $0.hasPrefix("libpq") }, "\(libraries.sorted())")
        #expect(!libraries.contains { $0.hasPrefix("libcurl") })
        kernel.closeInput()
        #expect(kernel.finish() == 0)
    }
}
