import Glibc
import TokendWebView

// The core's C entry points for libtokend-webview-1 (webview/lib/tokend-webview.c),
// as webview/lib/tokend-webview-backend.h declares them. The library loads the
// build of this for the WebKitGTK its process has; its version script exports
// these three and nothing else (the Swift runtime inside stays private).
// Every call comes on the thread that runs GTK, the main thread.

/// `TokendBackendNotify`: (owner, notice, text, count).
public typealias Notify = @convention(c) (UnsafeMutableRawPointer?, Int32, UnsafePointer<CChar>?, Int32) -> Void

/// `TokendBackendNotice`, in its order.
enum NoticeCode: Int32 {
    case log, loggedOut, disconnected, reconnected, cookiesRestored, detached
}

/// The owner of one attachment (the C library's GObject) as the core's `log` and `notify` reach it:
/// until the `detached` notice, which is the last. The owner may be gone once that notice has been
/// handled, and the core may live on a little (an answer of WebKit's cookie store on its way).
@MainActor
final class Owner {
    private let owner: UInt
    private let notify: Notify
    private var detached = false

    init(_ owner: UnsafeMutableRawPointer?, _ notify: @escaping Notify) {
        self.owner = UInt(bitPattern: owner)
        self.notify = notify
    }

    func tell(_ code: NoticeCode, _ text: String? = nil, count: Int = 0) {
        guard !detached else { return }
        if code == .detached { detached = true }
        let owner = UnsafeMutableRawPointer(bitPattern: owner)
        if let text {
            text.withCString { notify(owner, code.rawValue, $0, Int32(clamping: count)) }
        } else {
            notify(owner, code.rawValue, nil, Int32(clamping: count))
        }
    }
}

@_cdecl("tokend_webview_backend_attach")
public func backendAttach(
    _ webView: UnsafeMutableRawPointer, _ session: UnsafePointer<CChar>, _ socket: UnsafePointer<CChar>?,
    _ notify: Notify, _ owner: UnsafeMutableRawPointer?, _ error: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
) -> UnsafeMutableRawPointer? {
    // Plain values across into the main actor (the caller is on the main thread already).
    let (view, owner, session, socket) = (UInt(bitPattern: webView), UInt(bitPattern: owner), String(cString: session),
                                          socket.map { String(cString: $0) })
    nonisolated(unsafe) let notify = notify
    let attached = MainActor.assumeIsolated { () -> Result<UInt, AttachError> in
        let attachment: TokendWebView
        do throws(AttachError) {
            attachment = try TokendWebView.attach(
                to: UnsafeMutablePointer(bitPattern: view)!, session: session, socket: socket)
        } catch {
            return .failure(error)
        }
        let owner = Owner(UnsafeMutableRawPointer(bitPattern: owner), notify)
        attachment.log = { line in owner.tell(.log, line) }
        attachment.notify = { notice in
            switch notice {
            case .loggedOut(let reason): owner.tell(.loggedOut, reason)
            case .disconnected(let reason): owner.tell(.disconnected, reason)
            case .reconnected: owner.tell(.reconnected)
            case .cookiesRestored(let count): owner.tell(.cookiesRestored, count: count)
            case .detached: owner.tell(.detached)
            }
        }
        return .success(UInt(bitPattern: Unmanaged.passRetained(attachment).toOpaque()))
    }
    switch attached {
    case .success(let handle):
        return UnsafeMutableRawPointer(bitPattern: handle)
    case .failure(let refusal):
        error.pointee = strdup(refusal.description)
        return nil
    }
}

@_cdecl("tokend_webview_backend_detach")
public func backendDetach(_ handle: UnsafeMutableRawPointer) {
    let address = UInt(bitPattern: handle)
    MainActor.assumeIsolated {
        Unmanaged<TokendWebView>.fromOpaque(UnsafeMutableRawPointer(bitPattern: address)!).takeUnretainedValue().detach()
    }
}

@_cdecl("tokend_webview_backend_release")
public func backendRelease(_ handle: UnsafeMutableRawPointer) {
    let address = UInt(bitPattern: handle)
    MainActor.assumeIsolated {
        Unmanaged<TokendWebView>.fromOpaque(UnsafeMutableRawPointer(bitPattern: address)!).release()
    }
}
