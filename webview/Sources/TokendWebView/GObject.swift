// GObject from Swift. WebKitGTK's types arrive as typed pointers or as opaque
// ones depending on how their C struct is declared; both pass through a raw
// pointer. Every callback runs on the GLib main loop, which is the main thread.

@inline(__always) func cast<T>(_ pointer: UnsafeMutableRawPointer?) -> UnsafeMutablePointer<T>? {
    pointer?.assumingMemoryBound(to: T.self)
}

@inline(__always) func raw<T>(_ pointer: UnsafeMutablePointer<T>?) -> UnsafeMutableRawPointer? {
    pointer.map { UnsafeMutableRawPointer($0) }
}

@inline(__always) func raw(_ pointer: OpaquePointer?) -> UnsafeMutableRawPointer? {
    pointer.map { UnsafeMutableRawPointer($0) }
}

/// `g_signal_connect`, a macro in C. `handler` is a `@convention(c)` function.
@discardableResult
func connectSignal<Handler>(
    _ instance: UnsafeMutableRawPointer?, _ signal: String, _ handler: Handler, _ data: UnsafeMutableRawPointer?
) -> gulong {
    g_signal_connect_data(instance, signal, unsafeBitCast(handler, to: GCallback.self), data, nil, GConnectFlags(rawValue: 0))
}

/// A closure kept alive across one C callback: passed retained, taken back once.
@MainActor
final class Once<Argument: Sendable> {
    let body: @MainActor (Argument) -> Void
    init(_ body: @escaping @MainActor (Argument) -> Void) { self.body = body }

    var retained: UnsafeMutableRawPointer { Unmanaged.passRetained(self).toOpaque() }

    nonisolated static func run(_ data: UnsafeMutableRawPointer?, _ argument: Argument) {
        let address = UInt(bitPattern: data)
        MainActor.assumeIsolated {
            Unmanaged<Once<Argument>>.fromOpaque(UnsafeMutableRawPointer(bitPattern: address)!).takeRetainedValue().body(argument)
        }
    }
}

/// The result of a GIO-style asynchronous call, for its `…_finish` function.
struct AsyncResult: @unchecked Sendable {
    let result: OpaquePointer?
}

/// A GAsyncReadyCallback that calls `body` with the result, once.
@MainActor
func whenReady(_ body: @escaping @MainActor (AsyncResult) -> Void) -> (GAsyncReadyCallback, gpointer) {
    let callback: GAsyncReadyCallback = { _, result, data in Once<AsyncResult>.run(data, AsyncResult(result: result)) }
    return (callback, Once(body).retained)
}

/// Runs `body` on the main loop after `milliseconds`; returns the source id (for `g_source_remove`).
@MainActor @discardableResult
func after(milliseconds: UInt32, _ body: @escaping @MainActor () -> Void) -> guint {
    let box = Once<Void> { _ in body() }
    return g_timeout_add_full(G_PRIORITY_DEFAULT, milliseconds, { data in
        Once<Void>.run(data, ())
        return 0  // G_SOURCE_REMOVE
    }, box.retained, nil)
}

/// Takes a GError: its message, and frees it.
func take(_ error: UnsafeMutablePointer<GError>?) -> String? {
    guard let error else { return nil }
    defer { g_error_free(error) }
    return String(cString: error.pointee.message)
}

/// A typed pointer from a raw one, as `OpaquePointer(raw)` is an opaque one: a type that
/// one WebKitGTK API declares (typed) and the other does not (opaque) converts either way.
extension UnsafeMutablePointer {
    init(_ raw: UnsafeMutableRawPointer) {
        self = raw.assumingMemoryBound(to: Pointee.self)
    }
}

/// Runs `body` when `fd` becomes readable (a pidfd: its process ended), once; returns the source id.
@MainActor @discardableResult
func whenReadable(_ fd: Int32, _ body: @escaping @MainActor () -> Void) -> guint {
    let box = Once<Void> { _ in body() }
    return g_unix_fd_add_full(G_PRIORITY_DEFAULT, fd, G_IO_IN, { _, _, data in
        let address = UInt(bitPattern: data)
        MainActor.assumeIsolated {
            Unmanaged<Once<Void>>.fromOpaque(UnsafeMutableRawPointer(bitPattern: address)!).takeUnretainedValue().body(())
        }
        return 0  // G_SOURCE_REMOVE; the box goes with the source, below
    }, box.retained, { data in Unmanaged<Once<Void>>.fromOpaque(data!).release() })
}
