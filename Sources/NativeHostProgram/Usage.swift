/// What `tokend-native-host --help` says: it is started by a browser, not by hand.
enum NativeHostUsage {
    static let text = """
        USAGE: tokend-native-host ORIGIN-OR-MANIFEST [EXTENSION-ID]

        The browser starts this host for the tokend extension (native messaging host
        io.tokend.bridge) and talks to it on standard input and output; it refuses any
        other caller. Register it with `tokenctl browser-bridge --browser chromium`
        (or chrome, firefox). tokend's socket: $TOKEND_SOCKET, else /run/tokend/io.tokend.Broker.

        OPTIONS:
          --version     Show the version.
          -h, --help    Show this help.

        See tokend-native-host(1).
        """
}
