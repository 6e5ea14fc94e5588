// swift-tools-version:6.1
import PackageDescription

let strict: [SwiftSetting] = [
    .unsafeFlags(["-warnings-as-errors"]),
    // Release builds leave out the run-time exclusivity checks (debug builds and the tests keep them; the
    // compile-time ones stay): on the binary path they cost 3% of the server's time, most of it in
    // swift-nio's inlined ByteBuffer code (docs/benchmarks.md, 2026-11-29).
    .unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release)),
]

let package = Package(
    name: "Courier",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "courier", targets: ["courier"]),
        .library(name: "CourierCore", targets: ["CourierCore"]),
        .library(name: "CourierWire", targets: ["CourierWire"]),
        .library(name: "CourierPKI", targets: ["CourierPKI"]),
        .library(name: "CourierSQLite", targets: ["CourierSQLite"]),
        .library(name: "CourierPostgres", targets: ["CourierPostgres"]),
        .library(name: "CourierServer", targets: ["CourierServer"]),
        .library(name: "CourierDevice", targets: ["CourierDevice"]),
        .library(name: "CourierProvider", targets: ["CourierProvider"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "4.0.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/vapor/sqlite-nio.git", from: "1.13.2"),
        // The store of several nodes.
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // The command line's client of the admin API (HTTPS with Courier's CA).
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // The admin server; without swift-configuration (Courier reads its own JSON file).
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: ["FullFoundation"]),
        // Header names of the web console (hummingbird's own HTTP types).
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        // The request parts hummingbird's HTTP/1.1 channel decodes (the admin port's request deadline).
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
    ],
    targets: [
        .target(
            name: "CourierCore",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: strict
        ),
        .target(
            name: "CourierWire",
            dependencies: [
                "CourierCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        // AES with its key expanded once, from the BoringSSL that swift-crypto
        // links in: device tokens are four AES blocks under four fixed keys
        // (DeviceTokens.swift, docs/benchmarks.md).
        .target(
            name: "CourierAES",
            dependencies: [.product(name: "CryptoExtras", package: "swift-crypto")]
        ),
        .target(
            name: "CourierPKI",
            dependencies: [
                "CourierAES",
                "CourierCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "CourierSQLite",
            dependencies: [
                "CourierCore",
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "CourierPostgres",
            dependencies: [
                "CourierCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "CourierStoreConformance",
            dependencies: ["CourierCore"],
            swiftSettings: strict
        ),
        // One BoringSSL setting that swift-nio-ssl does not offer: the device
        // gateway keeps only a hash of each device's certificate after the
        // handshake (ServerTLS, docs/benchmarks.md).
        .target(
            name: "CourierBoringSSL",
            dependencies: [.product(name: "NIOSSL", package: "swift-nio-ssl")]
        ),
        .target(
            name: "CourierServer",
            dependencies: [
                "CourierBoringSSL",
                "CourierCore",
                "CourierWire",
                "CourierPKI",
                "CourierSQLite",
                "CourierPostgres",
                // The web console's test push is a provider of the HTTP/2 API.
                "CourierProvider",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            // The web console's page, script and style sheet, and the admin API's
            // OpenAPI document (docs/openapi.json is a copy; a test compares them), compiled in.
            resources: [.embedInCode("Console"), .embedInCode("Admin/openapi.json")],
            swiftSettings: strict
        ),
        .target(
            name: "CourierDevice",
            dependencies: [
                "CourierCore",
                "CourierWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "CourierProvider",
            dependencies: [
                "CourierCore",
                "CourierWire",
                "CourierPKI",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "courier",
            dependencies: [
                "CourierCore",
                "CourierWire",
                "CourierPKI",
                "CourierServer",
                "CourierSQLite",
                "CourierDevice",
                "CourierProvider",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strict
        ),
        .target(name: "CourierTestSupport", path: "Tests/CourierTestSupport"),
        .testTarget(name: "CourierCoreTests", dependencies: ["CourierCore"]),
        .testTarget(
            name: "CourierWireTests",
            dependencies: [
                "CourierWire",
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "CourierPKITests",
            dependencies: [
                "CourierPKI",
                "CourierTestSupport",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "CourierProviderTests",
            dependencies: ["CourierProvider", "CourierPKI", "CourierCore", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(
            name: "CourierSQLiteTests",
            dependencies: ["CourierSQLite", "CourierStoreConformance", "CourierTestSupport", .product(name: "SQLiteNIO", package: "sqlite-nio")]
        ),
        .testTarget(
            name: "CourierPostgresTests",
            dependencies: [
                "CourierPostgres", "CourierStoreConformance", "CourierTestSupport", .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "CourierServerTests",
            dependencies: [
                "CourierServer",
                "CourierPKI",
                "CourierWire",
                "CourierDevice",
                "CourierProvider",
                "CourierTestSupport",
                "courier",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
    ]
)
