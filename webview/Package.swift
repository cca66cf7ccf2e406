// swift-tools-version:6.2
import Foundation
import PackageDescription

/// Our own targets build without warnings, as in the main package.
let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]
/// The main package, by path; SwiftPM names a path dependency after its directory.
let tokend = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()

/// tokend for embedded web views (WebKitGTK 6.0, GTK 4). A package of its own
/// so that the daemon, tokenctl and the server .deb build without WebKitGTK.
let package = Package(
    name: "tokend-webview",
    products: [
        .executable(name: "tokend-webview", targets: ["tokend-webview"]),
        .library(name: "TokendWebView", targets: ["TokendWebView"]),
    ],
    dependencies: [
        .package(path: tokend.path),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .systemLibrary(name: "CWebKitGTK", pkgConfig: "webkitgtk-6.0", providers: [.apt(["libwebkitgtk-6.0-dev"])]),
        .target(name: "TokendWebView", dependencies: [
            "CWebKitGTK", .product(name: "TokendInterface", package: tokend.lastPathComponent.lowercased()),
        ], resources: [.embedInCode("relay.js")], swiftSettings: strict),
        .executableTarget(name: "tokend-webview", dependencies: [
            "TokendWebView", "CWebKitGTK", .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ], swiftSettings: strict),
        .testTarget(name: "TokendWebViewTests", dependencies: [
            "TokendWebView", "CWebKitGTK", .product(name: "TokendInterface", package: tokend.lastPathComponent.lowercased()),
        ], swiftSettings: strict),
    ]
)
