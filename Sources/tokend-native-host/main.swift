import Foundation
import NativeMessaging
import TokendInterface
import Varlink

#if canImport(Glibc)
import Glibc
#endif

/// tokend-native-host: the browser starts it for the tokend extension
/// (native messaging host io.tokend.bridge) and talks to it on stdin/stdout.
/// It exits when stdin closes.

/// The extension this host serves. Chromium passes its origin as the first
/// argument; Firefox passes the manifest path and then the extension's id.
let allowedCallers: Set<String> = ["chrome-extension://eidjeejmieedlnhkabcigeekkgfpheoa/", "bridge@tokend.io"]

let arguments = CommandLine.arguments.dropFirst()
if let first = arguments.first, ["-h", "--help", "--version"].contains(first) {
    print(first == "--version" ? Release.version : NativeHostUsage.text)
    exit(0)
}
guard arguments.contains(where: allowedCallers.contains) else {
    let caller = arguments.first ?? "(none)"
    FileHandle.standardError.write(Data("tokend-native-host: refusing caller \(caller): not the tokend extension\n".utf8))
    exit(1)
}

let socket = BrokerInterface.socketPath()
let output = Output()
let bridge = Bridge(socket: socket, output: output)

/// The browser's messages, read on a thread of their own; the stream ends with stdin.
let messages = AsyncStream<JSONObject?> { continuation in
    Thread.detachNewThread {
        while let header = StandardInput.readExactly(4) {
            let length = NativeMessaging.length(header)
            guard length <= NativeMessaging.maximumIncoming else {
                // Too large to take: drop it, say so, and go on with the next message.
                var left = length
                while left > 0, let skipped = StandardInput.readExactly(min(left, 65536)) { left -= skipped.count }
                continuation.yield(nil)
                continue
            }
            guard let body = StandardInput.readExactly(length) else { break }
            continuation.yield((try? JSONParser.parse(body))?.objectValue ?? [:])
        }
        continuation.finish()
    }
}

await withDiscardingTaskGroup { group in
    for await message in messages {
        guard let message else {
            output.send(["error": "io.tokend.Bridge.RequestTooLarge", "parameters": ["limit": .int(NativeMessaging.maximumIncoming)]])
            continue
        }
        group.addTask { await bridge.handle(message) }
    }
    // stdin closed: the browser is done with us.
    exit(0)
}
