// swift-tools-version:6.2
import PackageDescription

let nio = Target.Dependency.product(name: "NIOCore", package: "swift-nio")
let nioPosix = Target.Dependency.product(name: "NIOPosix", package: "swift-nio")
let logging = Target.Dependency.product(name: "Logging", package: "swift-log")
let lifecycle = Target.Dependency.product(name: "ServiceLifecycle", package: "swift-service-lifecycle")
let argumentParser = Target.Dependency.product(name: "ArgumentParser", package: "swift-argument-parser")
/// Our own targets build without warnings, and stay so: a warning fails the build.
let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]
/// Crash points and hang hooks exist only in builds made for tests: debug
/// builds, and `make test-crash`'s release build (-DTOKEND_TEST_HOOKS). A
/// release build, and the .deb, contain none.
let hooks: [SwiftSetting] = strict + [.define("TOKEND_TEST_HOOKS", .when(configuration: .debug))]

let package = Package(
    name: "tokend",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "tokend", targets: ["tokend"]),
        .executable(name: "tokenctl", targets: ["tokenctl"]),
        .executable(name: "tokend-native-host", targets: ["tokend-native-host"]),
        .executable(name: "tokend-proxy", targets: ["tokend-proxy"]),
        .library(name: "TokendClient", targets: ["TokendClient"]),
        // The wire model and io.tokend.Broker's types without NIO: the web view package builds on these.
        .library(name: "TokendInterface", targets: ["TokendInterface", "Varlink"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.8.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
    ],
    targets: [
        // Wire types, JSON, interface declarations: no NIO.
        .target(name: "Varlink", swiftSettings: strict),
        // The one timeout race (a body that ignores cancellation is abandoned, not awaited).
        .target(name: "Deadline", swiftSettings: strict),
        // A string type that never prints: tokens and client secrets.
        .target(name: "Secrets", swiftSettings: strict),
        .systemLibrary(name: "CLinux"),
        // The one HTTP/1 head reader (strict, limits each listener passes) and the one web-page rule
        // (Host, Origin, Sec-Fetch-Site): tokend-proxy, tokend's metrics listener, tokenctl's login listener.
        // No Foundation, no NIO.
        .target(name: "HTTPHead", swiftSettings: strict),
        // Who a uid is to a budget: the uids of someone's /etc/subuid range are that someone. tokend's
        // socket and tokend-proxy's TCP slots count persons, not uids.
        .target(name: "Persons", swiftSettings: strict),
        // The Varlink server on a Unix socket: one epoll loop, framing, limits, peer credentials. No NIO.
        .target(name: "UnixServer", dependencies: ["CLinux", "HTTPHead", "Persons", "TokendMetrics", "Varlink", logging], swiftSettings: hooks),
        // The Varlink client (SwiftNIO): pipelined calls and `more` streams.
        .target(name: "VarlinkNIO", dependencies: ["Varlink", nio, nioPosix], swiftSettings: strict),
        // The io.tokend.Broker interface: its one declaration and its typed wire values.
        .target(
            name: "TokendInterface",
            dependencies: ["Varlink"],
            resources: [.embedInCode("io.tokend.Broker.varlink")], swiftSettings: strict
        ),
        // One HTTP/1.1 request and its answer over one connection (SwiftNIO, NIOSSL with the system trust
        // store): what tokend asks of providers. No Foundation, no redirects, bounded in bytes and time.
        .target(name: "HTTPExchange", dependencies: [
            nio, nioPosix, .product(name: "NIOHTTP1", package: "swift-nio"), .product(name: "NIOTLS", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
        ], swiftSettings: strict),
        // Token requests and responses (pure) and the endpoint client over HTTPExchange.
        // Discovery, device and authorization-code logins, ID tokens (jwt-kit).
        .target(name: "OAuth", dependencies: [
            "CookieJar", "Deadline", "DPoP", "HTTPExchange", "Loopback", "TokendMetrics", "Secrets", "Varlink", nio, nioPosix, logging,
            .product(name: "Crypto", package: "swift-crypto"), .product(name: "JWTKit", package: "jwt-kit"),
        ], swiftSettings: strict),
        // DPoP (RFC 9449): proofs, P-256 keys and their RFC 7638 thumbprints, htu, servers' nonces and clocks.
        .target(name: "DPoP", dependencies: [.product(name: "Crypto", package: "swift-crypto")], swiftSettings: strict),
        // tpm2-tss ESAPI (headers: Debian's libtss2-dev) and the steps of the TPM key store, in C; the
        // libraries are opened when a TPM is first used, so tokend runs where they are not installed.
        .systemLibrary(name: "CTSS2"),
        // DPoP keys in a TPM 2.0: non-exportable, only the TPM-wrapped blob stored; signing off the server loop.
        .target(name: "TPMKeys", dependencies: ["CTSS2", "DPoP", .product(name: "Crypto", package: "swift-crypto")], swiftSettings: strict),
        // RFC 6265 cookie jar: parser, storage, retrieval, change log. Foundation only.
        .target(name: "CookieJar", dependencies: ["Loopback"], swiftSettings: strict),
        // Counters, gauges and histograms rendered as OpenMetrics text. Foundation-free, no I/O.
        .target(name: "TokendMetrics", swiftSettings: strict),
        // What counts as loopback (an IP literal in 127/8 or ::1), said once.
        .target(name: "Loopback", swiftSettings: strict),
        .target(name: "StateStore", dependencies: [
            "CookieJar", "Loopback", "TokendMetrics", "Secrets", logging, .product(name: "Crypto", package: "swift-crypto"),
        ], swiftSettings: strict),
        .target(name: "Broker", dependencies: ["CookieJar", "Deadline", "DPoP", "Loopback", "TokendMetrics", "OAuth", "Secrets", "StateStore", logging], swiftSettings: hooks),
        // A PostgreSQL protocol v3 client of our own (one connection, text format, TLS, SCRAM), without
        // Foundation: PostgresNIO linked libFoundation.so and ICU into tokend.
        .target(name: "PostgresWire", dependencies: [
            nio, nioPosix, .product(name: "NIOSSL", package: "swift-nio-ssl"), .product(name: "Crypto", package: "swift-crypto"),
        ], swiftSettings: strict),
        // A session shared by several hosts through PostgreSQL: schema, fleet lock, sealed record, LISTEN.
        .target(name: "Fleet", dependencies: [
            "Broker", "Deadline", "PostgresWire", "TokendMetrics", "StateStore", logging, nio, nioPosix,
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
        ], swiftSettings: strict),
        .target(name: "Config", dependencies: ["Loopback", .product(name: "TOMLKit", package: "TOMLKit")], swiftSettings: strict),
        // libsystemd (Debian: libsystemd-dev) and the small Swift layer over it.
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        .target(name: "Systemd", dependencies: ["CSystemd", logging], swiftSettings: strict),
        .target(name: "TokendServer", dependencies: [
            "Broker", "Config", "CookieJar", "Deadline", "DPoP", "Fleet", "HTTPHead", "Loopback", "TPMKeys", "TokendMetrics", "OAuth", "Secrets", "StateStore", "Systemd", "TokendInterface", "Varlink", "UnixServer",
            logging, lifecycle, .product(name: "UnixSignals", package: "swift-service-lifecycle"),
        ], swiftSettings: hooks),
        // The four programs' code, as libraries; each program's own target below is its short main.
        .target(name: "TokendProgram", dependencies: [
            "TokendServer", "Systemd", "Config", "StateStore", argumentParser, logging, lifecycle,
        ], swiftSettings: strict),
        .target(name: "TokendClient", dependencies: ["Varlink", "VarlinkNIO", "TokendInterface", nio, nioPosix], swiftSettings: strict),
        .target(name: "TokenctlProgram", dependencies: ["Config", "CookieJar", "CSystemd", "HTTPHead", "Loopback", "Persons", "TokendClient", "Varlink", argumentParser], swiftSettings: strict),
        // A local HTTP proxy that puts the session's token and cookies on requests to one upstream.
        .target(name: "ProxyProgram", dependencies: [
            "CLinux", "Deadline", "HTTPHead", "Loopback", "Persons", "TokendClient", argumentParser, logging, nio,
            .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
        ], swiftSettings: strict),
        // WebExtension native messaging framing (pure) and the host the browser starts.
        .target(name: "NativeMessaging", dependencies: ["Varlink"], swiftSettings: strict),
        .target(name: "NativeHostProgram", dependencies: [
            "NativeMessaging", "TokendInterface", "Varlink", "VarlinkNIO",
        ], swiftSettings: strict),
        // tokend is all four, by the name it runs as: the package installs it once and the others as
        // links to it (their shared code paid once, docs/packaging.md). The other three are one each.
        .executableTarget(name: "tokend", dependencies: [
            "TokendProgram", "TokenctlProgram", "ProxyProgram", "NativeHostProgram",
        ], swiftSettings: strict),
        .executableTarget(name: "tokenctl", dependencies: ["TokenctlProgram"], swiftSettings: strict),
        .executableTarget(name: "tokend-proxy", dependencies: ["ProxyProgram"], swiftSettings: strict),
        .executableTarget(name: "tokend-native-host", dependencies: ["NativeHostProgram"], swiftSettings: strict),
        // What several test targets share: waiting for a condition, where a timeout is a failure.
        .target(name: "TestSupport", path: "Tests/TestSupport", swiftSettings: strict),
        .testTarget(name: "VarlinkTests", dependencies: ["Varlink", "VarlinkNIO", nio], swiftSettings: strict),
        .testTarget(name: "HTTPHeadTests", dependencies: ["HTTPHead", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "TokendInterfaceTests", dependencies: ["TokendInterface", "Varlink"], swiftSettings: strict),
        // The server loop over real sockets, and the reference Varlink certification suite against it.
        .testTarget(
            name: "UnixServerTests", dependencies: ["CSystemd", "Persons", "TestSupport", "TokendMetrics", "UnixServer", "Varlink", logging],
            resources: [.embedInCode("Resources/org.varlink.certification.varlink")], swiftSettings: strict),
        .testTarget(
            name: "TokendServerTests", dependencies: ["TestSupport", "TokendServer", "Broker", "Config", "UnixServer", "Varlink"],
            swiftSettings: strict),
        .testTarget(name: "HTTPExchangeTests", dependencies: [
            "HTTPExchange", "TestSupport", nio, nioPosix, .product(name: "NIOSSL", package: "swift-nio-ssl"),
        ], swiftSettings: strict),
        .testTarget(name: "OAuthTests", dependencies: [
            "HTTPExchange", "OAuth", nio, "Secrets", .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "_CryptoExtras", package: "swift-crypto"),
        ], swiftSettings: strict),
        .testTarget(name: "DPoPTests", dependencies: ["DPoP", .product(name: "Crypto", package: "swift-crypto")], swiftSettings: strict),
        .testTarget(name: "TPMKeysTests", dependencies: ["TPMKeys", "CTSS2", "DPoP", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "StateStoreTests", dependencies: ["StateStore", "CookieJar", "Secrets"], swiftSettings: strict),
        .testTarget(name: "BrokerTests", dependencies: ["TestSupport", "Broker", "CookieJar", "OAuth", "Secrets", "StateStore"], swiftSettings: strict),
        .testTarget(name: "CookieJarTests", dependencies: ["CookieJar", "Loopback"], swiftSettings: strict),
        .testTarget(name: "NativeMessagingTests", dependencies: ["NativeMessaging", "Varlink"], swiftSettings: strict),
        .testTarget(name: "ConfigTests", dependencies: ["Config"], swiftSettings: strict),
        .testTarget(name: "TokendMetricsTests", dependencies: ["TokendMetrics"], swiftSettings: strict),
        .testTarget(name: "FleetTests", dependencies: ["Fleet", "Broker"], swiftSettings: strict),
        .testTarget(name: "PostgresWireTests", dependencies: ["PostgresWire", nio, nioPosix, .product(name: "NIOSSL", package: "swift-nio-ssl"), .product(name: "Crypto", package: "swift-crypto")], swiftSettings: strict),
        .testTarget(name: "tokend-proxyTests", dependencies: ["ProxyProgram", "Persons", "TestSupport", nio, .product(name: "NIOHTTP1", package: "swift-nio")], swiftSettings: strict),
        .testTarget(name: "tokenctlTests", dependencies: ["TokenctlProgram"], swiftSettings: strict),
        .testTarget(name: "SystemdTests", dependencies: ["Systemd", logging], swiftSettings: strict),
    ]
)
