import Kernel
import Testing
import TestSupport
@testable import healthkernel

/// `serve`'s flags read without ArgumentParser when they are all settings-table flags; anything else is
/// the parser's.
@Suite(.oneStoreOnly) struct QuickServeTests {
    func read(_ arguments: String) -> [String: String]? {
        QuickServe.overrides(ArraySlice(arguments.split(separator: " ").map(String.init)))?.values
    }

    @Test func settingsFlagsBecomeOverrides() {
        #expect(read("") == [:])
        #expect(read("serve --data-dir /tmp/x --fsync everysec --memory-only") ==
                ["store.dataDir": "/tmp/x", "store.fsync": "everysec", "store.memoryOnly": "true"])
        #expect(read("--log-level=error --listen unix:/tmp/s --no-stdin") ==
                ["kernel.logLevel": "error", "serve.listen": "unix:/tmp/s", "serve.noStdin": "true"])
        #expect(read("--fsync sometimes") == ["store.fsync": "sometimes"], "values are the settings table's to check")
    }

    @Test func anythingElseGoesToTheParser() {
        for arguments in ["--help", "serve --help", "-h", "call kernel.info", "version x", "--config c.json", "--enable-test-methods",
                          "--colour red", "--data-dir", "--data-dir --fsync always", "--memory-only=yes", "serve serve", "x"] {
            #expect(read(arguments) == nil, "\(arguments)")
        }
    }
}
