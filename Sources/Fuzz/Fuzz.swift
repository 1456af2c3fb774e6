// Fuzz targets for libFuzzer, one binary: `scripts/fuzz` builds it with `-sanitize=fuzzer,address`
// and `-D FUZZING` (libFuzzer then supplies `main` and calls `LLVMFuzzerTestOneInput`), and picks the
// target with HEALTHKERNEL_FUZZ_TARGET. Built normally it is a replay driver: `healthkernel-fuzz TARGET
// FILE...` runs each input once, which is how crashes found by fuzzing stay regression tests.
#if canImport(Glibc)
import Glibc
#endif
import Auth
import Chrono
import JSON
import JSONParsing
import JSONRPC
import Kernel
import Logging
import Store
import Subscriptions

/// A fuzz target: bytes in, nothing out; anything but a crash, a hang or a sanitizer report is fine.
struct FuzzTarget {
    let name: String
    let summary: String
    let run: ([UInt8]) -> Void
}

/// libFuzzer calls one input at a time on one thread, so the shared kernel needs no lock.
enum Fuzz {
    static let secret = "healthkernel-fuzz-secret-0123456789abcdef"
    static let user = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"

    /// A memory-only kernel shared by the inputs of a run (as a long-lived kernel serves many hosts),
    /// made afresh every 20,000 inputs so that an hour's run does not grow without bound.
    nonisolated(unsafe) static var kernel = makeKernel()
    nonisolated(unsafe) static var inputs = 0

    static func makeKernel() -> Kernel {
        var config = KernelConfig()
        config.memoryOnly = true
        config.auth.jwtSecret = secret
        var appStore = AppStoreConfig()
        appStore.bundleId = "com.example.app"
        config.domains[AppStoreConfig.self] = appStore
        var logger = Logger(label: "fuzz")
        logger.logLevel = .critical
        return try! Kernel(config: config, logger: logger)
    }

    static let now = Timestamp(milliseconds: 1_795_000_000_000)
    nonisolated(unsafe) static let minter = try! TokenMinter(secret: Array(secret.utf8), ttl: 3600 * 24 * 365 * 50)
    static let userToken = minter.mint(sub: user, role: "authenticated", now: Timestamp(milliseconds: 1_763_769_600_000))
    static let serviceToken = minter.mint(sub: nil, role: "service_role", now: Timestamp(milliseconds: 1_763_769_600_000))

    /// `$USER` and `$SVC` in an input become valid tokens, so inputs reach every domain past auth.
    static func withTokens(_ bytes: [UInt8]) -> [UInt8] {
        var text = String(decoding: bytes, as: UTF8.self)
        guard text.contains("$") else { return bytes }
        text = text.replacing("$USER", with: userToken).replacing("$SVC", with: serviceToken)
        return Array(text.utf8)
    }

    static let verifier = try! SignedDataVerifier(pem: appleRootCAG3)

    nonisolated(unsafe) static let targets: [FuzzTarget] = [
        FuzzTarget(name: "request", summary: "request lines through a kernel's connection: framing, JSON, dispatch, every method's params and handler") { bytes in
            var connection = kernel.connection()
            connection.receive(withTokens(bytes))
            connection.finish()
            _ = connection.endBatch()
            connection.close()
        },
        FuzzTarget(name: "ingest", summary: "health.ingest params (a JSON object; auth added) through the kernel") { bytes in
            guard case .object(var params)? = try? JSON.parse(bytes) else { return }
            params["auth"] = .string(userToken)
            let request: JSON = ["jsonrpc": "2.0", "id": 1, "method": "health.ingest", "params": .object(params)]
            var connection = kernel.connection()
            connection.receive(Array(request.serialized.utf8) + [10])
            _ = connection.endBatch()
            connection.close()
        },
        FuzzTarget(name: "log", summary: "a log segment's bytes read by recovery (framing, checksums, records)") { bytes in
            withDataDir { dir in
                write(dir + "/" + StoreFiles.segmentName(firstSeq: 1), StoreFiles.walMagic + bytes)
                _ = StoreTool.verify(dir)
                _ = StoreTool.export(dir) { _ in }  // every record's changes decoded
            }
        },
        FuzzTarget(name: "snapshot", summary: "a snapshot's bytes decoded, every row read") { bytes in
            if case .success(let snapshot) = StoreFiles.decodeSnapshot(bytes) {
                try? snapshot.forEachRow { _, _, _, _ in }
            }
        },
        FuzzTarget(name: "jwt", summary: "a bearer token parsed and checked as the kernel checks tokens") { bytes in
            let token = String(decoding: bytes, as: UTF8.self)
            _ = try? JWT(token)
            _ = try? kernel.auth.authenticate(token: token, requirement: .user, now: now)
            // Claims as JSON: signed with the kernel's secret, so the checks behind the signature (absurd
            // exp, nbf, iat, sub, aud, role) are reached too.
            if let claims = try? JSON.parse(Array(bytes)), claims.objectValue != nil {
                let signed = minter.sign(claims)
                _ = try? kernel.auth.authenticate(token: signed, requirement: .user, now: now)
                _ = try? kernel.auth.authenticate(token: signed, requirement: .service, now: now)
            }
        },
        FuzzTarget(name: "jws", summary: "App Store signed data (JWS with an x5c chain) verified to Apple's root") { bytes in
            _ = try? verifier.verify(String(decoding: bytes, as: UTF8.self)) { _ in now }
        },
        FuzzTarget(name: "config", summary: "a configuration file read as at start-up") { bytes in
            var overrides = ConfigOverrides()
            overrides.configFile = "/fuzz/config.json"
            _ = try? KernelConfig.load(overrides: overrides, environment: [:]) { path in
                path == "/fuzz/config.json" ? bytes : nil
            }
        },
    ]

    static func complain(_ message: String) -> Never {
        let line = Array("healthkernel-fuzz: \(message)\n".utf8)
        _ = line.withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
        exit(2)
    }

    static func withDataDir(_ body: (String) -> Void) {
        var template = Array("/tmp/hk-fuzz-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { return }
        let dir = String(cString: made)
        body(dir)
        if let entries = opendir(dir) {
            while let entry = readdir(entries) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if name != "." && name != ".." { unlink(dir + "/" + name) }
            }
            closedir(entries)
        }
        rmdir(dir)
    }

    static func write(_ path: String, _ bytes: [UInt8]) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { return }
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }

    nonisolated(unsafe) static let selected: FuzzTarget = {
        let name = getenv("HEALTHKERNEL_FUZZ_TARGET").map { String(cString: $0) } ?? "request"
        guard let target = targets.first(where: { $0.name == name }) else {
            complain("no target \(name); the targets: \(targets.map(\.name).joined(separator: " "))")
        }
        return target
    }()
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    Fuzz.inputs += 1
    if Fuzz.inputs % 20_000 == 0 { Fuzz.kernel = Fuzz.makeKernel() }
    Fuzz.selected.run(size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

#if FUZZING
/// libFuzzer's driver, which `main` hands over to (SwiftPM links an executable's entry point as
/// `<module>_main`, so libFuzzer's own `main` is not the one that runs).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

@_cdecl("healthkernel_fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var (count, vector) = (argc, argv)
    return LLVMFuzzerRunDriver(&count, &vector) { data, size in fuzzOne(data, size) }
}
#else
/// The replay driver: `healthkernel-fuzz` lists the targets; `healthkernel-fuzz TARGET FILE...` runs each file.
/// Its stdout is its own report (this binary speaks no protocol); the kernel's stdout rule does not apply.
@main
struct Replay {
    static func main() {
        let arguments = CommandLine.arguments.dropFirst()
        if arguments.isEmpty {
            for target in Fuzz.targets { print("\(target.name)\t\(target.summary)") }
            return
        }
        setenv("HEALTHKERNEL_FUZZ_TARGET", arguments.first!, 1)
        for path in arguments.dropFirst() {
            let fd = open(path, O_RDONLY)
            guard fd >= 0 else { Fuzz.complain("cannot read \(path)") }
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = read(fd, &chunk, chunk.count)
                if n <= 0 { break }
                bytes += chunk[0..<n]
            }
            close(fd)
            Fuzz.selected.run(bytes)
        }
        print("ran \(arguments.count - 1) inputs of \(arguments.first!): no crash")
    }
}
#endif
