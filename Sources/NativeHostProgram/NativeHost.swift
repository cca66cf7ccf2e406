import NativeMessaging
import TokendInterface
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// The extension this host serves. Chromium passes its origin as the first
/// argument; Firefox passes the manifest path and then the extension's id.
let allowedCallers: Set<String> = ["chrome-extension://eidjeejmieedlnhkabcigeekkgfpheoa/", "bridge@tokend.io"]

/// tokend-native-host: the browser starts it for the tokend extension
/// (native messaging host io.tokend.bridge) and talks to it on stdin/stdout.
/// It exits when stdin closes.
public func runNativeHost() async {
    let arguments = CommandLine.arguments.dropFirst()
    if let first = arguments.first, ["-h", "--help", "--version"].contains(first) {
        print(first == "--version" ? Release.version : NativeHostUsage.text)
        exit(0)
    }
    guard arguments.contains(where: allowedCallers.contains) else {
        let caller = arguments.first ?? "(none)"
        let refusal = Array("tokend-native-host: refusing caller \(caller): not the tokend extension\n".utf8)
        _ = refusal.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        exit(1)
    }

    let socket = BrokerInterface.socketPath()
    let output = Output()
    let bridge = Bridge(socket: socket, output: output)

    await withDiscardingTaskGroup { group in
        for await message in StandardInput.messages() {
            guard let message else {
                output.send(["error": "io.tokend.Bridge.RequestTooLarge", "parameters": ["limit": .int(NativeMessaging.maximumIncoming)]])
                continue
            }
            group.addTask { await bridge.handle(message) }
        }
        // stdin closed: the browser is done with us.
        exit(0)
    }
}
