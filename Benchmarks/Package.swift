// swift-tools-version:6.1
import PackageDescription

import class Foundation.NSString

/// SwiftPM names a path dependency after its folder: the checkout's name.
let courier = ((#filePath as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent
let courierPackage = (courier as NSString).lastPathComponent.lowercased()

let package = Package(
    name: "CourierBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../"),
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "4.0.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
    ],
    targets: [
        .executableTarget(
            name: "CourierBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "CourierCore", package: courierPackage),
                .product(name: "CourierWire", package: courierPackage),
                .product(name: "CourierPKI", package: courierPackage),
                .product(name: "CourierSQLite", package: courierPackage),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Benchmarks/CourierBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        // The load generator: many devices and a provider against a running `courier serve`.
        .executableTarget(
            name: "courier-load",
            dependencies: [
                .product(name: "CourierCore", package: courierPackage),
                .product(name: "CourierServer", package: courierPackage),
                .product(name: "CourierDevice", package: courierPackage),
                .product(name: "CourierProvider", package: courierPackage),
                .product(name: "CourierWire", package: courierPackage),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "LoadGenerator"
        ),
        // A TLS server that only holds connections: the TLS stack's own memory per connection.
        .executableTarget(
            name: "tls-sink",
            dependencies: [
                .product(name: "CourierServer", package: courierPackage),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "TLSSink"
        ),
        // An HTTP/2 server answering 200 to every request: the floor of the HTTP/2 provider API (h2load/compare.sh).
        .executableTarget(
            name: "h2-floor",
            dependencies: [
                .product(name: "CourierCore", package: courierPackage),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "H2Floor"
        ),
    ]
)
