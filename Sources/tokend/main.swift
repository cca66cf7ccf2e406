import NativeHostProgram
import ProxyProgram
import TokenctlProgram
import TokendProgram

#if canImport(Glibc)
import Glibc
#endif

/// One binary, four programs, chosen by the name it is run by (as busybox
/// does): the package installs this file once, as /usr/sbin/tokend, and
/// tokenctl, tokend-proxy and tokend-native-host as links to it, so the code
/// they share (SwiftNIO, NIOSSL, ArgumentParser, tokend's client) is paid for
/// once (docs/packaging.md). Another name is refused, not taken for the daemon.
switch ProgramName.invoked {
case "tokend": await runTokend()
case "tokenctl": await runTokenctl()
case "tokend-proxy": await runTokendProxy()
case "tokend-native-host": await runNativeHost()
case let other:
    let said = "tokend: started as '\(other)', which is none of its programs: run it as tokend, tokenctl, "
        + "tokend-proxy or tokend-native-host (links to this file by those names)\n"
    _ = Array(said.utf8).withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(64)  // EX_USAGE
}
