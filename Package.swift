// swift-tools-version:6.0
import PackageDescription

let nio = Target.Dependency.product(name: "NIOCore", package: "swift-nio")
let nioPosix = Target.Dependency.product(name: "NIOPosix", package: "swift-nio")
let logging = Target.Dependency.product(name: "Logging", package: "swift-log")
let lifecycle = Target.Dependency.product(name: "ServiceLifecycle", package: "swift-service-lifecycle")
let argumentParser = Target.Dependency.product(name: "ArgumentParser", package: "swift-argument-parser")

let package = Package(
    name: "tokend",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "tokend", targets: ["tokend"]),
        .executable(name: "tokenctl", targets: ["tokenctl"]),
        .executable(name: "tokend-native-host", targets: ["tokend-native-host"]),
        .library(name: "TokendClient", targets: ["TokendClient"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.8.0"),
    ],
    targets: [
        // Wire types, JSON, interface declarations: no NIO.
        .target(name: "Varlink"),
        // A string type that never prints: tokens and client secrets.
        .target(name: "Secrets"),
        // NUL framing, Unix-socket server and client.
        .target(name: "VarlinkNIO", dependencies: ["Varlink", nio, nioPosix, logging]),
        // The io.tokend.Broker interface: its one declaration and its typed wire values.
        .target(
            name: "TokendInterface",
            dependencies: ["Varlink"],
            resources: [.embedInCode("io.tokend.Broker.varlink")]
        ),
        // Token requests and responses (pure) and the AsyncHTTPClient-backed endpoint client.
        // Discovery, device and authorization-code logins, ID tokens (jwt-kit).
        .target(name: "OAuth", dependencies: [
            "Secrets", .product(name: "AsyncHTTPClient", package: "async-http-client"), logging,
            .product(name: "Crypto", package: "swift-crypto"), .product(name: "JWTKit", package: "jwt-kit"),
        ]),
        // RFC 6265 cookie jar: parser, storage, retrieval, change log. Foundation only.
        .target(name: "CookieJar"),
        .target(name: "StateStore", dependencies: [
            "CookieJar", "Secrets", logging, .product(name: "Crypto", package: "swift-crypto"),
        ]),
        .target(name: "Broker", dependencies: ["CookieJar", "OAuth", "Secrets", "StateStore", logging]),
        .target(name: "Config", dependencies: [.product(name: "TOMLKit", package: "TOMLKit")]),
        // libsystemd (Debian: libsystemd-dev) and the small Swift layer over it.
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        .target(name: "Systemd", dependencies: ["CSystemd", logging]),
        .target(name: "TokendServer", dependencies: [
            "Broker", "Config", "CookieJar", "OAuth", "Secrets", "StateStore", "Systemd", "TokendInterface", "Varlink", "VarlinkNIO",
            logging, lifecycle, nio, nioPosix, .product(name: "UnixSignals", package: "swift-service-lifecycle"),
        ]),
        .executableTarget(name: "tokend", dependencies: [
            "TokendServer", "Systemd", "Config", "StateStore", argumentParser, logging, lifecycle,
        ]),
        .target(name: "TokendClient", dependencies: ["Varlink", "VarlinkNIO", "TokendInterface", nio, nioPosix]),
        .executableTarget(name: "tokenctl", dependencies: ["TokendClient", "Varlink", argumentParser]),
        // WebExtension native messaging framing (pure) and the host the browser starts.
        .target(name: "NativeMessaging", dependencies: ["Varlink"]),
        .executableTarget(name: "tokend-native-host", dependencies: [
            "NativeMessaging", "TokendInterface", "Varlink", "VarlinkNIO",
        ]),
        // Test-only: a server implementing org.varlink.certification for the reference suite.
        .executableTarget(
            name: "varlink-certification",
            dependencies: ["Varlink", "VarlinkNIO", logging, nio, nioPosix],
            resources: [.embedInCode("org.varlink.certification.varlink")]
        ),
        .testTarget(name: "VarlinkTests", dependencies: ["Varlink", "VarlinkNIO", nio]),
        .testTarget(name: "OAuthTests", dependencies: [
            "OAuth", "Secrets", .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "_CryptoExtras", package: "swift-crypto"),
        ]),
        .testTarget(name: "StateStoreTests", dependencies: ["StateStore", "CookieJar", "Secrets"]),
        .testTarget(name: "BrokerTests", dependencies: ["Broker", "CookieJar", "OAuth", "Secrets", "StateStore"]),
        .testTarget(name: "CookieJarTests", dependencies: ["CookieJar"]),
        .testTarget(name: "NativeMessagingTests", dependencies: ["NativeMessaging", "Varlink"]),
        .testTarget(name: "ConfigTests", dependencies: ["Config"]),
        .testTarget(name: "SystemdTests", dependencies: ["Systemd", logging]),
    ]
)
