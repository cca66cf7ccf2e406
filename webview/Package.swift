// swift-tools-version:6.2
import Foundation
import PackageDescription

/// Our own targets build without warnings, as in the main package.
let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]
/// The main package, by path; SwiftPM names a path dependency after its directory.
let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
let tokend = here.deletingLastPathComponent()
let tokendInterface = Target.Dependency.product(name: "TokendInterface", package: tokend.lastPathComponent.lowercased())

/// The Swift runtime's static libraries, as one group (they refer to each other), and every
/// symbol resolved at link time: a shared library is otherwise allowed to leave some open.
/// FoundationEssentials and no more: no Foundation, FoundationInternationalization or ICU, whose
/// localization data would be most of the core (`make deb-libtokend-webview` holds it under 16 MiB).
let staticRuntime = ["--start-group"] + [
    "FoundationEssentials", "_FoundationCollections", "_FoundationCShims", "swiftSynchronization", "swiftDispatch",
    "dispatch", "BlocksRuntime", "swiftCore", "swift_Concurrency", "swift_StringProcessing", "swift_RegexParser",
    "swift_Builtin_float", "swiftGlibc",
].map { "-l\($0)" } + ["--end-group", "-z", "defs"]

/// tokend for embedded web views. A package of its own so that the daemon,
/// tokenctl and the server .deb build without WebKitGTK.
///
/// One core (TokendWebView: the reconcile, the relay, the network-process
/// watch) for both WebKitGTK APIs: 6.0 (GTK 4) by default, 4.1 (GTK 3) with
/// the WebKitGTK4_1 trait. Swift apps use it directly (6.0); C and every
/// language with GObject introspection use it through libtokend-webview-1
/// (webview/lib), which loads the `tokend-webview-backend` build for the
/// WebKitGTK the process has.
let package = Package(
    name: "tokend-webview",
    products: [
        .executable(name: "tokend-webview", targets: ["tokend-webview"]),
        .library(name: "TokendWebView", targets: ["TokendWebView"]),
        .library(name: "tokend-webview-backend", type: .dynamic, targets: ["TokendWebViewBackend"]),
    ],
    traits: [
        .trait(name: "WebKitGTK6", description: "The core on WebKitGTK 6.0 (GTK 4)."),
        .trait(name: "WebKitGTK4_1", description: "The core on WebKitGTK 4.1 (GTK 3), for libtokend-webview's 4.1 backend."),
        .default(enabledTraits: ["WebKitGTK6"]),
    ],
    dependencies: [
        .package(path: tokend.path),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .systemLibrary(name: "CWebKitGTK", pkgConfig: "webkitgtk-6.0", providers: [.apt(["libwebkitgtk-6.0-dev"])]),
        .systemLibrary(name: "CWebKit2GTK", pkgConfig: "webkit2gtk-4.1", providers: [.apt(["libwebkit2gtk-4.1-dev"])]),
        .target(name: "TokendWebView", dependencies: [
            .target(name: "CWebKitGTK", condition: .when(traits: ["WebKitGTK6"])),
            .target(name: "CWebKit2GTK", condition: .when(traits: ["WebKitGTK4_1"])),
            tokendInterface,
        ], resources: [.embedInCode("relay.js")], swiftSettings: strict),
        // Linked with the Swift runtime inside and only its three entry points exported, so that
        // the library runs where Swift is not installed and clashes with no other Swift code.
        .target(name: "TokendWebViewBackend", dependencies: ["TokendWebView"], swiftSettings: strict, linkerSettings: [
            .unsafeFlags(["-static-stdlib", "-Xlinker", "--version-script=\(here.path)/lib/backend.map"]
                + staticRuntime.flatMap { ["-Xlinker", $0] }),
        ]),
        .executableTarget(name: "tokend-webview", dependencies: [
            "TokendWebView", "CWebKitGTK", .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ], swiftSettings: strict),
        .testTarget(name: "TokendWebViewTests", dependencies: ["TokendWebView", "CWebKitGTK", tokendInterface], swiftSettings: strict),
    ]
)
