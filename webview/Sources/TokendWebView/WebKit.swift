// The WebKitGTK API this build is for: 6.0 (GTK 4) by default; 4.1 (GTK 3)
// with the WebKitGTK4_1 trait, for libtokend-webview's 4.1 backend. The two
// C modules give the calls that differ one name (tokend_webkit_…), and the
// aliases below name the types that Swift imports differently (4.1 declares
// their C structs, 6.0 keeps them opaque), so every other file of the core is
// the same for both.
#if WebKitGTK4_1
@_exported import CWebKit2GTK

typealias CookieManager = UnsafeMutablePointer<WebKitCookieManager>
typealias ContentManager = UnsafeMutablePointer<WebKitUserContentManager>
typealias NavigationDecision = UnsafeMutablePointer<WebKitNavigationPolicyDecision>
typealias JSValue = UnsafeMutablePointer<JSCValue>
typealias JSContext = UnsafeMutablePointer<JSCContext>
#else
@_exported import CWebKitGTK

typealias CookieManager = OpaquePointer
typealias ContentManager = OpaquePointer
typealias NavigationDecision = OpaquePointer
typealias JSValue = OpaquePointer
typealias JSContext = OpaquePointer
#endif
