import NativeHostProgram
import ProxyProgram
import TokenctlProgram
import TokendProgram

/// One binary, four programs, chosen by the name it is run by (as busybox
/// does): the package installs this file once, as /usr/sbin/tokend, and
/// tokenctl, tokend-proxy and tokend-native-host as links to it, so the code
/// they share (SwiftNIO, NIOSSL, ArgumentParser, tokend's client) is paid for
/// once (docs/packaging.md). Any other name runs the daemon.
switch ProgramName.invoked {
case "tokenctl": await runTokenctl()
case "tokend-proxy": await runTokendProxy()
case "tokend-native-host": await runNativeHost()
default: await runTokend()
}
