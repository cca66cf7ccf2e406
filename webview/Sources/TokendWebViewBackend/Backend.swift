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
        let tell: @MainActor (NoticeCode, String?, Int) -> Void = { code, text, count in
            let owner = UnsafeMutableRawPointer(bitPattern: owner)
            if let text {
                text.withCString { notify(owner, code.rawValue, $0, Int32(clamping: count)) }
            } else {
                notify(owner, code.rawValue, nil, Int32(clamping: count))
            }
        }
        let attachment: TokendWebView
        do throws(AttachError) {
            attachment = try TokendWebView.attach(
                to: UnsafeMutablePointer(bitPattern: view)!, session: session, socket: socket)
        } catch {
            return .failure(error)
        }
        attachment.log = { line in tell(.log, line, 0) }
        attachment.notify = { notice in
            switch notice {
            case .loggedOut(let reason): tell(.loggedOut, reason, 0)
            case .disconnected(let reason): tell(.disconnected, reason, 0)
            case .reconnected: tell(.reconnected, nil, 0)
            case .cookiesRestored(let count): tell(.cookiesRestored, nil, count)
            case .detached: tell(.detached, nil, 0)
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
