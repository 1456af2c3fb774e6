// swift-tools-version: 5.9
// The iPhone side of a healthkernel app backend: a client of the example server's REST routes
// (protocol/rest-openapi.json), generated at build time by Apple's swift-openapi-generator, with a small
// layer for what an app does with it (HealthKernelClient.swift and beside it).
import PackageDescription

let package = Package(
    name: "HealthKernelClient",
    platforms: [.iOS(.v15), .macOS(.v12), .watchOS(.v8), .tvOS(.v15)],
    products: [.library(name: "HealthKernelClient", targets: ["HealthKernelClient"])],
    dependencies: [
        .package(url: "https://github.com/apple/swift-openapi-generator", from: "1.14.3"),
        .package(url: "https://github.com/apple/swift-openapi-runtime", from: "1.13.4"),
        .package(url: "https://github.com/apple/swift-openapi-urlsession", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.0.0"),
    ],
    targets: [
        .target(
            name: "HealthKernelClient",
            dependencies: [
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "OpenAPIURLSession", package: "swift-openapi-urlsession"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            plugins: [.plugin(name: "OpenAPIGenerator", package: "swift-openapi-generator")]
        ),
        .testTarget(name: "HealthKernelClientTests", dependencies: ["HealthKernelClient"]),
    ]
)
