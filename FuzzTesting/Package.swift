// swift-tools-version:5.4
import PackageDescription

import class Foundation.NSString

// libFuzzer targets for Courier's parsers and codecs. Build with
//   swift build -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library
// (run.sh does, and README.md says more). Each target is an executable whose
// entry point is `LLVMFuzzerTestOneInput`; libFuzzer supplies `main`.
//
// Tools version 5.4 on purpose: from 5.5 on, SwiftPM renames an executable's
// entry point to `<Target>_main` (so that tests can link it) and links
// `main` to that, which `-parse-as-library` leaves undefined.

/// SwiftPM names a path dependency after its folder: the checkout's name.
let courier = ((#filePath as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent
let courierPackage = (courier as NSString).lastPathComponent.lowercased()

func fuzzTarget(_ name: String, _ dependencies: [Target.Dependency]) -> Target {
    .executableTarget(name: name, dependencies: ["FuzzSupport"] + dependencies)
}

let package = Package(
    name: "CourierFuzzTesting",
    platforms: [.macOS("15.0")],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "4.0.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
    ],
    targets: [
        .target(
            name: "FuzzSupport",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
        fuzzTarget(
            "FuzzBinaryProvider",
            [
                .product(name: "CourierWire", package: courierPackage),
                .product(name: "NIOCore", package: "swift-nio"),
            ]),
        fuzzTarget(
            "FuzzFeedback",
            [
                .product(name: "CourierWire", package: courierPackage),
                .product(name: "NIOCore", package: "swift-nio"),
            ]),
        fuzzTarget(
            "FuzzDeviceMessage",
            [
                .product(name: "CourierWire", package: courierPackage),
                .product(name: "NIOCore", package: "swift-nio"),
            ]),
        fuzzTarget(
            "FuzzHTTP2Request",
            [
                .product(name: "CourierCore", package: courierPackage),
                .product(name: "CourierWire", package: courierPackage),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ]),
        fuzzTarget(
            "FuzzProviderToken",
            [
                .product(name: "CourierPKI", package: courierPackage),
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        fuzzTarget(
            "FuzzPayload",
            [
                .product(name: "CourierCore", package: courierPackage)
            ]),
        fuzzTarget(
            "FuzzClusterMessage",
            [
                .product(name: "CourierCore", package: courierPackage)
            ]),
        fuzzTarget(
            "FuzzTopicsExtension",
            [
                .product(name: "CourierCore", package: courierPackage),
                .product(name: "CourierPKI", package: courierPackage),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ]),
    ]
)
