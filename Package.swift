// swift-tools-version:6.0
import Foundation
import PackageDescription

/// This folder, for linker flags that name files in it.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().path

// Layers, imports pointing one way:
// JSON (the value type, its binary form and serializer; pure Swift) -> JSONParsing (text to values with jansson,
// the only module that touches it, through CJansson, its allocations in JanssonArena) -> (Chrono, Threads, HTTPClient <- CCurl, JSONRPC, Store <- CCRC32C) -> DomainSupport
// -> domains (Auth, ScreenTime, Rewards, Sessions, Subscriptions, Health, Sync), which see storage only through Storage (the interface; Store is the
// in-memory implementation with its journal; Postgres <- CLibPQ the other; only the composition root knows them)
//   -> Kernel (composition root: configuration and the one list of methods) -> healthkernel (executable).
// HealthImport (an Apple Health export, streamed through expat <- CExpat, into health.ingest batches) sits beside
// Kernel, on Health, for the executable's `health import-export`.
// jwt-kit is a test dependency only: the tests use it as an independent JWT implementation.
// Release builds of the kernel's own modules optimise across module boundaries, so generic store code
// (Table<Row>) is specialised for the rows that call it instead of looking up type metadata at run time.
// Debug builds (the tests', the simulation's) also compile the simulation's mutant switches (Sources/Mutants).
let optimized: [SwiftSetting] = [.unsafeFlags(["-cross-module-optimization"], .when(configuration: .release)), .enableUpcomingFeature("MemberImportVisibility"),
                                 .define("SIMULATION", .when(configuration: .debug))]

let package = Package(
    name: "healthkernel",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "healthkernel", targets: ["healthkernel"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.0"),
        .package(url: "https://github.com/apple/swift-crypto", "4.1.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
    ],
    targets: [
        .systemLibrary(
            name: "CJansson",
            pkgConfig: "jansson",
            providers: [.apt(["libjansson-dev"])]
        ),
        // libpq and libcurl: their headers at build time (libpq-dev, libcurl4-openssl-dev), their
        // libraries opened on first use (each target's loader.c says why), so a process that uses neither
        // loads neither.
        .target(name: "CLoader"),
        .target(name: "CLibPQ", dependencies: ["CLoader"]),
        .target(name: "CCurl", dependencies: ["CLoader"]),
        .target(name: "CExpat", dependencies: ["CLoader"]),
        .target(name: "HTTPClient", dependencies: ["CCurl"], swiftSettings: optimized),
        .target(name: "JSON", swiftSettings: optimized),
        .target(name: "JanssonArena", dependencies: ["CJansson"]),
        .target(name: "JSONParsing", dependencies: ["CJansson", "JanssonArena", "JSON"], swiftSettings: optimized),
        .target(name: "Threads", swiftSettings: optimized),
        .target(name: "Mutants", swiftSettings: optimized),
        .target(name: "Chrono", dependencies: ["Threads"], swiftSettings: optimized),
        .target(name: "JSONRPC", dependencies: ["JSON", "JSONParsing", "Chrono", "Threads", "Mutants"], swiftSettings: optimized),
        .target(name: "CCRC32C"),
        .target(name: "Storage", dependencies: ["JSON"], swiftSettings: optimized),
        .target(name: "Store", dependencies: ["JSON", "JSONParsing", "Chrono", "Threads", "CCRC32C", "Storage", "Mutants"], swiftSettings: optimized),
        .target(
            name: "Postgres",
            dependencies: ["CLibPQ", "JSON", "JSONParsing", "Chrono", "Storage", "Threads", "Mutants"],
            swiftSettings: optimized
        ),
        .target(
            name: "DomainSupport",
            dependencies: ["JSON", "JSONRPC", "Chrono", "Storage", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: optimized
        ),
        .target(name: "ScreenTime", dependencies: ["JSON", "JSONRPC", "Chrono", "Storage", "DomainSupport"], swiftSettings: optimized),
        .target(name: "Rewards", dependencies: ["JSON", "JSONRPC", "Chrono", "Storage", "DomainSupport"], swiftSettings: optimized),
        .target(name: "MCP", dependencies: ["JSON", "JSONParsing", "JSONRPC", "Chrono"], swiftSettings: optimized),
        .target(
            name: "Sessions",
            dependencies: ["JSON", "JSONRPC", "Chrono", "Storage", "DomainSupport"],
            swiftSettings: optimized
        ),
        .target(
            name: "Sync",
            dependencies: ["JSON", "JSONRPC", "Chrono", "Storage", "DomainSupport"],
            swiftSettings: optimized
        ),
        .target(
            name: "Subscriptions",
            dependencies: [
                "JSON", "JSONParsing", "JSONRPC", "Chrono", "Storage", "DomainSupport", "HTTPClient", "Threads",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: optimized
        ),
        .target(
            name: "Health",
            dependencies: ["JSON", "JSONRPC", "Chrono", "Storage", "DomainSupport", "Threads", "Mutants", .product(name: "Logging", package: "swift-log")],
            swiftSettings: optimized
        ),
        .target(
            name: "Auth",
            dependencies: [
                "JSON", "JSONParsing", "JSONRPC", "Chrono", "Storage", "DomainSupport", "HTTPClient", "Threads",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: optimized
        ),
        .target(
            name: "Kernel",
            dependencies: [
                "JSON", "JSONParsing", "JSONRPC", "Chrono", "Storage", "Store", "Postgres", "DomainSupport", "Auth", "ScreenTime", "Rewards", "Sessions", "Subscriptions", "Sync", "Health",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: optimized
        ),
        .executableTarget(
            name: "healthkernel",
            dependencies: [
                "Kernel", "JSON", "JSONParsing", "JSONRPC", "Store", "Postgres", "MCP", "Chrono", "Threads", "HealthImport", "DomainSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["exports.map"],
            swiftSettings: optimized,
            // Release builds export no dynamic symbols (exports.map says why): start-up 13.4 -> 9.2 ms.
            linkerSettings: [.unsafeFlags(["-Xlinker", "--version-script=\(root)/Sources/healthkernel/exports.map"], .when(configuration: .release))]
        ),
        // What a data dir holds after a power loss at any instant (the crash-point walk's and the simulation's).
        .target(name: "DiskModel", dependencies: ["Store"]),
        // PostgreSQL at read committed, in memory, running the kernel's SQL (the simulation's and the tests' model).
        .target(name: "PostgresModel", dependencies: ["Postgres", "Storage", "Threads"]),
        // Fuzz targets: a replay driver in a normal build, libFuzzer's in `scripts/fuzz`'s.
        .executableTarget(
            name: "healthkernel-fuzz",
            dependencies: ["Kernel", "Auth", "Chrono", "JSON", "JSONParsing", "JSONRPC", "Store", "Subscriptions",
                           .product(name: "Logging", package: "swift-log")],
            path: "Sources/Fuzz"
        ),
        // The deterministic simulation (scripts/sim): the kernel under seeded clients, threads, clock and disk.
        .executableTarget(
            name: "healthkernel-sim",
            dependencies: ["Kernel", "Chrono", "DiskModel", "JSON", "JSONParsing", "JSONRPC", "Mutants", "Postgres", "PostgresModel", "ScreenTime", "Storage",
                           "Store", "Subscriptions", "TestSupport", "Threads",
                           .product(name: "Crypto", package: "swift-crypto"),
                           .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "Logging", package: "swift-log")],
            path: "Sources/Simulation",
            swiftSettings: [.define("SIMULATION", .when(configuration: .debug))]
        ),
        .target(
            name: "TestSupport",
            dependencies: [
                "Chrono", "JSON", "JSONParsing", "Storage", "Store", "Postgres", "PostgresModel",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            path: "Tests/TestSupport"),
        .testTarget(name: "JSONTests", dependencies: ["JSON", "JSONParsing", "TestSupport"]),
        .testTarget(name: "ThreadsTests", dependencies: ["Threads", "TestSupport"]),
        .testTarget(name: "HTTPClientTests", dependencies: ["HTTPClient", "TestSupport"]),
        .testTarget(name: "JSONRPCTests", dependencies: ["JSONRPC", "JSON", "JSONParsing", "Chrono", "TestSupport"]),
        .testTarget(name: "ChronoTests", dependencies: ["Chrono", "TestSupport"]),
        .testTarget(name: "StoreTests", dependencies: ["Store", "Storage", "Threads", "JSON", "JSONParsing", "Chrono", "DiskModel", "TestSupport"]),
        .target(name: "HealthImport", dependencies: ["Health", "CExpat", "JSON", "JSONRPC", "Chrono", "DomainSupport"], swiftSettings: optimized),
        .testTarget(name: "HealthTests", dependencies: ["Health", "HealthImport", "Storage", "Store", "Chrono", "JSON", "JSONRPC", "DomainSupport", "TestSupport"]),
        .testTarget(name: "SessionsTests", dependencies: ["Sessions", "Storage", "Store", "Chrono", "JSON", "JSONRPC", "TestSupport"]),
        .testTarget(name: "ScreenTimeTests", dependencies: ["ScreenTime", "Storage", "Store", "Chrono", "JSON", "JSONRPC", "TestSupport"]),
        .testTarget(name: "MCPTests", dependencies: ["MCP", "JSON", "JSONParsing", "Chrono", "Threads", "TestSupport"]),
        .testTarget(name: "RewardsTests", dependencies: ["Rewards", "Storage", "Store", "Chrono", "JSON", "JSONRPC", "TestSupport"]),
        .testTarget(
            name: "AuthTests",
            dependencies: ["Auth", "Storage", "Store", "JSON", "JSONRPC", "Chrono", "DomainSupport", "TestSupport",
                           .product(name: "JWTKit", package: "jwt-kit")]
        ),
        .testTarget(
            name: "SubscriptionsTests",
            dependencies: [
                "Subscriptions", "JSON", "JSONParsing", "Chrono", "DomainSupport", "Storage", "Store", "TestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ]
        ),
        .testTarget(
            name: "KernelTests",
            dependencies: ["Kernel", "JSONRPC", "JSON", "JSONParsing", "Chrono", "DiskModel", "Storage", "Store", "Postgres", "PostgresModel", "Threads", "Subscriptions", "Health", "HealthImport", "Auth", "healthkernel", "healthkernel-fuzz", "TestSupport"]
        ),
    ]
)
